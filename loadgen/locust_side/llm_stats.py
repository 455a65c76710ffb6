"""LLM statistics of a Locust run kept apart from its request statistics, so requests are counted once.

Locust's own table counts every ``events.request`` as a request; firing TTFT, TPOT and tok/s there made one LLM request
look like four and summed milliseconds with tokens per second in the Aggregated row. Here each request is one Locust
request (``LLM e2e``, see :mod:`loadgen.locust_side.locust_events`); its TTFT, TPOT, ITL gaps, decode speed and output
length go to :class:`LlmStats`: latency distributions in Locust's own :class:`~locust.stats.StatsEntry` (same rounding,
percentiles and merging as its request table) and output tokens per second of the wall clock.

Distributed runs aggregate like Locust's request statistics: each worker adds its share (since its last report)
to the ``report_to_master`` message under :data:`REPORT_KEY`, and the master merges it (``worker_report``), as
``locust.stats.setup_distributed_stats_event_listeners`` does for requests.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from locust.stats import RequestStats, StatsEntry

from core.records import RequestRecord

REPORT_KEY = "llm_stats"
METHOD = "LLM"
CURRENT_WINDOW_S = 10  # "current" tok/s: the last 10 complete seconds, like Locust's current RPS
REPORT_LAG_S = 2  # seconds left out at the end of the window: workers report every 3 s


@dataclass(frozen=True)
class Metric:
    """One distribution shown in the LLM tab: its entry name, label and unit."""

    name: str
    label: str
    unit: str


METRICS = (
    Metric("ttft", "TTFT (time to first token)", "ms"),
    Metric("tpot", "TPOT (time per output token after the first)", "ms"),
    Metric("itl", "ITL (gap between streamed chunks)", "ms"),
    Metric("decode_speed", "Decode speed per request (1000 / TPOT)", "tok/s"),
    Metric("output_tokens", "Output tokens per request", "tokens"),
)
PERCENTILES = (0.5, 0.9, 0.99)


class LlmStats:
    """Latency distributions (ms), decode speed (tok/s), output lengths and output tokens per second of one Locust
    process (a worker's share since its last report, or the master's/local runner's totals).

    ``clock`` gives Unix seconds (injectable for tests).
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.started_s = clock()
        self.stats = RequestStats(use_response_times_cache=False)
        self.tokens_by_second: defaultdict[int, int] = defaultdict(int)
        self.output_tokens = 0
        self.requests_cut = 0

    def clear(self) -> None:
        """Forget everything (a new test, or the web UI's Reset Stats)."""
        self.started_s = self.clock()
        self.stats.clear_all()
        self.tokens_by_second.clear()
        self.output_tokens = 0
        self.requests_cut = 0

    def add(self, record: RequestRecord) -> None:
        """Count a successful request's TTFT (from its schedule in open loop), TPOT, ITL gaps, decode speed and
        output tokens; a failed request is only in Locust's request table (with its cause)."""
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
        data = {
            "entries": self.stats.serialize_stats(),
            "tokens_by_second": dict(self.tokens_by_second),
            "output_tokens": self.output_tokens,
            "requests_cut": self.requests_cut,
        }
        self.tokens_by_second.clear()
        self.output_tokens = 0
        self.requests_cut = 0
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
        """One row per metric of :data:`METRICS` that has values: ``name``, ``unit``, ``count``, ``median``,
        ``p90``, ``p99``, ``avg``, ``min``, ``max`` (in the metric's unit; percentiles from Locust's rounded
        buckets, so two significant digits above 100)."""
        rows = []
        for metric in METRICS:
            entry = self.stats.entries.get((metric.name, METHOD))
            if entry is None or entry.num_requests == 0:
                continue
            p50, p90, p99 = (entry.get_response_time_percentile(p) for p in PERCENTILES)
            rows.append(
                {
                    "name": metric.label,
                    "unit": metric.unit,
                    "count": entry.num_requests,
                    "median": _round(p50),
                    "p90": _round(p90),
                    "p99": _round(p99),
                    "avg": _round(entry.avg_response_time),
                    "min": _round(entry.min_response_time),
                    "max": _round(entry.max_response_time),
                }
            )
        return rows

    def current_tokens_per_s(self) -> float | None:
        """Output tokens per second over the last :data:`CURRENT_WINDOW_S` complete seconds since the test started
        (tokens count when their request ends); None in the test's first seconds."""
        end = int(self.clock()) - REPORT_LAG_S
        start = max(end - CURRENT_WINDOW_S, int(self.started_s) + 1)
        if end <= start:
            return None
        return sum(self.tokens_by_second.get(s, 0) for s in range(start, end)) / (end - start)

    def throughput_rows(self, elapsed_s: float | None) -> list[dict[str, Any]]:
        """``name``/``value`` rows: output tokens, output tok/s over ``elapsed_s`` (the test so far) and over the
        last 10 s, and the requests cut by a stop."""
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
                name: {
                    "count": entry.num_requests,
                    "total": entry.total_response_time,
                    "total_content_length": entry.total_content_length,
                }
                for (name, _), entry in self.stats.entries.items()
            },
        }

    def text_table(self, elapsed_s: float | None) -> str:
        """The same figures as a plain-text table (printed at the end of a headless run)."""
        lines = [f"{'LLM statistics':<52} {'unit':>6} {'count':>7} {'median':>8} {'p90':>8} {'p99':>8} {'avg':>8}"]
        for row in self.latency_rows():
            lines.append(
                f"{row['name']:<52} {row['unit']:>6} {row['count']:>7} {row['median']:>8} {row['p90']:>8} "
                f"{row['p99']:>8} {row['avg']:>8}"
            )
        lines.extend(f"{row['name']:<52} {row['value']}" for row in self.throughput_rows(elapsed_s))
        return "\n".join(lines)


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 1)
