"""Open-loop runs report the requested and achieved rate and the send delay; one that cannot keep its schedule is
flagged. Real benchmark and sidecar, the mock server (no vLLM)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest

from tests.integration.test_preflight import run_bench, services  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.integration, pytest.mark.load_sensitive]  # its send-delay check: run alone


def _report(stdout: str) -> dict:
    path = re.search(r"Report path: (\S+)", stdout)
    assert path, stdout
    with open(path.group(1)) as f:
        return json.load(f)


def test_open_loop_reports_requested_and_achieved_rate(
    services: tuple[dict[str, str], Callable[..., str]],  # noqa: F811
) -> None:
    """RATE=5 on a fast mock keeps its schedule (achieved within 5 % of scheduled, no warning); RATE=20 with
    MAX_IN_FLIGHT=1 on a 200 ms mock cannot, and says so with the achieved rate, in the terminal and the report."""
    env, mock = services
    kept = run_bench(env, mock(), RATE="5", REQUESTS="20", WARMUP="0")
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "[LOAD] Open loop: requested 5 req/s, scheduled " in kept.stdout, kept.stdout
    assert "Behind schedule" not in kept.stdout
    schedule = _report(kept.stdout)["metrics"]["schedule"]
    assert schedule["requests"] == 20 and not schedule["fell_behind"]
    assert abs(schedule["behind_pct"]) < 5 and schedule["send_delay"]["p99_ms"] < 100

    behind = run_bench(env, mock("--ttft-ms", "200"), RATE="20", REQUESTS="20", WARMUP="0", MAX_IN_FLIGHT="1")
    assert behind.returncode == 0, behind.stdout + behind.stderr
    assert "[WARN] Behind schedule: sent at " in behind.stdout, behind.stdout
    report = _report(behind.stdout)
    schedule = report["metrics"]["schedule"]
    assert (
        schedule["fell_behind"] and schedule["achieved_rate_req_per_sec"] < 0.5 * schedule["scheduled_rate_req_per_sec"]
    )
    assert schedule["send_delay"]["max_ms"] > 1000
    assert "fell behind its open-loop schedule" in report["metrics"]["key_insight"]
