"""LLM statistics of a Locust run, apart from its request table (where one request stays one ``LLM e2e`` row).

TTFT, TPOT, ITL, decode speed and output length are kept in Locust's own :class:`~locust.stats.StatsEntry` (its
rounding, percentiles and merging), plus output tokens per wall-clock second. Workers add their share to
``report_to_master`` under :data:`REPORT_KEY` and the master merges it, as Locust does for requests.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from locust.stats import RequestStats, StatsEntry

from core.records import RequestRecord

REPORT_KEY = "llm_stats"
METHOD = "LLM"
CURRENT_WINDOW_S = 10  # "current" tok/s: the last 10 complete seconds, like Locust's current RPS
REPORT_LAG_S = 2  # seconds left out at the end of the window: workers report every 3 s


METRICS = (  # the LLM tab's distributions: entry name, label, unit
    ("ttft", "TTFT (time to first token)", "ms"),
    ("tpot", "TPOT (time per output token after the first)", "ms"),
    ("itl", "ITL (gap between streamed chunks)", "ms"),
    ("decode_speed", "Decode speed per request (1000 / TPOT)", "tok/s"),
    ("output_tokens", "Output tokens per request", "tokens"),
)
PERCENTILES = (0.5, 0.9, 0.99)
ROW_FIGURES = ("median", "p90", "p99", "avg", "min", "max")


class LlmStats:
    """Latency distributions (ms), decode speed (tok/s), output lengths and output tok/s of one Locust process (a
    worker's share since its last report, or the master's/local totals); ``clock`` gives Unix seconds."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.stats = RequestStats(use_response_times_cache=False)
        self.tokens_by_second: defaultdict[int, int] = defaultdict(int)
        self.clear()

    def clear(self) -> None:
        """Forget everything (a new test, or the web UI's Reset Stats)."""
        self.started_s = self.clock()
        self.stats.clear_all()
        self._forget_counts()

    def _forget_counts(self) -> None:
        self.tokens_by_second.clear()
        self.output_tokens = 0
        self.requests_cut = 0

    def add(self, record: RequestRecord) -> None:
        """Count a successful request's TTFT (from its schedule in open loop), TPOT, ITL, decode speed and output
        tokens (a failed one is only in Locust's request table)."""
        if not record.ok:
            return
        if record.ttft_ms is not None:
            self._log("ttft", record.ttft_ms + record.queue_delay_ms)
        for gap_ms in record.itl_ms:
            self._log("itl", gap_ms)
        if record.tpot_ms is not None and record.tpot_ms > 0:
            self._log("tpot", record.tpot_ms)
            self._log("decode_speed", 1000.0 / record.tpot_ms)
        if record.output_tokens is not None:
            self._log("output_tokens", record.output_tokens, record.output_tokens)
            self.tokens_by_second[int(self.clock())] += record.output_tokens
            self.output_tokens += record.output_tokens

    def add_cut(self) -> None:
        """One request was cut by the test's stop before it finished."""
        self.requests_cut += 1

    def _log(self, name: str, value: float, content_length: int = 0) -> None:
        self.stats.get(name, METHOD).log(value, content_length)  # type: ignore[arg-type]  # floats are rounded

    # --- distributed mode -------------------------------------------------------------------------------------
    def report(self) -> dict[str, Any]:
        """This worker's share since its last report (then forgotten here), for ``report_to_master``."""
        data = {"entries": self.stats.serialize_stats(), "tokens_by_second": dict(self.tokens_by_second),
                "output_tokens": self.output_tokens, "requests_cut": self.requests_cut}
        self._forget_counts()
        return data

    def merge(self, data: dict[str, Any]) -> None:
        """Add a worker's :meth:`report` (master side of ``worker_report``)."""
        for entry_data in data.get("entries", []):
            entry = StatsEntry.unserialize(entry_data, self.stats)
            self.stats.get(entry.name, entry.method).extend(entry)
        for second, tokens in data.get("tokens_by_second", {}).items():
            self.tokens_by_second[int(second)] += int(tokens)
        self.output_tokens += int(data.get("output_tokens", 0))
        self.requests_cut += int(data.get("requests_cut", 0))

    # --- what is shown -----------------------------------------------------------------------------------------
    def latency_rows(self) -> list[dict[str, Any]]:
        """One row per metric of :data:`METRICS` with values: ``name``, ``unit``, ``count`` and :data:`ROW_FIGURES`
        in its unit (percentiles from Locust's rounded buckets: two significant digits above 100)."""
        rows = []
        for name, label, unit in METRICS:
            entry = self.stats.entries.get((name, METHOD))
            if entry is None or entry.num_requests == 0:
                continue
            figures = (*(entry.get_response_time_percentile(p) for p in PERCENTILES), entry.avg_response_time,
                       entry.min_response_time, entry.max_response_time)  # fmt: skip
            row = {"name": label, "unit": unit, "count": entry.num_requests}
            rows.append(row | {k: _round(v) for k, v in zip(ROW_FIGURES, figures, strict=True)})
        return rows

    def current_tokens_per_s(self) -> float | None:
        """Output tok/s over the last :data:`CURRENT_WINDOW_S` complete seconds of the test (tokens count at their
        request's end); None in the test's first seconds."""
        end = int(self.clock()) - REPORT_LAG_S
        start = max(end - CURRENT_WINDOW_S, int(self.started_s) + 1)
        if end <= start:
            return None
        return sum(self.tokens_by_second.get(s, 0) for s in range(start, end)) / (end - start)

    def throughput_rows(self, elapsed_s: float | None) -> list[dict[str, Any]]:
        """``name``/``value`` rows: output tokens, tok/s over ``elapsed_s`` and the last 10 s, requests cut."""

        overall = self.output_tokens / elapsed_s if elapsed_s and elapsed_s > 0 else None
        return [
            {"name": "Output tokens (all requests)", "value": self.output_tokens},
            {"name": "Output tok/s since the test started", "value": _round(overall)},
            {"name": f"Output tok/s, last {CURRENT_WINDOW_S} s", "value": _round(self.current_tokens_per_s())},
            {"name": "Requests cut by a stop (unfinished, counted as failures)", "value": self.requests_cut},
        ]

    def snapshot(self, elapsed_s: float | None) -> dict[str, Any]:
        """Everything shown, as JSON (the ``/llm-stats`` route and ``--llm-stats-file``)."""
        return {
            "latency": self.latency_rows(),
            "throughput": self.throughput_rows(elapsed_s),
            "output_tokens": self.output_tokens,
            "requests_cut": self.requests_cut,
            "entries": {
                name: {"count": entry.num_requests, "total": entry.total_response_time,
                       "total_content_length": entry.total_content_length}
                for (name, _), entry in self.stats.entries.items()
            },
        }

    def text_table(self, elapsed_s: float | None) -> str:
        """The same figures as a plain-text table (printed at the end of a headless run)."""
        lines = [f"{'LLM statistics':<52} {'unit':>6} {'count':>7} {'median':>8} {'p90':>8} {'p99':>8} {'avg':>8}"]
        for row in self.latency_rows():
            lines.append(f"{row['name']:<52} {row['unit']:>6} {row['count']:>7} {row['median']:>8} {row['p90']:>8} "
                         f"{row['p99']:>8} {row['avg']:>8}")
        lines.extend(f"{row['name']:<52} {row['value']}" for row in self.throughput_rows(elapsed_s))
        return "\n".join(lines)


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 1)
