"""Percentiles of a stream of latencies in bounded memory (~130 KB) with a stated error bound.

DDSketch (Masson, Rim, Lee, VLDB 2019; the ``ddsketch`` package) returns any value of a logarithmic bin within a
relative error ``alpha``; percentiles interpolate linearly between the two nearest ranks as ``core.stats`` does, each
read within ``alpha``, so every percentile is within :data:`RELATIVE_ACCURACY` of the exact one (over < 17 decades;
beyond, the lowest bins merge). Mean and maximum are exact.
"""

from __future__ import annotations

import math
from array import array
from typing import Any

from ddsketch import LogCollapsingLowestDenseDDSketch

RELATIVE_ACCURACY = 0.005
"""Largest relative error of a percentile (0.005 = 0.5 %)."""
MAX_BINS = 4096
"""Bins kept: 4096 bins of ratio (1 + a) / (1 - a) cover 10^17.8 at a = 0.5 %."""
PERCENTILES = (50, 90, 95, 99)
BATCH = 4096
"""Values buffered before they go into the sketch (count, sum, min and max of a batch are then taken in C)."""


class StreamingQuantiles:
    """Count, exact mean and maximum, and sketched percentiles of non-negative values (e.g. milliseconds)."""

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
