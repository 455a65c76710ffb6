"""Aggregation of parsed log data in bounded state: engine stats, request stats with streaming percentiles
(:class:`StreamingQuantiles`), slowest requests (each ``summary()`` gives a JSON-ready dict); and the streaming reader
of ``logs/requests.jsonl`` (:mod:`core.requestlog`) that counts bad lines instead of failing."""

from __future__ import annotations

import heapq
import itertools
import math
import os
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ddsketch import LogCollapsingLowestDenseDDSketch

from core.logfiles import BLOCK_BYTES, ReadStats, StrPath, iter_blocks
from core.parsing import epoch_to_iso
from core.requestlog import BadLogLine, RequestLogLine
from engine.vllmlog.grammar import METRIC_FIELDS, normalise, text

MAX_BAD_EXAMPLES = 5
MAX_ERROR_CAUSES = 200
MAX_SOURCES = 50  # later new ``source`` values count as ``(other)``


@dataclass
class _Running:
    """Count, sum, maximum and last value of one engine figure."""

    count: int = 0
    total: float = 0.0
    maximum: float = float("-inf")
    last: float = 0.0

    def add_all(self, values: list[float]) -> None:
        if values:
            self.count += len(values)
            self.total += sum(values)
            self.maximum = max(self.maximum, max(values))
            self.last = values[-1]

    def as_dict(self) -> dict[str, float]:
        return {"mean": round(self.total / self.count, 3), "max": self.maximum, "last": self.last}


class EngineSummary:
    """Summary of the engine's periodic stats lines (throughputs in tokens/s, KV cache and hit rate in %)."""

    def __init__(self) -> None:
        self.samples = 0
        self.figures: dict[str, _Running] = {name: _Running() for name in METRIC_FIELDS if name != "kv_cache_device"}
        self.busy_generation = _Running()
        self.kv_cache_devices: Counter[str] = Counter()
        self.first_s: float | None = None
        self.last_s: float | None = None

    def add_rows(self, rows: list[tuple[bytes, ...]], first_s: float | None, last_s: float | None) -> None:
        """Rows of :data:`~engine.vllmlog.grammar.METRICS_RE` groups, oldest first; times of the first and last."""
        self.samples += len(rows)
        columns = list(zip(*rows, strict=True))
        for name, column in zip(METRIC_FIELDS, columns, strict=True):
            if name == "kv_cache_device":
                self.kv_cache_devices.update(device.decode("ascii", "replace") for device in column if device)
            else:
                self.figures[name].add_all([float(value) for value in column if value])
        running, generation = columns[2], columns[1]
        self.busy_generation.add_all([float(g) for g, r in zip(generation, running, strict=True) if r and r != b"0"])
        if first_s is not None:
            self.first_s = first_s if self.first_s is None else min(self.first_s, first_s)
        if last_s is not None:
            self.last_s = last_s if self.last_s is None else max(self.last_s, last_s)

    def summary(self) -> dict[str, Any]:
        """Samples, time span and mean/max/last of each figure (``busy_generation_tokens_per_s``: while busy)."""
        return {
            "samples": self.samples,
            "first": epoch_to_iso(self.first_s),
            "last": epoch_to_iso(self.last_s),
            "kv_cache_device": self.kv_cache_devices.most_common(1)[0][0] if self.kv_cache_devices else None,
            **{name: figure.as_dict() for name, figure in self.figures.items() if figure.count},
            "busy_generation_tokens_per_s": self.busy_generation.as_dict() if self.busy_generation.count else None,
        }


RELATIVE_ACCURACY = 0.005
"""Largest relative error of a percentile (0.005 = 0.5 %)."""
MAX_BINS = 4096
"""Bins kept: 4096 bins of ratio (1 + a) / (1 - a) cover 10^17.8 at a = 0.5 %."""
PERCENTILES = (50, 90, 95, 99)
BATCH = 4096
"""Values buffered before they go into the sketch (count, sum, min and max of a batch are then taken in C)."""


