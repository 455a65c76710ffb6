"""A benchmark that runs across a switch of vLLM (./start_vllm.sh) marks it in its report — when, from which model to
which — and never compares its rows, answers of two models, as one workload: no ``vs_previous``, every baseline
refused, never a baseline itself. A real run (warmup, Locust, the rows) against the mock engine, whose state file the
"new engine's launcher" rewrites mid-run (the signal the benchmark reads, :func:`core.replicas.serving_engine`); the
sidecar in-process."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from core.enginestate import EngineState, write_engine_state
from core.fingerprint import unusable_reason
from core.gate import run_flags
from core.report_schema import Report
from loadgen.errors import BenchError
from loadgen.orchestrate.measured_run import Measured, from_records_file, measure
from loadgen.orchestrate.pipeline import new_records_path, report_run
from loadgen.plan import bench_config
from tests.unit.loadgen.mock_process import mock_process
from tests.unit.loadgen.test_every_run_reported import in_process_sidecar, row
from tests.unit.sidecar.test_sidecar_app import client_for, make_settings  # noqa: F401

OLD, NEW = "ernie-tiny-synthetic", "tiny"


def state(served: str, pid: int, started_at: float) -> EngineState:
    """The state file an engine's launcher writes."""
    return EngineState(requested=served, source="synthetic", model_arg=served, served_name=served, pid=pid,
                       started_at=started_at)  # fmt: skip


def test_a_run_across_a_switch_is_marked_and_compared_with_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client_for: Any, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    """A baseline run of the old model, then a 4 s run during which the new engine takes over: the report's
    engine_switch says at what time and from the old model to the new; it has no vs_previous, baseline v1 is
    refused (the gate's reference too), a report rebuilt from its rows says the same, the run cannot be a baseline
    (the Markdown report says why at its top), and the timeline flags it."""
    with mock_process("--metrics", "--tokens", "4", "--ttft-ms", "20", "--itl-ms", "10", "--models", OLD) as url:
        settings = make_settings(tmp_path).model_copy(update={
            "vllm_base_url": url, "concurrency": 2, "duration": 4.0, "warmup": 1, "workers": 1,
            "capacity_check": False})  # fmt: skip
        write_engine_state(settings.engine_state_file, state(OLD, 111, time.time() - 600))
        sidecar = in_process_sidecar(monkeypatch, client_for(settings=settings))
        plan = bench_config(settings, OLD)
        first = new_records_path(settings)  # the old model's run, the baseline the switched run would meet
        now = time.time()
        earlier = [row(i, now - 60) for i in range(10)]
        first.write_text("".join(r.model_dump_json() + "\n" for r in earlier), encoding="utf-8")
        baseline = report_run(settings, plan, sidecar, Measured(earlier, now - 60, now - 50), first).report
        assert isinstance(baseline, Report) and not unusable_reason(baseline)
        sidecar.mark_baseline("v1", baseline.report_id)
        time.sleep(1.1)  # the next rows file's name (a second later)

        swapped_at: list[float] = []

        def new_engine() -> None:  # the launcher of the new engine, 2 s into the run
            time.sleep(2.0)
            swapped_at.append(time.time())
            write_engine_state(settings.engine_state_file, state(NEW, 222, swapped_at[0]))

        records = new_records_path(settings)
        switcher = threading.Thread(target=new_engine)
        switcher.start()
        run = measure(settings, plan, records, sidecar)
        switcher.join()
        done = report_run(settings, plan, sidecar, run, records)
        rebuilt = report_run(settings, plan, sidecar, from_records_file(records), records).report  # --report-from
    report = done.report
    assert isinstance(report, Report) and report.metrics.requests_ok > 0
    at = time.strftime("%H:%M:%S", time.localtime(swapped_at[0]))
    assert report.engine_switch is not None and report.engine_switch.startswith(
        f"vLLM was switched during the run at {at}, from {OLD} (pid 111 at {url}) to {NEW} (pid 222 at {url})"
    )
    assert f"[WARN] {report.engine_switch}" in capsys.readouterr().out
    assert rebuilt is not None and rebuilt.engine_switch == report.engine_switch
    comparison = report.comparison
    assert "vs_previous" not in comparison and set(comparison) == {"vs_v1"}
    assert (comparison["vs_v1"].refused or "").startswith("vLLM was switched during the run")
    assert "spans a switch of vLLM" in (unusable_reason(report) or "") and "vLLM switched" in run_flags(report)
    with pytest.raises(BenchError, match=r"spans a switch of vLLM .* is no baseline"):
        sidecar.mark_baseline("v2", report.report_id)
    path = Path(done.path or "")
    assert json.loads(path.read_text(encoding="utf-8"))["engine_switch"] == report.engine_switch
    markdown = (path.parent / (report.markdown_file or "")).read_text(encoding="utf-8")
    assert f"Not a baseline: spans a switch of vLLM (vLLM was switched during the run at {at}, from {OLD}" in markdown
