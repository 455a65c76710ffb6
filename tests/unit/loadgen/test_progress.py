"""The benchmark's progress bar: successes and failures counted apart, rate and ETA from successes only."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from loadgen.orchestrate.locust_run import Progress, ProgressBar, RowWatch, clock


def test_failures_are_not_progress_and_give_no_eta() -> None:
    """37 timeouts in 5:31 and nothing answered: no rate, no ETA (the old bar said 36.90 req/s and 4 s left)."""
    seen = Progress(ok=0, failed=37, total=200, elapsed_s=331.0)
    assert seen.ok_rate_req_per_s == 0.0 and seen.eta_s is None
    assert seen.text() == "0 ok, 37 failed / 200 [05:31, no success yet: no ETA]"


def test_rate_and_eta_come_from_successes() -> None:
    """12 successes in 300 s: 0.04 ok/s, and the 163 requests not yet ended take 163 / 0.04 s at that rate."""
    seen = Progress(ok=12, failed=25, total=200, elapsed_s=300.0)
    assert seen.ok_rate_req_per_s == pytest.approx(0.04)
    assert seen.eta_s == pytest.approx(163 / 0.04)
    assert seen.text() == "12 ok, 25 failed / 200 [05:00<1:07:55, 0.04 ok/s]"


def test_a_duration_bounded_run_counts_apart_and_shows_the_time_left() -> None:
    """No total: the counts without `/ N`; the time left is the duration's, whatever the successes."""
    seen = Progress(ok=0, failed=32, total=None, elapsed_s=90.0, duration_s=120.0)
    assert seen.text() == "0 ok, 32 failed [01:30<00:30, no success yet]"
    assert Progress(5, 0, None, 150.0, 120.0).text() == "5 ok, 0 failed [02:30<00:00, 0.03 ok/s]"


def test_a_finished_run_has_no_eta() -> None:
    """Every request ended: nothing left to estimate."""
    assert Progress(150, 50, 200, 60.0).eta_s is None
    assert clock(3725.0) == "1:02:05" and clock(-1.0) == "00:00"


def test_the_bar_fills_with_successes_only() -> None:
    """The drawn bar: 0 % with 37 failures, 6 % with 12 of 200 answered; its words are the counts apart."""
    out = io.StringIO()
    with ProgressBar(200, None, desc="Benchmark", file=out, ncols=100) as bar:
        bar.show(Progress(0, 37, 200, 331.0))
        failed_only = out.getvalue().rsplit("\r", 1)[-1]
        bar.show(Progress(12, 25, 200, 300.0))
        some_ok = out.getvalue().rsplit("\r", 1)[-1]
    assert failed_only.startswith("Benchmark:   0%|") and failed_only.rstrip().endswith("no success yet: no ETA]")
    assert "37/200" not in failed_only and "req/s" not in failed_only
    assert some_ok.startswith("Benchmark:   6%|") and "12 ok, 25 failed / 200" in some_ok


def test_row_watch_counts_successes_apart(tmp_path: Path) -> None:
    """The rows file's measured rows: all of them counted, the successes apart (warm-up rows in neither)."""
    path = tmp_path / "run.requests.jsonl"
    path.write_text(
        '{"phase":"measured","ok":true}\n{"phase":"measured","ok":false,"error_kind":"timeout"}\n'
        '{"phase":"warmup","ok":true}\n{"phase":"measured","ok":true}\n'
        '{"phase":"measured","ok":false,"error_kind":"incomplete"}\n',
        encoding="utf-8",
    )
    watch = RowWatch(path)
    assert watch() == 4 and watch.ok == 2 and watch.cut == 1


def test_requests_cut_by_the_runs_end_are_not_shown_as_failed() -> None:
    """A run's end cuts requests in flight: the bar counts them apart (the report calls them incomplete, not errors)."""
    seen = Progress(ok=40, failed=0, total=None, elapsed_s=90.0, duration_s=60.0, cut=1)
    assert seen.text() == "40 ok, 0 failed, 1 cut [01:30<00:00, 0.44 ok/s]"
    assert Progress(10, 2, 20, 10.0, cut=3).eta_s == pytest.approx(5 / 1.0)
