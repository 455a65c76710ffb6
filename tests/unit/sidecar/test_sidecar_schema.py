"""The committed JSON Schema (reports/schema.json) matches the code; reports validate against it."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from core.report_schema import SCHEMA_VERSION, Report
from core.settings import PROJECT_ROOT
from sidecar.reports.schema_export import main, schema_text, write_schema_if_changed
from tests.unit.sidecar.test_sidecar_store import report, single_run

COMMITTED = PROJECT_ROOT / "reports" / "schema.json"


def test_committed_schema_is_up_to_date() -> None:
    """reports/schema.json equals the schema of the code (run `python -m sidecar.reports.schema_export`)."""
    assert COMMITTED.read_text(encoding="utf-8") == schema_text(), "stale: python -m sidecar.reports.schema_export"


def test_schema_describes_the_report_sections() -> None:
    """Every issue-listed section is in the schema, and the version is recorded."""
    schema = json.loads(schema_text())
    for section in ("timestamp", "environment", "config", "metrics", "server", "resources", "errors", "comparison"):
        assert section in schema["properties"], section
    assert schema["properties"]["schema_version"]["default"] == SCHEMA_VERSION
    env = schema["$defs"]["Environment"]["properties"]
    for name in ("vllm_fingerprint", "model_revision", "project_version", "project_git_commit", "synthetic"):
        assert name in env, name


def test_report_json_validates_against_committed_schema() -> None:
    """A report's JSON (with a comparison) validates against reports/schema.json."""
    r = report().model_copy(update={"comparison": {"vs_v0.2.1": single_run("r", {"throughput_req_per_sec": 12.0})}})
    data = json.loads(r.model_dump_json())
    jsonschema.validate(data, json.loads(COMMITTED.read_text()))
    assert Report.model_validate(data) == r


def test_export_writes_only_when_changed_and_check_mode(tmp_path: Path) -> None:
    """The export is idempotent; --check exits 1 on a stale file and 0 on a fresh one."""
    out = tmp_path / "schema.json"
    assert main(["--check", "--out", str(out)]) == 1
    assert write_schema_if_changed(out) and not write_schema_if_changed(out)
    assert main(["--check", "--out", str(out)]) == 0
    out.write_text("{}")
    assert main(["--check", "--out", str(out)]) == 1
    assert main(["--out", str(out)]) == 0 and out.read_text() == schema_text()
