"""Client overhead against the server's own clock: our benchmark and vLLM's ``vllm bench serve``, side by side.

Run from the repository root with the stack up: ``make bench-peer`` (``--write-readme``). The workload: ``--requests``
(48) identical prompts of exactly ``--prompt-tokens`` (64) tokens (fitted with the server's ``/tokenize``), exactly
``--output-tokens`` (64) output tokens each, greedy, ``--concurrency`` (8) in a closed loop after ``--warmup`` (4),
both clients reading one ShareGPT file. Two scrapes of vLLM's ``/metrics`` frame each measured run (ours: its
report's cross-check; vLLM's: the wrapper :data:`vllm_peer.VLLM_BENCH_SERVE`), so a client's overhead is its mean
TTFT, ITL or E2E minus the server's (``_sum``/``_count`` deltas) over exactly its measured requests. ITL is one gap
per generated token after the first for all three (:func:`vllm_token_itl_ms`).

``--repeats`` (3) rounds, the order alternating. Targets (medians): our TTFT and ITL overheads ≤ vLLM client's, and
in every round our output tok/s within ±3 % of the server's generated tokens over our window. ``--write-readme``
puts the table into ``docs/benchmarks.md``. Exits 0 when the targets are met, 1 on a miss, 2 when a run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from benchkit import BenchError, fmt_or_na, median_known, run_fixed_load, work_folder
from vllm_peer import (
    PROMPT_TEXT,
    run_vllm_bench,
    sharegpt_prompts,
    successful,
    vllm_bench_argv,
    vllm_window_monotonic_s,
)

from core.serverview_samples import Samples, delta, latency_view, parse_exposition
from core.settings import get_settings
from loadgen.childprocs import cpu_in_window

REPORT_LINE = re.compile(r"\[REPORT\] Baseline saved to (\S+)")
SERVER_TOKENS_TOLERANCE = 0.03  # |our output tok/s ÷ the server's generated tokens over our window − 1|
README = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
MARK_START, MARK_END = "<!-- bench-peer:start -->", "<!-- bench-peer:end -->"
HISTOGRAMS = {
    "ttft": "vllm:time_to_first_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
    "e2e": "vllm:e2e_request_latency_seconds",
}

VLLM_RESULT_KEYS = {"ttft": "ttft", "itl": "itl", "e2e": "e2el"}  # vLLM's result JSON: mean_<key>_ms


@dataclass(frozen=True)
class ClientRun:
    """One client's measured run beside the server's own figures for the same requests; latencies in ms."""

    client: str
    requests_ok: int
    requests_failed: int
    output_tokens_per_sec: float
    client_ms: Mapping[str, float | None]  # ttft, itl, e2e means as the client measured them
    server_ms: Mapping[str, float | None]  # the same from the server's histograms
    server_tokens_per_sec: float | None  # the server's generated tokens over the client's measured window
    cpu_cores: float | None

    def added_ms(self, name: str) -> float | None:
        """What the client added to the server's mean ``name`` (ttft, itl, e2e)."""
        client, server = self.client_ms.get(name), self.server_ms.get(name)
        return None if client is None or server is None else client - server

    @property
    def tokens_ratio(self) -> float | None:
        """Output tok/s ÷ the server's generated tokens per second over the same window."""
        server = self.server_tokens_per_sec
        return self.output_tokens_per_sec / server if server else None


def ours_from_report(report: Mapping[str, Any]) -> ClientRun:
    """Our run from its report JSON (pure): the client's means, the cross-check's server means over its window."""
    m, server = report["metrics"], report.get("server") or {}
    overhead = (server.get("client_overhead") or [{}])[0]
    figures = {f["name"]: f for f in overhead.get("figures", [])}
    duration_s = float(m["duration_s"])
    generated = server.get("generation_tokens")
    return ClientRun(
        client="ours",
        requests_ok=int(m["requests_ok"]),
        requests_failed=int(m["requests_failed"]),
        output_tokens_per_sec=float(m["output_tokens_per_sec"]),
        client_ms={name: figures.get(name, {}).get("client_mean_ms") for name in HISTOGRAMS},
        server_ms={name: figures.get(name, {}).get("server_mean_ms") for name in HISTOGRAMS},
        server_tokens_per_sec=generated / duration_s if generated is not None and duration_s > 0 else None,
        cpu_cores=(report.get("client") or {}).get("cpu_cores_used"),
    )


