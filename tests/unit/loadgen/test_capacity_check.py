"""The run refuses, before its load, a closed-loop load the warm-up shows would time out
(loadgen/orchestrate/measured_run.py ``check_capacity``); CAPACITY_CHECK=0 and open loops send it."""

from __future__ import annotations

import pytest

from core.settings import Settings
from loadgen.errors import OverCapacity
from loadgen.orchestrate.measured_run import check_capacity
from loadgen.plan import bench_config
from tests.unit.loadgen.test_capacity import _warmup


def _settings(**env: object) -> Settings:
    return Settings(_env_file=None, **env)  # type: ignore[call-arg,arg-type]


def test_a_load_the_warmup_shows_would_time_out_is_refused_before_it_is_sent() -> None:
    """50 users on an engine prefilling 41 tok/s: OverCapacity naming the load it can serve."""
    settings = _settings(concurrency=50, requests=200)
    with pytest.raises(OverCapacity, match="--concurrency 16"):
        check_capacity(settings, bench_config(settings, "m"), _warmup(41))


def test_the_check_can_be_turned_off_and_open_loops_are_not_judged(capsys: pytest.CaptureFixture[str]) -> None:
    """CAPACITY_CHECK=0 sends the load; a RATE run sets its own load (no verdict); a fast engine passes quietly."""
    off = _settings(concurrency=50, requests=200, capacity_check=False)
    check_capacity(off, bench_config(off, "m"), _warmup(41))
    rate = _settings(rate=2.0, requests=200)
    check_capacity(rate, bench_config(rate, "m"), _warmup(41))
    fast = _settings(concurrency=50, requests=200)
    check_capacity(fast, bench_config(fast, "m"), _warmup(330))
    assert capsys.readouterr().out == ""