class StreamingQuantiles:
    """Count, exact mean and maximum, and sketched percentiles of non-negative values (e.g. milliseconds) in bounded
    memory (~130 KB) with a stated error bound.

    DDSketch (Masson, Rim, Lee, VLDB 2019; the ``ddsketch`` package) returns any value of a logarithmic bin within a
    relative error ``alpha``; percentiles interpolate linearly between the two nearest ranks as ``core.stats`` does,
    each read within ``alpha``, so every percentile is within :data:`RELATIVE_ACCURACY` of the exact one (over < 17
    decades; beyond, the lowest bins merge). Mean and maximum are exact.
    """

    def __init__(self, relative_accuracy: float = RELATIVE_ACCURACY, max_bins: int = MAX_BINS) -> None:
        self._sketch = LogCollapsingLowestDenseDDSketch(relative_accuracy, bin_limit=max_bins)
        self._relative_accuracy = relative_accuracy
        self._pending: array[float] = array("d")
        self._count = 0
        self._total = 0.0
        self._minimum = math.inf
        self._maximum = -math.inf

    def add(self, value: float) -> None:
        """One value (finite, >= 0; the request log's reader has checked)."""
        pending = self._pending
        pending.append(value)
        if len(pending) >= BATCH:
            self._flush()

    def _flush(self) -> None:
        pending = self._pending
        if not pending:
            return
        add = self._sketch.add
        for value in pending:
            add(value)
        self._count += len(pending)
        self._total += math.fsum(pending)
        self._minimum = min(self._minimum, min(pending))
        self._maximum = max(self._maximum, max(pending))
        del pending[:]

    @property
    def count(self) -> int:
        """Values added."""
        return self._count + len(self._pending)

    def _at_rank(self, rank: int) -> float:
        """The value at 0-based ``rank`` of the sorted values, within the relative accuracy (after a flush)."""
        if rank <= 0:
            return self._minimum
        if rank >= self._count - 1:
            return self._maximum
        # rank + 0.5 lies strictly inside the rank's slot of cumulative counts: float error cannot move it
        estimate = self._sketch.get_quantile_value((rank + 0.5) / (self._count - 1))
        if estimate is None:  # only for an empty sketch, which has no ranks
            return self._minimum
        return min(max(float(estimate), self._minimum), self._maximum)

    def quantile(self, q: float) -> float | None:
        """The ``q``-quantile (0..1), linearly interpolated between the nearest ranks; None when empty."""
        self._flush()
        if self._count == 0:
            return None
        position = q * (self._count - 1)
        low = math.floor(position)
        fraction = position - low
        value = self._at_rank(low)
        if fraction > 0:
            value += (self._at_rank(low + 1) - value) * fraction
        return value

    def summary(self) -> dict[str, Any] | None:
        """``p50``..``p99`` (within ``percentile_error_pct``), exact ``mean`` and ``max``; None if empty."""
        self._flush()
        if self._count == 0:
            return None
        out: dict[str, Any] = {f"p{p}": round(self.quantile(p / 100) or 0.0, 3) for p in PERCENTILES}
        out["mean"] = round(self._total / self._count, 3)
        out["max"] = self._maximum
        out["percentile_error_pct"] = round(self._relative_accuracy * 100, 3)
        return out


@dataclass
class RequestStats:
    """Requests, error rate, latency percentiles (ms, :class:`StreamingQuantiles`) and token throughput (tokens/s)."""

    total: int = 0
    ok: int = 0
    errors: int = 0
    cancelled: int = 0
    by_source: Counter[str] = field(default_factory=Counter)
    error_causes: Counter[str] = field(default_factory=Counter)
    total_ms: StreamingQuantiles = field(default_factory=StreamingQuantiles)
    ttft_ms: StreamingQuantiles = field(default_factory=StreamingQuantiles)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    first_start_s: float | None = None
    last_end_s: float | None = None

    def add(self, record: RequestLogLine) -> None:
        """Count one record; latencies of successful requests feed the percentiles."""
        self.total += 1
        source = record.source
        self.by_source[source if source in self.by_source or len(self.by_source) < MAX_SOURCES else "(other)"] += 1
        if record.status == "ok":
            self.ok += 1
            if record.total_ms is not None:
                self.total_ms.add(record.total_ms)
            if record.ttft_ms is not None:
                self.ttft_ms.add(record.ttft_ms)
        elif record.status == "cancelled":  # the reader left (Stop, tab closed): not a server failure
            self.cancelled += 1
        else:
            self.errors += 1
            cause = normalise(record.error or "(no cause recorded)")
            if cause in self.error_causes or len(self.error_causes) < MAX_ERROR_CAUSES:
                self.error_causes[cause] += 1
        self.prompt_tokens += record.prompt_tokens or 0
        self.completion_tokens += record.completion_tokens or 0
        start_s = record.start_s
        self.first_start_s = start_s if self.first_start_s is None else min(self.first_start_s, start_s)
        self.last_end_s = record.end_s if self.last_end_s is None else max(self.last_end_s, record.end_s)

    def summary(self, since_s: float | None = None) -> dict[str, Any]:
        """JSON-ready stats over the window from the first start (not before ``since_s``) to the last end."""
        window_s = None
        start_s = self.first_start_s
        if start_s is not None and since_s is not None:
            start_s = max(start_s, since_s)
        if start_s is not None and self.last_end_s is not None and self.last_end_s > start_s:
            window_s = self.last_end_s - start_s
        return {
            "requests": self.total,
            "ok": self.ok,
            "errors": self.errors,
            "cancelled": self.cancelled,
            "error_rate": round(self.errors / self.total, 4) if self.total else None,
            "by_source": dict(self.by_source.most_common()),
            "top_errors": [{"error": cause, "count": n} for cause, n in self.error_causes.most_common(5)],
            "total_ms": self.total_ms.summary(),
            "ttft_ms": self.ttft_ms.summary(),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "window_start": epoch_to_iso(start_s),
            "window_end": epoch_to_iso(self.last_end_s),
            "window_s": round(window_s, 3) if window_s else None,
            "completion_tokens_per_s": round(self.completion_tokens / window_s, 3) if window_s else None,
            "prompt_tokens_per_s": round(self.prompt_tokens / window_s, 3) if window_s else None,
        }


