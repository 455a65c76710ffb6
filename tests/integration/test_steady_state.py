"""A closed-loop run with a ramp-up reports steady-state figures apart from the whole run's, and the HTML report
draws the window. Real benchmark and sidecar, the mock server (no vLLM)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from core.settings import PROJECT_ROOT
from tests.integration.test_preflight import APP_PY, services  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.integration, pytest.mark.load_sensitive]  # needs a client that keeps up (1.05x beside lane stack)


def test_ramp_run_reports_steady_state_apart_from_the_whole_run(
    services: tuple[dict[str, str], Callable[..., str]],  # noqa: F811
) -> None:
    """8 users started over 6 s of a 16 s run: the steady window starts after the ramp and its throughput is above
    the whole run's; the key insight quotes the steady state; the HTML shades the window."""
    env, mock = services
    url = mock("--tokens", "20", "--ttft-ms", "100", "--itl-ms", "20")
    knobs = {"CONCURRENCY": "8", "RAMP_UP_S": "6", "DURATION": "16s", "WARMUP": "0", "MAX_TOKENS": "20"}
    run = subprocess.run([APP_PY, "-m", "loadgen.command.benchmark"], cwd=PROJECT_ROOT, env={**env, "VLLM_BASE_URL": url, **knobs},
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    path = re.search(r"Report path: (\S+)", run.stdout)
    assert path, run.stdout
    report = json.loads(Path(path.group(1)).read_text())
    m = report["metrics"]
    steady = m["steady"]
    assert steady["found"], steady
    assert steady["start_s"] >= 3.0, steady
    assert steady["throughput_req_per_sec"] > 1.1 * m["throughput_req_per_sec"], (steady, m["throughput_req_per_sec"])
    assert "steady state " in m["key_insight"] and "whole run " in m["key_insight"]
    html = (Path(path.group(1)).parent / report["html_file"]).read_text()
    assert "Shaded: the steady-state window" in html
