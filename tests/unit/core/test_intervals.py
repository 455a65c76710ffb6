"""Confidence intervals over runs and the noise-aware verdicts (core/intervals.py), checked against scipy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from core.intervals import change_text, difference_interval, interval, judge, t_quantile


def test_interval_is_the_student_t_interval_of_the_mean() -> None:
    """Mean ± t(0.975, n-1)·s/√n equals scipy's t.interval for the same sample."""
    values = [10.0, 12.0, 11.0, 13.0, 9.5]
    iv = interval(values)
    assert iv is not None and iv.n == 5 and iv.mean == pytest.approx(np.mean(values))
    low, high = stats.t.interval(0.95, 4, loc=np.mean(values), scale=stats.sem(values))
    assert (iv.low, iv.high) == (pytest.approx(low), pytest.approx(high))


def test_single_run_has_a_mean_but_no_interval_and_missing_values_are_skipped() -> None:
    """One value: mean only; None values do not count; nothing at all is None."""
    iv = interval([None, 3.0])
    assert iv is not None and iv.n == 1 and iv.mean == 3.0 and iv.low is None and iv.half_width is None
    assert interval([None]) is None


def test_difference_interval_matches_scipy_welch_and_pooled() -> None:
    """Welch for two repeated series, pooled when one side is a single run: as scipy's ttest_ind intervals."""
    a, b = [100.0, 104.0, 98.0, 101.0], [110.0, 108.0, 113.0]
    ia, ib = interval(a), interval(b)
    assert ia is not None and ib is not None
    welch = stats.ttest_ind(b, a, equal_var=False).confidence_interval(0.95)
    assert difference_interval(ia, ib) == (pytest.approx(welch.low), pytest.approx(welch.high))
    single = interval([95.0])
    assert single is not None
    pooled = stats.ttest_ind(a, [95.0], equal_var=True).confidence_interval(0.95)
    assert difference_interval(single, ia) == (pytest.approx(pooled.low), pytest.approx(pooled.high))
    assert difference_interval(single, single) is None


def test_same_distribution_is_no_significant_change_and_a_shift_is_a_regression() -> None:
    """Fake run series: two draws of one distribution are 'no significant change' though their means differ by
    several percent; a series shifted by 20 % is a regression against a 5 % threshold, for a throughput (higher is
    better) and for a latency (lower is better)."""
    rng = np.random.default_rng(7)
    base = list(rng.normal(100.0, 8.0, 5))
    same = list(rng.normal(100.0, 8.0, 5))
    ia, ib = interval(base), interval(same)
    assert ia is not None and ib is not None
    noise = judge(ia, ib, better=+1, threshold_pct=5.0)
    assert noise.verdict == "no significant change"
    assert noise.change_pct is not None and abs(noise.change_pct) > 1.0  # a plain percentage would report a change
    assert change_text(noise).startswith("no significant change (")
    slower = interval([v * 0.8 for v in same])
    assert slower is not None
    throughput = judge(ia, slower, better=+1, threshold_pct=5.0)
    assert throughput.verdict == "regression" and throughput.high_pct is not None and throughput.high_pct < -5.0
    later = interval([v * 1.2 for v in same])
    assert later is not None
    latency = judge(ia, later, better=-1, threshold_pct=5.0)
    assert latency.verdict == "regression" and latency.low_pct is not None and latency.low_pct > 5.0
    assert judge(ia, later, better=+1, threshold_pct=5.0).verdict == "better"


def test_a_significant_change_inside_the_threshold_is_worse_not_a_regression() -> None:
    """A small, very consistent drop is significant ('worse') but its interval does not clear 5 %: no regression."""
    ia, ib = interval([100.0, 100.1, 99.9, 100.0]), interval([97.0, 97.1, 96.9, 97.0])
    assert ia is not None and ib is not None
    change = judge(ia, ib, better=+1, threshold_pct=5.0)
    assert change.verdict == "worse" and change.change_pct == pytest.approx(-3.0)


def test_single_runs_on_both_sides_have_only_a_percentage() -> None:
    """Two single runs: the plain percent change, verdict says there is no interval."""
    ia, ib = interval([10.0]), interval([12.0])
    assert ia is not None and ib is not None
    change = judge(ia, ib, better=+1, threshold_pct=5.0)
    assert change.change_pct == pytest.approx(20.0) and change.low_pct is None
    assert change.verdict == "no interval (single runs)" and "single runs" in change_text(change)


@pytest.mark.parametrize("df", [1, 2, 4.7, 30, 1000])
def test_t_quantile_is_scipy_stats_t_ppf(df: float) -> None:
    """The lazily imported quantile gives scipy.stats.t.ppf's values, fractional (Welch) degrees of freedom included."""
    for p in (0.9, 0.975, 0.995):
        assert t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-12)


def test_a_change_interval_never_falls_below_minus_100_percent() -> None:
    """Two runs each (0.30 and 0.49 req/s, then 0.40 and 0.41): the t-interval of the difference is wide (t = 12.7 at
    1 degree of freedom) and once read [−436 %, +399 %]; no metric here can fall by more than all of it, so the
    lower bound stops at −100 % and the verdict is unchanged."""
    a, b = interval([0.30, 0.49]), interval([0.40, 0.41])
    assert a is not None and b is not None
    change = judge(b, a, better=+1, threshold_pct=5.0)
    assert change.low_pct == -100.0 and change.high_pct is not None and change.high_pct > 100.0
    assert change.verdict == "no significant change"