MAX_CAUSE_CHARS = 40
MAX_LEFT_OUT_CAUSES = 20  # later new causes count as ``(other)``


def failure_cause(record: RequestLogLine) -> str:
    """What ended an unfinished request: ``cancelled``, ``timeout`` (any cause naming one), else the error's head
    before its first colon when short (``connection``, ``HTTP 500``), else ``error``."""
    if record.status == "cancelled":
        return "cancelled"
    head = (record.error or "").split(":", 1)[0].strip()
    lowered = head.lower()
    if "timeout" in lowered or "timed out" in lowered:
        return "timeout"
    return head if head and len(head) <= MAX_CAUSE_CHARS else "error"


class SlowRequests:
    """Finished requests slower than ``threshold_ms``: all counted, the ``keep`` slowest kept; unfinished ones are
    no latency to rank, counted by cause (:func:`failure_cause`)."""

    def __init__(self, threshold_ms: float, keep: int) -> None:
        self.threshold_ms = threshold_ms
        self.keep = keep
        self.count = 0
        self.considered = 0
        self.finished = 0
        self.left_out: Counter[str] = Counter()
        self._heap: list[tuple[float, int, RequestLogLine]] = []
        self._order = itertools.count()

    def add(self, record: RequestLogLine) -> None:
        """Rank a finished record, count any other by its cause."""
        self.considered += 1
        if record.status != "ok":
            cause = failure_cause(record)
            known = cause in self.left_out or len(self.left_out) < MAX_LEFT_OUT_CAUSES
            self.left_out[cause if known else "(other)"] += 1
            return
        self.finished += 1
        if record.total_ms is None or record.total_ms <= self.threshold_ms:
            return
        self.count += 1
        item = (record.total_ms, next(self._order), record)
        if len(self._heap) < self.keep:
            heapq.heappush(self._heap, item)
        elif item[0] > self._heap[0][0]:
            heapq.heapreplace(self._heap, item)

    def summary(self) -> dict[str, Any]:
        """Threshold, counts (read, finished, slow, left out by cause) and the slowest finished requests."""
        slowest = sorted(self._heap, key=lambda item: (-item[0], item[1]))
        return {
            "threshold_ms": self.threshold_ms,
            "requests": self.considered,
            "finished": self.finished,
            "slow": self.count,
            "not_finished": self.considered - self.finished,
            "not_finished_by_cause": dict(self.left_out.most_common()),
            "slowest": [record.as_dict() for _, _, record in slowest],
        }


@dataclass
class RequestsRead:
    """Counts of one read of the requests log: file facts, valid records, bad lines (with examples) and records that
    ended before ``--since``; the report's ``source`` is these fields, ``read``'s spread out."""

    read: ReadStats = field(default_factory=ReadStats)
    records: int = 0
    bad_lines: int = 0
    bad_examples: list[str] = field(default_factory=list)
    before_since: int = 0


def iter_records(
    files: Iterable[StrPath], counts: RequestsRead, since_s: float | None = None, block_bytes: int = BLOCK_BYTES
) -> Iterator[RequestLogLine]:
    """Valid records of ``files`` (oldest first) ending at or after ``since_s`` (epoch s; None: all); bad lines
    counted in ``counts`` with ``file:line: reason`` examples."""
    for path in files:
        line_number = 0
        for block in iter_blocks(path, counts.read, block_bytes):
            lines = block.split(b"\n")
            lines.pop()  # a block ends with a newline: the last piece is empty
            for raw in lines:
                line_number += 1
                if not raw.strip():
                    continue
                try:
                    record = RequestLogLine.parse(raw)
                except BadLogLine as exc:
                    counts.bad_lines += 1
                    if len(counts.bad_examples) < MAX_BAD_EXAMPLES:
                        counts.bad_examples.append(f"{os.path.basename(path)}:{line_number}: {exc} — {text(raw, 80)}")
                    continue
                if since_s is not None and record.end_s < since_s:
                    counts.before_since += 1
                    continue
                counts.records += 1
                yield record
