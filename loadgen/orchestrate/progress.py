"""The benchmark's progress bar: successes and failures counted apart, fill, rate and ETA from successes only (a
run whose requests all time out must show no rate "done"); :class:`Progress` is pure, :class:`ProgressBar` shows it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

BAR_FORMAT_TOTAL = "{desc}: {percentage:3.0f}%|{bar}| {words}"  # requests bounded: the fill is successes / total
BAR_FORMAT_OPEN = "{desc}: {words}"  # duration bounded: no total to fill


def clock(seconds: float) -> str:
    """``MM:SS`` (``H:MM:SS`` from one hour on), as tqdm writes times; negative values count as 0."""
    return str(tqdm.format_interval(max(seconds, 0.0)))


@dataclass(frozen=True)
class Progress:
    """Measured rows so far: ``ok``, ``failed`` of ``total`` (None: ``duration_s`` bounds it), ``elapsed_s``."""

    ok: int
    failed: int
    total: int | None
    elapsed_s: float
    duration_s: float | None = None

    @property
    def ok_rate_req_per_s(self) -> float:
        """Successes per second since the start (0.0 before one second has passed with none)."""
        return self.ok / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        """Seconds left (of the duration, else at the success rate); None with no success yet or nothing left."""
        if self.total is None:
            return None if self.duration_s is None else max(self.duration_s - self.elapsed_s, 0.0)
        left = self.total - self.ok - self.failed
        if self.ok == 0 or left <= 0:
            return None
        return left / self.ok_rate_req_per_s

    def counts(self) -> str:
        """``12 ok, 25 failed / 200`` (``/ 200`` only for a request-bounded run)."""
        of = f" / {self.total}" if self.total is not None else ""
        return f"{self.ok} ok, {self.failed} failed{of}"

    def text(self) -> str:
        """The bar's words: ``12 ok, 25 failed / 200 [05:31<02:10, 0.04 ok/s]``; with no success yet
        ``0 ok, 37 failed / 200 [05:31, no success yet: no ETA]``."""
        times = clock(self.elapsed_s)
        eta = self.eta_s
        if eta is not None and math.isfinite(eta):
            times += f"<{clock(eta)}"
        if self.ok == 0:
            why = "no success yet" + (": no ETA" if self.total is not None else "")
            return f"{self.counts()} [{times}, {why}]"
        return f"{self.counts()} [{times}, {self.ok_rate_req_per_s:.2f} ok/s]"


class ProgressBar(tqdm):
    """A tqdm bar showing :class:`Progress` in place of tqdm's count, rate and ETA:
    ``Benchmark:   6%|█▊        | 12 ok, 25 failed / 200 [05:31<1:14:56, 0.04 ok/s]``."""

    def __init__(self, total: int | None, duration_s: float | None, **kwargs: Any) -> None:
        self.seen = Progress(0, 0, total, 0.0, duration_s)
        fmt = BAR_FORMAT_TOTAL if total is not None else BAR_FORMAT_OPEN
        super().__init__(total=total, bar_format=fmt, **kwargs)

    @property
    def format_dict(self) -> dict[str, Any]:
        """tqdm's fields plus ``words``: :meth:`Progress.text` of the last :meth:`show`."""
        return {**super().format_dict, "words": self.seen.text()}

    def show(self, seen: Progress) -> None:
        """Show ``seen``: the fill is its successes (out of the total), the words its counts, rate and ETA."""
        self.seen = seen
        self.n = seen.ok
        self.refresh()
