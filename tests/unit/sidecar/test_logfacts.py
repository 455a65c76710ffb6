"""The report's log facts: problems in the run window (any vLLM line shape) and start-up facts in one place."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

from core.report_schema import SCHEMA_VERSION, Report, migrate_report
from sidecar.reports.builder import read_log_facts

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "logs"
REPORT_1_1 = Path(__file__).resolve().parents[2] / "fixtures" / "report_1.1.json"


def test_missing_log_is_not_an_error(tmp_path: Path) -> None:
    """A missing log gives found=False, no exception."""
    assert not read_log_facts(tmp_path / "nope.log").found
    assert not read_log_facts(tmp_path / "nope.log", time.time() - 5, time.time()).found


def test_errors_inside_window_only(tmp_path: Path) -> None:
    """WARNING/ERROR lines are kept only when their timestamp lies in the run window."""
    stamp = datetime.now().strftime("%m-%d %H:%M:%S")
    log = tmp_path / "vllm.log"
    log.write_text(
        f"(APIServer pid=1) ERROR {stamp} [serving.py:1] boom\n"
        "(APIServer pid=1) WARNING 01-01 00:00:00 [x.py:1] long ago\n"
    )
    facts = read_log_facts(log, time.time() - 5, time.time() + 5)
    assert facts.found and len(facts.errors_in_window) == 1 and "boom" in facts.errors_in_window[0]
    assert facts.warnings_in_window == []


def test_a_traceback_record_counts_once_in_any_line_shape(tmp_path: Path) -> None:
    """A worker's logged traceback (header on every line), coloured or behind a Docker stamp, is one error."""
    stamp = datetime.now().strftime("%m-%d %H:%M:%S")
    record = [
        f"(VllmWorker rank=1 pid=935) ERROR {stamp} [multiproc_executor.py:546] {part}"
        for part in ("WorkerProc failed to start.", "Traceback (most recent call last):", "torch.OutOfMemoryError: x")
    ]
    coloured = [f"\x1b[0;36m{line[:27]}\x1b[0;0m \x1b[31mERROR\x1b[0m{line[33:]}" for line in record]
    docker = [f"2026-03-14T10:02:31.{i:09d}Z {line}" for i, line in enumerate(record)]
    log = tmp_path / "vllm.log"
    for lines in (record, coloured, docker):
        log.write_text("\n".join(lines) + "\n")
        facts = read_log_facts(log, time.time() - 5, time.time() + 5)
        assert len(facts.errors_in_window) == 1, lines
        assert facts.errors_in_window[0].startswith("(VllmWorker rank=1 pid=935) ERROR ")
        assert facts.errors_in_window[0].endswith("WorkerProc failed to start.")


def test_only_the_tail_of_a_huge_log_is_read(tmp_path: Path) -> None:
    """With max_bytes, an error early in the file is not read; one in the tail is (from a whole line)."""
    stamp = datetime.now().strftime("%m-%d %H:%M:%S")
    log = tmp_path / "vllm.log"
    early = f"(APIServer pid=1) ERROR {stamp} [a.py:1] early\n"
    late = f"(APIServer pid=1) ERROR {stamp} [a.py:1] late\n"
    log.write_text(early + "INFO filler line\n" * 10_000 + late)
    facts = read_log_facts(log, time.time() - 5, time.time() + 5, max_bytes=4096)
    assert [line.rsplit(" ", 1)[-1] for line in facts.errors_in_window] == ["late"]


def test_report_1_1_moves_start_up_facts_to_one_place() -> None:
    """A 1.1 report's logs.model_load_s/engine_init_s/kv_cache_line and startup.last_* land in environment.startup."""
    data = json.loads(REPORT_1_1.read_text())
    assert data["logs"]["model_load_s"] == 2.62 and data["environment"]["startup"]["last_load_s"] == 2.62
    report = Report.model_validate(data)
    startup = report.environment.startup
    assert report.schema_version == SCHEMA_VERSION and startup is not None
    assert (startup.model_load_s, startup.engine_init_s) == (2.62, 125.83)
    assert startup.kv_cache_line is not None and startup.kv_cache_line.startswith("CPU KV cache size: 232,960 tokens")
    dumped = report.model_dump()
    assert set(dumped["logs"]) == {"log_file", "found", "warnings_in_window", "errors_in_window"}
    assert "last_load_s" not in dumped["environment"]["startup"]


def test_report_1_1_without_startup_keeps_its_log_figures() -> None:
    """A 1.1 report whose startup section is empty still carries its model load (and the log's vLLM version)."""
    data = json.loads(REPORT_1_1.read_text())
    data["environment"]["startup"] = None
    data["environment"]["vllm_version"] = None
    migrated = migrate_report(data)
    assert migrated["environment"]["startup"]["model_load_s"] == 2.62
    assert migrated["environment"]["startup"]["phase"] == "unknown"
    assert migrated["environment"]["vllm_version"] == "0.32.0"
    assert data["logs"]["model_load_s"] == 2.62  # the input is not changed
