"""The rows of reasoning streams and multi-turn conversations (none when a run had neither)."""

from __future__ import annotations

from core.conversations import sessions_text
from core.report_schema import Report
from sidecar.render.cells import Row, fmt

TURN_HEADER = ["turn", "requests", "prompt tokens", "TTFT p50 / p99 ms", "ITL p50 / p99 ms", "E2E p50 / p99 ms",
               "cached tokens", "prefix-cache hit"]  # fmt: skip
"""Columns of :func:`turn_rows`."""


def reasoning_rows(report: Report) -> list[Row]:
    """Answer and reasoning TTFT, thinking time and the token split; none without reasoning."""
    m = report.metrics
    r = m.reasoning
    if r is None:
        return []
    sources = ", ".join(f"{n} {'from usage' if s == 'usage' else 'counted by chunks'}"
                        for s, n in r.tokens_source.items())  # fmt: skip
    return [
        ("Answer TTFT p50 / p99", f"{fmt(r.answer_ttft.p50_ms, 'ms', 0)} / {fmt(r.answer_ttft.p99_ms, 'ms', 0)} "
                                  "(first answer token; TTFT counts reasoning)"),
        ("Reasoning TTFT p50 / thinking p50", f"{fmt(r.reasoning_ttft.p50_ms, 'ms', 0)} / "
                                              f"{fmt(r.think.p50_ms, 'ms', 0)}"),
        ("Reasoning / answer tokens per request", f"{fmt(r.reasoning_tokens_mean, '', 1)} / "
                                                  f"{fmt(r.answer_tokens_mean, '', 1)} ({r.requests} of "
                                                  f"{m.requests_ok} requests reasoned; {sources})"),
    ]  # fmt: skip


def session_rows(report: Report) -> list[Row]:
    """The conversations' line and knobs; none without sessions."""
    m, c = report.metrics, report.config
    if m.sessions is None:
        return []
    rows = [("Sessions", sessions_text(m.sessions))]
    rows.append(("Follow-up turns", {"dataset": "the dataset's real follow-up turns",
                                     "drawn": "drawn from other workload prompts"}.get(c.session_followups or "",
                                                                                        "n/a")))  # fmt: skip
    rows.append(("Think time", c.think_time.text if c.think_time else "none"))
    server = report.server
    if server is not None and server.prefix_cache_hit_rate_percent is not None:
        rows.append(("Prefix-cache hit rate (vLLM counters)", fmt(server.prefix_cache_hit_rate_percent, "%", 1)))
    return rows


def turn_rows(report: Report) -> list[list[str]]:
    """One row per turn index (empty without sessions)."""
    rows = []
    for t in report.metrics.turns:
        itl = f"{fmt(t.itl.p50_ms, '', 1)} / {fmt(t.itl.p99_ms, '', 1)}" if t.itl else "n/a"
        e2e = f"{fmt(t.e2e.p50_ms, '', 0)} / {fmt(t.e2e.p99_ms, '', 0)}" if t.e2e else "n/a"
        rows.append([str(t.turn), str(t.requests), fmt(t.prompt_tokens_mean, "", 0),
                     f"{fmt(t.ttft.p50_ms, '', 0)} / {fmt(t.ttft.p99_ms, '', 0)}", itl, e2e,
                     fmt(t.cached_tokens_mean, "", 0), fmt(t.cache_hit_percent, "%", 0)])  # fmt: skip
    return rows
