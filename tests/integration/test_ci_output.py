"""A gated benchmark writes its verdict for CI: JUnit XML (a failing test case per regressed metric) and the
Markdown step summary GitHub shows. Real benchmark, real sidecar, the mock server at two speeds."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.test_preflight import run_bench, services  # noqa: F401  (the fixture)

pytestmark = pytest.mark.integration


def test_regressed_run_writes_failing_junit_case_and_step_summary(
    services: tuple[dict[str, str], Callable[..., str]],  # noqa: F811
    tmp_path: Path,
) -> None:
    """Baseline on a fast mock, then the same workload on one ten times slower with GATE: exit 3, the JUnit file
    has a failing latency_p99_ms case, and the GitHub step summary (appended) says FAIL."""
    env, mock = services
    fast = run_bench(env, mock(), "--baseline", "v1")
    assert fast.returncode == 0, fast.stdout + fast.stderr
    junit = tmp_path / "ci" / "gate.xml"
    step_summary = tmp_path / "step_summary.md"
    step_summary.write_text("earlier step\n")
    slow = run_bench(env, mock("--ttft-ms", "300"), "--junit", str(junit), GATE="v1",
                     GITHUB_STEP_SUMMARY=str(step_summary))  # fmt: skip
    assert slow.returncode == 3, slow.stdout + slow.stderr
    assert f"[CI] JUnit: {junit}" in slow.stdout and f"[CI] Summary: {step_summary}" in slow.stdout
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert set(cases) >= {"latency_p99_ms", "throughput_req_per_sec", "run_checks"}
    failure = cases["latency_p99_ms"].find("failure")
    assert failure is not None and "limit +5%" in (failure.get("message") or "")
    assert cases["run_checks"].find("failure") is None
    summary = step_summary.read_text()
    assert summary.startswith("earlier step\n## Benchmark FAIL: benchmark_report_")
    assert "| latency_p99_ms | **FAIL** |" in summary
