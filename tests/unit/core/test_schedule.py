"""Requested vs achieved load of open-loop runs (core.schedule) and how the report and terminal say it."""

from __future__ import annotations

import pytest

from core.records import RequestRecord
from core.schedule import BEHIND_LIMIT_PCT, requested_rate, schedule_stats, schedule_text
from core.stats import key_insight, run_metrics

T0 = 1_700_000_000.0


def rows(gap_s: float, send_gap_s: float, delay_s: float = 0.0, n: int = 41) -> list[RequestRecord]:
    """``n`` rows scheduled every ``gap_s``, actually sent every ``send_gap_s`` after a constant ``delay_s``."""
    return [
        RequestRecord(
            request_id=f"r{i}",
            scheduled_at=T0 + i * gap_s,
            started_at=T0 + delay_s + i * send_gap_s,
            ok=True,
            ttft_ms=5.0,
            e2e_ms=20.0,
            output_tokens=4,
            content_chunks=4,
        )
        for i in range(n)
    ]


def test_on_schedule_run_keeps_its_schedule() -> None:
    """Sends exactly on a 4 req/s schedule: achieved = scheduled = 4 req/s, 0 % behind, zero send delay."""
    s = schedule_stats(rows(0.25, 0.25), requested_rate_req_per_sec=4.0)
    assert s is not None and not s.fell_behind and s.reason is None
    assert s.scheduled_rate_req_per_sec == pytest.approx(4.0)
    assert s.achieved_rate_req_per_sec == pytest.approx(4.0)
    assert s.behind_pct == pytest.approx(0.0, abs=1e-9) and s.send_delay.max_ms == pytest.approx(0.0, abs=1e-6)


def test_client_at_half_the_pace_fell_behind_with_both_rates() -> None:
    """Scheduled at 4 req/s, sent at 2 req/s: 50 % behind, flagged naming both rates; the delay grows to 10 s."""
    s = schedule_stats(rows(0.25, 0.5), requested_rate_req_per_sec=4.0)
    assert s is not None and s.fell_behind
    assert s.achieved_rate_req_per_sec == pytest.approx(2.0) and s.behind_pct == pytest.approx(50.0)
    assert "sent at 2.00 req/s against a schedule of 4.00 req/s (50.0% behind" in (s.reason or "")
    assert s.send_delay.max_ms == pytest.approx(10_000.0)
    assert s.send_delay.p50_ms == pytest.approx(5_000.0)


def test_a_small_shortfall_passes_and_a_late_start_is_a_send_delay() -> None:
    """2 % behind is within the limit; a constant 300 ms lateness keeps the pace but fails the send-delay rule."""
    slight = schedule_stats(rows(0.25, 0.255, n=11))  # 2 % slower, 50 ms late at the end
    assert slight is not None and 0 < (slight.behind_pct or 0) < BEHIND_LIMIT_PCT and not slight.fell_behind
    late = schedule_stats(rows(0.25, 0.25, delay_s=0.3))
    assert late is not None and late.fell_behind and late.behind_pct == pytest.approx(0.0, abs=1e-6)
    assert late.reason == "send delay p99 300 ms (limit 100 ms)"


def test_closed_loop_has_no_schedule() -> None:
    """Rows without scheduled times (closed loop) give no schedule section."""
    closed = [r.model_copy(update={"scheduled_at": None}) for r in rows(0.25, 0.25)]
    assert schedule_stats(closed) is None and run_metrics(closed).schedule is None


def test_requested_rate_of_a_ramp_is_its_midpoint() -> None:
    """RATE alone is the requested rate; a ramp from 1 to 5 asks for 3 req/s on average; closed loop None."""
    assert requested_rate(2.0, None) == 2.0 and requested_rate(1.0, 5.0) == 3.0 and requested_rate(None, 5.0) is None


def test_metrics_and_key_insight_say_the_run_fell_behind() -> None:
    """run_metrics carries the schedule; the key insight names the shortfall; the one line gives both rates and the
    send-delay percentiles."""
    m = run_metrics(rows(0.25, 0.5), requested_rate_req_per_sec=4.0)
    assert m.schedule is not None and m.schedule.fell_behind
    assert "client fell behind its open-loop schedule (sent at 2.00 req/s" in key_insight(m)
    text = schedule_text(m.schedule)
    assert text.startswith("requested 4 req/s, scheduled 4.00, achieved 2.00 req/s (50.0% behind); send delay p50 ")
    assert " / max 10000 ms" in text
    assert "fell behind" not in key_insight(run_metrics(rows(0.25, 0.25)))
