"""The steady-state window (core.steady): found where the load held level, its figures differ from the whole run's
when the run ramps up and drains, and the report says which it quotes and draws the window."""

from __future__ import annotations

import pytest

from core.records import RequestRecord
from core.stats import key_insight, run_metrics
from core.steady import MIN_REQUESTS, steady_state
from sidecar.render.plots import throughput_png

T0 = 1_700_000_000.0


def closed_loop(users: int, ramp_s: float, run_s: float, request_s: float = 1.0) -> list[RequestRecord]:
    """``users`` back-to-back users, user ``u`` starting at ``u * ramp_s / users`` and sending until ``run_s``;
    every request lasts ``request_s`` and streams 10 tokens."""
    rows: list[RequestRecord] = []
    for u in range(users):
        t = u * ramp_s / users
        while t < run_s:
            rows.append(RequestRecord(request_id=f"u{u}-{len(rows)}", started_at=T0 + t, ok=True, ttft_ms=50.0,
                                      e2e_ms=request_s * 1000.0, output_tokens=10, content_chunks=10))  # fmt: skip
            t += request_s
    return rows


def test_ramp_gives_different_whole_run_and_steady_throughput() -> None:
    """8 users started over 20 s of a 60 s run: the steady window excludes the ramp, and its throughput (8 req/s,
    every user busy) is well above the whole run's, which averages the ramp in."""
    rows = closed_loop(users=8, ramp_s=20.0, run_s=60.0)
    m = run_metrics(rows)
    st = m.steady
    assert st is not None and st.found, st
    assert st.start_s is not None and st.start_s >= 15.0 and st.end_s is not None and st.end_s >= 55.0
    assert st.throughput_req_per_sec == pytest.approx(8.0, rel=0.1)
    assert st.in_flight_mean == pytest.approx(8.0, rel=0.1)
    assert st.throughput_req_per_sec is not None and m.throughput_req_per_sec < 0.9 * st.throughput_req_per_sec
    insight = key_insight(m)
    assert f"Throughput stable at {st.throughput_req_per_sec:.2f} req/s" in insight, insight
    assert f"steady state {st.start_s:.0f}–{st.end_s:.0f} s of " in insight
    assert f"whole run {m.throughput_req_per_sec:.2f} req/s" in insight


def test_level_run_steady_state_matches_the_whole_run() -> None:
    """All users from the start: the window covers nearly the whole run and its throughput matches it."""
    m = run_metrics(closed_loop(users=4, ramp_s=0.0, run_s=40.0))
    assert m.steady is not None and m.steady.found and m.steady.start_s == pytest.approx(0.0)
    assert m.steady.throughput_req_per_sec == pytest.approx(m.throughput_req_per_sec, rel=0.1)


def test_too_few_requests_or_no_plateau_quotes_the_whole_run() -> None:
    """Under MIN_REQUESTS successes, or a load that keeps climbing, there is no steady state, and the key insight
    says it quotes the whole run."""
    few = steady_state(closed_loop(users=1, ramp_s=0.0, run_s=MIN_REQUESTS - 1))
    assert not few.found and "successful requests" in (few.reason or "")
    climbing = [  # one more request in flight every second: never level for 4 of 20 slices
        RequestRecord(
            request_id=f"r{i}",
            started_at=T0 + i,
            ok=True,
            ttft_ms=10.0,
            e2e_ms=(40 - i) * 1000.0,
            output_tokens=5,
            content_chunks=5,
        )
        for i in range(40)
    ]
    st = steady_state(climbing)
    assert not st.found and "never held level" in (st.reason or ""), st
    assert "whole run" in key_insight(run_metrics(climbing))


def test_requests_that_outlast_the_level_span_give_no_steady_state() -> None:
    """32 users on a slow server: every request takes 44 s (all sent at once) and the run's end cut 13 of them. The
    load held level (the cut ones counted in flight) but no request started and ended inside the span: no steady
    state, and the insight quotes the whole run (it said "stable at 0.20 req/s" over a drain tail)."""
    done = [RequestRecord(request_id=f"r{i}", started_at=T0, ok=True, ttft_ms=16_000.0, e2e_ms=40_000.0 + 300 * i,
                          output_tokens=80, content_chunks=80) for i in range(19)]  # fmt: skip
    cut = [RequestRecord(request_id=f"c{i}", started_at=T0, ok=False, e2e_ms=49_000.0, error_kind="incomplete",
                         error="cancelled") for i in range(13)]  # fmt: skip
    m = run_metrics([*done, *cut])
    assert m.steady is not None and not m.steady.found, m.steady
    assert "requests outlast the level span" in (m.steady.reason or "")
    assert "whole run" in key_insight(m) and m.peak_concurrency == 32
    # the seed's 32 users for 60 s on 2 CPUs: the terminal's and the Markdown's insight say why and what to do
    assert "no steady state: requests outlast the level span" in key_insight(m) and "run longer" in key_insight(m)


def test_a_stall_with_every_user_waiting_is_no_steady_state() -> None:
    """4 users, 1-s answers with 0.5 s between, then a server stall from 7 s to 14.5 s with all 4 in flight, then
    answers again: the stall is the run's most level span, but no request ends in it, so it is no steady state (it
    said "Throughput stable at 0.00 req/s ... steady state 7–14 s of 20 s")."""
    rows = []
    for u in range(4):
        starts = [0.0, 1.5, 3.0, 4.5, 6.0, 7.0, 15.0, 16.5, 18.0, 19.5]
        rows += [RequestRecord(request_id=f"u{u}-{t}", started_at=T0 + t, ok=True, ttft_ms=50.0,
                               e2e_ms=7_500.0 if t == 7.0 else 1_000.0, output_tokens=10, content_chunks=10)
                 for t in starts]  # fmt: skip
    m = run_metrics(rows)
    assert m.steady is not None and not m.steady.found, m.steady
    assert "no request ended in the level span (7–14 s): the load stalled" in (m.steady.reason or "")
    assert "stable at 0.00 req/s" not in key_insight(m) and "whole run" in key_insight(m)


def test_throughput_plot_draws_the_steady_window() -> None:
    """The throughput plot with the steady state differs from the one without (the shaded window and its line)."""
    m = run_metrics(closed_loop(users=8, ramp_s=20.0, run_s=60.0))
    plain = throughput_png(m.windows)
    shaded = throughput_png(m.windows, m.steady)
    assert plain and shaded and plain != shaded
