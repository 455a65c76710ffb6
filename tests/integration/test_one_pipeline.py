"""One pipeline end to end (real Locust, the mock server, a real sidecar; no vLLM): a run marked as baseline, a run
gated against it, a REPEAT series marked and gated against, and `make compare` of the two — the same client,
summary printer, verdicts and gate for a run and a series."""

from __future__ import annotations

import subprocess

import pytest

from core.settings import PROJECT_ROOT
from tests.integration.test_robust_runs import APP_PY, Bench, bench  # noqa: F401 (bench is a fixture)

pytestmark = pytest.mark.integration  # lane rest: it waits there for lane stack's end before its load-sensitive tests
QUICK = {"REQUESTS": "4", "CONCURRENCY": "2", "WARMUP": "0", "GATE_THRESHOLD_PCT": "60", "COOLDOWN_S": "0"}


def finished(bench: Bench, **knobs: str) -> tuple[int, str, str]:  # noqa: F811
    """Run the benchmark to its end: exit code, stdout, stderr."""
    proc = bench.start(script=False, **{**QUICK, **knobs})
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


def test_a_run_and_a_series_go_through_one_pipeline(bench: Bench) -> None:  # noqa: F811
    """A run marked v1, a run gated by v1 (PASS, exit 0), a REPEAT=2 series marked s1 and gated by it, and an A/B
    comparison of v1 and s1: each prints its lines and exits 0."""
    code, out, err = finished(bench, BASELINE="v1")
    assert code == 0, out[-2000:] + err[-2000:]
    assert "[BASELINE] v1 -> benchmark_report_" in out and "Benchmark completed. Report generated." in out
    code, out, err = finished(bench, GATE="v1")
    assert code == 0 and "[GATE] PASS vs v1" in out, out[-2000:] + err[-2000:]
    code, out, err = finished(bench, REPEAT="2", BASELINE="s1")
    assert code == 0, out[-2000:] + err[-2000:]
    assert "[REPEAT] 1 point(s) x 2 run(s)" in out and "[BASELINE] s1 -> benchmark_series_" in out
    code, out, err = finished(bench, REPEAT="2", GATE="s1")
    assert code == 0 and "[GATE] PASS vs s1" in out and "[REPORT] Series saved to " in out, out[-2000:] + err[-2000:]
    compare = subprocess.run([APP_PY, "-m", "loadgen.command.compare", "v1", "s1"], cwd=PROJECT_ROOT, env=bench.env,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert compare.returncode == 0, compare.stdout[-2000:] + compare.stderr[-2000:]
    assert "[REPORT] Comparison saved to " in compare.stdout
    unknown = subprocess.run([APP_PY, "-m", "loadgen.command.compare", "v1", "nope"], cwd=PROJECT_ROOT,
                             env=bench.env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert unknown.returncode == 2 and "the sidecar refused /compare (HTTP 404)" in unknown.stderr
