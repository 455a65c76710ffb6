"""The peer-agreement benchmark's pure parts: each client's run beside the server's own figures for the same
requests, the Markdown table, the verdict against the targets and the table's place in ``docs/benchmarks.md``.
Used by ``bench_peer_agreement.py`` (``make bench-peer``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchkit import fmt_or_na, median_known
from vllm_peer import successful, vllm_window_monotonic_s

from core.serverview_samples import Samples, delta, latency_view

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


# --------------------------------------------------------------------------------------------- output (pure)


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