def vllm_token_itl_ms(result: Mapping[str, Any]) -> float | None:
    """vLLM's client's mean ITL with one gap per token, as the server's histogram counts them (pure; needs
    ``--save-detailed``). Its own ``mean_itl_ms`` also averages in the gap from the role-only chunk (where it stamps
    TTFT) to the first token's chunk — near 0, both leave in one write — i.e. 64 gaps for 63 tokens' worth of time,
    which puts it ≈ ITL/64 lower than the server's per-token figure by definition alone. That first gap is dropped."""
    gaps = [g for per_request in successful(result, "itls") for g in per_request[1:]]
    return sum(gaps) / len(gaps) * 1000.0 if gaps else None


def theirs_from_result(
    result: Mapping[str, Any], before: Samples | None, after: Samples | None, cpu_s: float | None
) -> ClientRun:
    """vLLM's run from its ``--save-result`` JSON and the scrapes framing its measured requests (pure)."""
    window = vllm_window_monotonic_s(result)
    span_s = window[1] - window[0] if window else float(result["duration"])
    server_ms: dict[str, float | None] = dict.fromkeys(HISTOGRAMS)
    generated = None
    if before is not None and after is not None:
        server_ms = {name: latency_view(before, after, metric).mean_ms for name, metric in HISTOGRAMS.items()}
        generated = delta(before, after, "vllm:generation_tokens_total")
    return ClientRun(
        client="vllm",
        requests_ok=int(result["completed"]),
        requests_failed=int(result.get("failed", 0)),
        output_tokens_per_sec=float(result["output_throughput"]),
        client_ms={
            **{name: result.get(f"mean_{key}_ms") for name, key in VLLM_RESULT_KEYS.items()},
            "itl_own": result.get("mean_itl_ms"),
            "itl": vllm_token_itl_ms(result) if result.get("itls") else result.get("mean_itl_ms"),
        },
        server_ms=server_ms,
        server_tokens_per_sec=generated / float(result["duration"]) if generated is not None else None,
        cpu_cores=cpu_s / span_s if cpu_s is not None and span_s > 0 else None,
    )


def _added(run: ClientRun, name: str, spec: str) -> str:
    added = run.added_ms(name)
    if added is None:
        return "n/a"
    return f"{added:+{spec}} ms ({run.client_ms[name]:{spec}} − {run.server_ms[name]:{spec}})"


