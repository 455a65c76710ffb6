"""The gate's CI output: JUnit XML (one test case per gated metric) and the Markdown step summary."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from core.gate import EXIT_FAIL, gate_verdict
from core.settings import Settings
from loadgen.orchestrate import outcome
from loadgen.orchestrate.outcome import CiResult, ci_result, junit_xml_text, markdown_summary, write_ci_outputs
from tests.unit.sidecar.test_sidecar_gate import with_changes

XSD = Path(__file__).parents[2] / "fixtures" / "junit.xsd"


def _settings(**fields: Any) -> Settings:
    return Settings(_env_file=None, **fields)  # type: ignore[call-arg]


def _cases(xml_text: str) -> dict[str, ET.Element]:
    root = ET.fromstring(xml_text.encode())
    return {case.get("name", ""): case for case in root.iter("testcase")}


def _result(throughput_pct: float | None, p99_pct: float | None, baseline: str = "v1") -> CiResult:
    report = with_changes(f"vs_{baseline}", throughput_pct, p99_pct)
    return CiResult(report.report_id, gate_verdict(report, "v1", 5.0), [], {"throughput": "3 req/s"}, "r.json")


def test_failing_gate_gives_a_failing_test_case_per_failed_metric() -> None:
    """A 12 % throughput drop fails its test case; p99 within the limit passes its own; counts agree."""
    text = junit_xml_text(_result(-12.3, 1.0))
    cases = _cases(text)
    failure = cases["throughput_req_per_sec"].find("failure")
    assert failure is not None and "-12.3%" in (failure.get("message") or "")
    assert cases["latency_p99_ms"].find("failure") is None
    assert cases["run_checks"].find("failure") is None
    suite = ET.fromstring(text.encode()).find("testsuite")
    assert suite is not None and suite.get("tests") == "3" and suite.get("failures") == "1"


def test_passing_gate_has_no_failure_and_unknown_baseline_is_an_error() -> None:
    """An equal run passes every case; a baseline that is not marked is one erroring case, not a pass."""
    assert not any(c.find("failure") is not None for c in _cases(junit_xml_text(_result(0.0, 0.0))).values())
    unknown = _cases(junit_xml_text(_result(0.0, 0.0, baseline="other")))
    assert unknown["baseline"].find("error") is not None


@pytest.mark.parametrize(("throughput_pct", "p99_pct"), [(0.0, 0.0), (-12.3, 30.0), (None, 1.0)])
def test_junit_file_validates_against_the_junit_schema(throughput_pct: float | None, p99_pct: float | None) -> None:
    """Passing, failing and cannot-judge documents all validate against tests/fixtures/junit.xsd."""
    xmlschema = pytest.importorskip("xmlschema", reason="xmlschema (requirements/dev.txt) validates the XSD")
    schema = xmlschema.XMLSchema(str(XSD))
    schema.validate(junit_xml_text(_result(throughput_pct, p99_pct)))
    with pytest.raises(xmlschema.XMLSchemaValidationError):  # the schema bites: a testcase needs a name
        schema.validate("<testsuites><testsuite name='x' tests='1'><testcase/></testsuite></testsuites>")


def test_summary_names_outcome_and_each_check() -> None:
    """The step summary's headline says FAIL and the table marks the failed metric."""
    text = markdown_summary(_result(-12.3, 1.0))
    assert text.startswith("## Benchmark FAIL: ")
    assert "| throughput_req_per_sec | **FAIL** | -12.3% (limit -5%) |" in text
    assert "| latency_p99_ms | pass | +1.0% (limit +5%) |" in text
    assert "Report: `r.json`" in text


def test_run_failures_fail_the_run_case_and_the_exit_code() -> None:
    """An error-rate breach with no gate is a failing ``run`` test case and a non-zero outcome."""
    result = CiResult("r", None, [(4, "[ERROR] Error rate 9.0% is above MAX_ERROR_RATE_PCT=1%")])
    assert result.exit_code == 4
    case = _cases(junit_xml_text(result))["run_check_exit_4"]
    assert case.find("failure") is not None
    assert "No gate" in markdown_summary(result)


def test_files_written_where_asked_and_github_summary_appended(tmp_path: Path) -> None:
    """--junit and --summary write their files; without --summary the GitHub step summary is appended to."""
    report = with_changes("vs_v1", -12.3, 1.0)
    settings = _settings(gate="v1", junit_file=tmp_path / "ci" / "gate.xml",
                        summary_file=tmp_path / "s.md")  # fmt: skip
    failed = [(EXIT_FAIL, "[GATE] FAIL ...")]
    lines = write_ci_outputs(settings, ci_result(report, "r.json", failed, gate_verdict(report, "v1", 5.0)))
    assert lines == [f"[CI] JUnit: {tmp_path / 'ci' / 'gate.xml'}", f"[CI] Summary: {tmp_path / 's.md'}"]
    assert _cases((tmp_path / "ci" / "gate.xml").read_text())["throughput_req_per_sec"].find("failure") is not None
    github = tmp_path / "step_summary.md"
    github.write_text("earlier step\n")
    settings = _settings(gate="v1", github_step_summary=github)
    write_ci_outputs(settings, ci_result(report, "r.json", failed, gate_verdict(report, "v1", 5.0)))
    text = github.read_text()
    assert text.startswith("earlier step\n## Benchmark FAIL: ")


def test_unwritable_file_is_a_warning(tmp_path: Path) -> None:
    """A JUnit path that cannot be written gives a warning line naming it, never an exception."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    settings = _settings(junit_file=blocker / "gate.xml")
    lines = write_ci_outputs(settings, CiResult("r", None))
    assert lines[0].startswith(f"[WARN] {blocker / 'gate.xml'} not written: ")


def test_github_step_summary_read_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """GitHub Actions' GITHUB_STEP_SUMMARY reaches the settings without any flag."""
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "x.md"))
    assert _settings().github_step_summary == tmp_path / "x.md"


def test_the_gate_is_judged_once_for_the_exit_code_and_the_ci_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The end of a run judges the GATE once: the exit code and the JUnit file carry that one verdict."""
    calls: list[str] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[1])
        return gate_verdict(*args, **kwargs)

    monkeypatch.setattr(outcome, "gate_verdict", counted)
    monkeypatch.setattr(outcome, "gate_verdict", counted, raising=False)  # a second judge there once
    report = with_changes("vs_v1", -12.3, 1.0)
    settings = _settings(gate="v1", junit_file=tmp_path / "gate.xml")
    code = outcome.finish(settings, None, report, "r.json", interrupted=False, server_down=None)  # type: ignore[arg-type]
    assert code == EXIT_FAIL and calls == ["v1"]
    assert _cases((tmp_path / "gate.xml").read_text())["throughput_req_per_sec"].find("failure") is not None
