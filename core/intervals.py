"""Confidence intervals over repeated runs, and whether a change is more than noise (pure).

One series: mean +- t(0.975, n-1) s / sqrt(n) (``scipy.special.stdtrit``, imported lazily). Two series A, B: B - A with
Welch's interval when both have >= 2 runs, the pooled variance when one is a single run, none for two single runs
(as ``scipy.stats.ttest_ind(...).confidence_interval()``); percents divide by mean(A). An interval holding 0 is no
significant change; a regression lies wholly beyond the threshold in the bad direction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from core.units import pct

CONFIDENCE = 0.95
METHOD = "Student's t over runs (95%); two series: Welch's t interval of the difference of means"

Verdict = Literal["no significant change", "better", "worse", "regression", "no interval (single runs)"]


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile for ``p`` and (fractional) ``df``, as ``scipy.stats.t.ppf(p, df)``."""
    from scipy.special import stdtrit  # lazy: only repeated runs need it

    return float(stdtrit(df, p))


class Interval(BaseModel):
    """One metric over the runs of a load point: mean and its 95 % confidence interval (None below 2 runs)."""

    n: int = Field(description="Runs with a value.")
    mean: float
    stdev: float | None = Field(default=None, description="Sample standard deviation (n − 1), None below 2 runs.")
    low: float | None = Field(default=None, description="Lower bound of the 95 % interval of the mean.")
    high: float | None = Field(default=None, description="Upper bound of the 95 % interval of the mean.")
    values: list[float] = Field(default_factory=list, description="The value of each run, in run order.")

    @property
    def half_width(self) -> float | None:
        """Half the interval's width (the ``±`` figure), None below 2 runs."""
        return None if self.high is None else self.high - self.mean


def interval(values: Sequence[float | None], confidence: float = CONFIDENCE) -> Interval | None:
    """Mean and t interval of the values that are not None; None when no value is left."""
    xs = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not xs:
        return None
    n = len(xs)
    mean = math.fsum(xs) / n
    if n < 2:
        return Interval(n=n, mean=mean, values=xs)
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_quantile(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)
    return Interval(n=n, mean=mean, stdev=sd, low=mean - half, high=mean + half, values=xs)


class Change(BaseModel):
    """B against A for one metric: percent change of the means and its 95 % interval, and the verdict."""

    a_mean: float | None
    b_mean: float | None
    change_pct: float | None = Field(description="(mean B − mean A) / mean A × 100; None when A is 0 or missing.")
    low_pct: float | None = Field(default=None, description="Lower bound of the change's 95 % interval, %.")
    high_pct: float | None = Field(default=None, description="Upper bound of the change's 95 % interval, %.")
    verdict: Verdict


def difference_interval(a: Interval, b: Interval, confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """95 % interval of mean(B) - mean(A) (Welch; pooled with one run); None for two single runs."""
    diff = b.mean - a.mean
    if a.n < 2 and b.n < 2:
        return None
    va = (a.stdev or 0.0) ** 2
    vb = (b.stdev or 0.0) ** 2
    if a.n >= 2 and b.n >= 2:
        se2 = va / a.n + vb / b.n
        df = se2**2 / ((va / a.n) ** 2 / (a.n - 1) + (vb / b.n) ** 2 / (b.n - 1)) if se2 else 0.0
    else:
        df = a.n + b.n - 2
        se2 = ((a.n - 1) * va + (b.n - 1) * vb) / df * (1 / a.n + 1 / b.n)  # the pooled variance's
    if se2 == 0:
        return diff, diff
    half = t_quantile(0.5 + confidence / 2, df) * math.sqrt(se2)
    return diff - half, diff + half


def judge(a: Interval | None, b: Interval | None, better: int, threshold_pct: float) -> Change:
    """Compare B with A (``better``: +1 higher is better, -1 lower); a worse change wholly beyond ``threshold_pct`` is a
    regression. Lower bound at least -100 %."""
    if a is None or b is None:
        return Change(
            a_mean=a.mean if a else None, b_mean=b.mean if b else None, change_pct=None,
            verdict="no interval (single runs)",
        )
    change = None if a.mean == 0 else (b.mean - a.mean) / abs(a.mean) * 100.0
    bounds = difference_interval(a, b)
    if bounds is None or a.mean == 0:
        return Change(a_mean=a.mean, b_mean=b.mean, change_pct=change, verdict="no interval (single runs)")
    low, high = (bound / abs(a.mean) * 100.0 for bound in bounds)
    if a.mean > 0:  # every compared metric is >= 0: B cannot fall below A by more than all of it
        low = max(low, -100.0)
    verdict: Verdict
    if low <= 0 <= high:
        verdict = "no significant change"
    elif (high < 0) == (better > 0):  # significantly in the bad direction
        beyond = high < -threshold_pct if better > 0 else low > threshold_pct
        verdict = "regression" if beyond else "worse"
    else:
        verdict = "better"
    return Change(a_mean=a.mean, b_mean=b.mean, change_pct=change, low_pct=low, high_pct=high, verdict=verdict)


def interval_text(iv: Interval | None, digits: int = 2) -> str:
    """``1.52 ± 0.08`` (95 % interval half width), or the plain mean for one run; ``n/a`` when missing."""
    if iv is None:
        return "n/a"
    mean = f"{iv.mean:.{digits}f}"
    return mean if iv.half_width is None else f"{mean} ± {iv.half_width:.{digits}f}"


def change_text(change: Change, better: int | None = None) -> str:
    """``+12% [+8%, +16%] better``, ``no significant change (...)``, ``+341% (worse; single runs: no interval)``."""
    if change.low_pct is None:
        way = ""
        if better is not None and change.change_pct:
            way = "better; " if (change.change_pct > 0) == (better > 0) else "worse; "
        return f"{pct(change.change_pct)} ({way}single runs: no interval)"
    span = f"{pct(change.change_pct)} [{pct(change.low_pct)}, {pct(change.high_pct)}]"
    if change.verdict == "no significant change":
        return f"no significant change ({span})"
    return f"{span} {change.verdict}"


class PointComparison(BaseModel):
    """One load point of B against the paired point of A: each metric's :class:`Change` (an interval when either side
    repeated its runs)."""

    label: str = Field(description="B's point ('' for a single run).")
    against_label: str = Field(description="A's point.")
    against_ids: list[str] = Field(description="The report ids of A's point.")
    changes: dict[str, Change]


class Comparison(BaseModel):
    """The one comparison: B (a report, a series) against A (the previous run, a named baseline, ``make compare``'s
    A), point by point; ``refused`` says why nothing was compared."""

    against: str | None = Field(default=None, description="Report or series id of A (the reference).")
    points: list[PointComparison] = Field(default_factory=list)
    refused: str | None = Field(default=None, description="Why nothing could be compared (None: compared).")
    notes: list[str] = Field(
        default_factory=list, description="What differs outside the workload (vLLM flags, version): part of the change."
    )
    prefix_cache_percent: tuple[float, float] | None = Field(
        default=None,
        description="vLLM's prefix-cache hit rate of A and of B, %, of the pair lying furthest apart when more than "
        "20 points apart: the changes are partly the cache's (the gate cannot judge them).",
    )