def table_lines(rounds: Sequence[Sequence[ClientRun]]) -> list[str]:
    """The Markdown table: one row per client and round, in the order they ran."""
    lines = [
        "| round | client | output tok/s | ÷ server's tokens/s | TTFT mean, client − server | "
        "ITL mean, client − server | E2E mean, client − server | client cores |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, runs in enumerate(rounds):
        for r in runs:
            name = "`vllm bench serve`" if r.client == "vllm" else "ours"
            own, server_itl = r.client_ms.get("itl_own"), r.server_ms.get("itl")
            own_text = "" if own is None or server_itl is None else f"; its own mean_itl_ms: {own - server_itl:+.2f} ms"
            lines.append(
                f"| {i} | {name} | {r.output_tokens_per_sec:.1f} | {fmt_or_na(r.tokens_ratio, '.3f')} | "
                f"{_added(r, 'ttft', '.0f')} | {_added(r, 'itl', '.2f')}{own_text} | {_added(r, 'e2e', '.0f')} | "
                f"{fmt_or_na(r.cpu_cores, '.2f')} |"
            )
    return lines


def verdict_lines(rounds: Sequence[Sequence[ClientRun]]) -> tuple[list[str], bool]:
    """The targets judged over the rounds (module docstring); the lines and whether all pass."""
    by = {c: [next(r for r in runs if r.client == c) for runs in rounds] for c in ("ours", "vllm")}
    lines, passed = [], True
    for name, spec in (("ttft", ".1f"), ("itl", ".2f")):
        ours = median_known([r.added_ms(name) for r in by["ours"]])
        theirs = median_known([r.added_ms(name) for r in by["vllm"]])
        ok = ours is not None and theirs is not None and ours <= theirs
        passed &= ok
        lines.append(
            f"[PEER] {name.upper()} overhead (median of {len(rounds)}): ours {fmt_or_na(ours, '+' + spec)} ms, "
            f"vLLM's client {fmt_or_na(theirs, '+' + spec)} ms  target ours ≤ theirs  " + ("PASS" if ok else "FAIL")
        )
    ratios = [r.tokens_ratio for r in by["ours"]]
    ok = all(x is not None and abs(x - 1) <= SERVER_TOKENS_TOLERANCE for x in ratios)
    passed &= ok
    lines.append(
        "[PEER] our output tok/s ÷ server's generated tokens/s over our window: "
        + ", ".join(fmt_or_na(x, ".3f") for x in ratios)
        + f"  target 1 ± {SERVER_TOKENS_TOLERANCE:.2f}  "
        + ("PASS" if ok else "FAIL")
    )
    return lines, passed


def with_table(readme: str, block: str) -> str:
    """``readme`` with the text between the bench-peer markers replaced by ``block`` (pure).

    Raises:
        ValueError: the markers are missing.
    """
    start, end = readme.find(MARK_START), readme.find(MARK_END)
    if start < 0 or end < start:
        raise ValueError(f"{README} has no {MARK_START} … {MARK_END} section")
    return readme[: start + len(MARK_START)] + "\n" + block.rstrip() + "\n" + readme[end:]


def fitted_prompt(base_url: str, headers: Mapping[str, str], tokens: int) -> str:
    """The longest prefix of the peer prompt text with exactly ``tokens`` tokens by the server's ``/tokenize``.

    Raises:
        BenchError: the server cannot count tokens, or no prefix has exactly that many.
    """
    text = PROMPT_TEXT * (tokens // 8 + 2)

    def count(prefix: str) -> int:
        try:
            response = httpx.post(
                f"{base_url}/tokenize", json={"prompt": prefix, "add_special_tokens": False},
                headers=dict(headers), timeout=10,
            )  # fmt: skip
            response.raise_for_status()
            return int(response.json()["count"])
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            raise BenchError(f"{base_url}/tokenize could not count a prompt: {exc}") from None

    low, high = 1, len(text)  # the longest prefix of at most `tokens` tokens (token counts grow with the prefix)
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if count(text[:mid]) <= tokens else (low, mid - 1)
    for end in (low, *range(low - 1, max(low - 6, 0), -1)):  # a merge may jump a count: look a little shorter
        if count(text[:end]) == tokens:
            return text[:end]
    raise BenchError(f"no prefix of the prompt text has exactly {tokens} tokens")


def run_theirs(dataset: Path, workdir: Path, tag: str, args: argparse.Namespace) -> ClientRun:
    """One ``vllm bench serve`` run, framed by the wrapper's scrapes after its warm-ups and after its last request."""
    argv = vllm_bench_argv(
        args.vllm_url, dataset, workdir, f"vllm_{tag}.json", requests=args.requests, concurrency=args.concurrency,
        output_tokens=args.output_tokens, warmups=args.warmup, tokenizer=args.tokenizer,
    )  # fmt: skip
    frames = workdir / f"vllm_{tag}_metrics"
    frames.mkdir()
    result, samples = run_vllm_bench(argv, workdir / f"vllm_{tag}.log", args.timeout_s, metrics_dir=frames)
    scraped = [frames / f"metrics_{i}.txt" for i in (0, 1)]
    if not all(p.exists() for p in scraped):
        raise BenchError(f"vllm bench serve saved no /metrics frame in {frames}")
    before, after = (parse_exposition(p.read_text()) for p in scraped)
    window = vllm_window_monotonic_s(result)
    cpu_s = cpu_in_window(samples, *window, monotonic=True) if window and samples else None
    return theirs_from_result(result, before, after, cpu_s)


def run_ours(dataset: Path, workdir: Path, tag: str, args: argparse.Namespace) -> ClientRun:
    """One ``python -m loadgen.command.benchmark`` run (its report's cross-check frames its measured window).

    Raises:
        BenchError: the run failed or printed no report path.
    """
    log_path = workdir / f"ours_{tag}.log"

    def reported() -> re.Match[str] | None:
        return REPORT_LINE.search(log_path.read_text(encoding="utf-8", errors="replace"))

    run_fixed_load(os.environ, log_path, args, vllm_url=args.vllm_url, sidecar_url=args.sidecar_url, dataset=dataset,
                   done=lambda: reported() is not None)  # fmt: skip
    match = reported()
    assert match is not None
    return ours_from_report(json.loads(Path(match.group(1)).read_text()))


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and judge; 0 pass, 1 miss, 2 a run failed."""
    settings = get_settings()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vllm-url", default=settings.vllm_url, help="vLLM base URL (default: the local stack)")
    parser.add_argument("--sidecar-url", default=settings.sidecar_url, help="sidecar base URL (writes our report)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--requests", type=int, default=48, help="measured requests per client")
    parser.add_argument("--warmup", type=int, default=4, help="warm-up requests per client")
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=64, help="tokens of the (one) prompt text")
    parser.add_argument("--repeats", type=int, default=3, help="rounds (the order alternates)")
    parser.add_argument("--tokenizer", default=None, help="vLLM client tokenizer (default: the served model's root)")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="per client run")
    parser.add_argument("--write-readme", action="store_true", help="put the table into docs/benchmarks.md")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, results)")
    args = parser.parse_args(argv)
    for flag in ("concurrency", "requests", "output_tokens", "repeats", "prompt_tokens"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1")
    headers = settings.vllm_headers
    rounds: list[list[ClientRun]] = []
    with work_folder("peer_overhead_", args.keep, BenchError) as workdir:
        prompt = fitted_prompt(args.vllm_url, headers, args.prompt_tokens)
        dataset = workdir / "prompts.sharegpt.json"
        dataset.write_text(json.dumps(sharegpt_prompts(args.requests, text=prompt), ensure_ascii=False))
        print(
            f"[PEER] {args.vllm_url}: concurrency {args.concurrency}, {args.requests} identical {args.prompt_tokens}-"
            f"token prompts (+{args.warmup} warm-up), {args.output_tokens} output tokens (ignore_eos), "
            f"{args.repeats} round(s); work folder {workdir}",
            flush=True,
        )
        for i in range(args.repeats):
            runs = []
            for client in ("ours", "vllm") if i % 2 == 0 else ("vllm", "ours"):
                started = time.monotonic()
                run = (run_ours if client == "ours" else run_theirs)(dataset, workdir, str(i), args)
                runs.append(run)
                print(
                    f"[PEER] round {i} {client}: {run.requests_ok} ok, {run.requests_failed} failed, "
                    f"{run.output_tokens_per_sec:.1f} tok/s, TTFT {fmt_or_na(run.added_ms('ttft'), '+.1f')} ms, "
                    f"ITL {fmt_or_na(run.added_ms('itl'), '+.2f')} ms, "
                    f"E2E {fmt_or_na(run.added_ms('e2e'), '+.1f')} ms over the "
                    f"server's own ({time.monotonic() - started:.0f} s wall)",
                    flush=True,
                )
            rounds.append(runs)
    table = table_lines(rounds)
    lines, passed = verdict_lines(rounds)
    print("\n".join([*table, "", *lines]))
    if args.write_readme:
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        block = "\n".join([f"`make bench-peer`, {stamp}, {args.vllm_url}:", "", *table, "", *(f"- {x}" for x in lines)])
        README.write_text(with_table(README.read_text(), block))
        print(f"[PEER] table written to {README}")
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
