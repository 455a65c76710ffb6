"""The gate's result in CI formats (pure): JUnit XML, one test case per gated metric, and a Markdown step summary.

A CI system reads the JUnit file as a test report (GitHub Actions, GitLab, Jenkins): a metric beyond its threshold
is a failing test case (``<failure>``), a gate that could not judge (unknown or incomparable baseline, a metric
missing on either side) an erroring one (``<error>``), and the run's own checks (some request succeeded, the error-rate
limit) are test cases of their own. The Markdown summary is what GitHub shows on the job's page
(``$GITHUB_STEP_SUMMARY``). Written by ``loadgen.orchestrate.cioutput``; the layout follows the JUnit XSD shipped in
``tests/fixtures/junit.xsd`` (the common Jenkins/Ant form: ``testsuites > testsuite > testcase``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from junit_xml import TestCase, TestSuite, to_xml_report_string

from core.gate import GateCheck, GateVerdict

SUITE = "benchmark-gate"


@dataclass(frozen=True)
class CiResult:
    """What a CI step reports: ``title`` (report or series id), the gate's verdict (None without ``GATE``),
    ``run_failures`` the run's own failed checks as ``(exit code, line)`` (no success, error-rate limit; the gate's
    line excluded), ``figures`` headline figures ``name -> text`` in order, ``report_path`` the report file."""

    title: str
    gate: GateVerdict | None
    run_failures: list[tuple[int, str]] = field(default_factory=list)
    figures: dict[str, str] = field(default_factory=dict)
    report_path: str = ""

    @property
    def exit_code(self) -> int:
        """The worst exit code: the run's failures, then the gate's (0: passed)."""
        codes = [code for code, _ in self.run_failures] + ([self.gate.exit_code] if self.gate else [])
        return next((code for code in codes if code), 0)


def _case(check: GateCheck, classname: str) -> TestCase:
    case = TestCase(check.name, classname=classname, elapsed_sec=0.0, stdout=check.detail)
    if check.error:
        case.add_error_info(message=check.detail, error_type="cannot_judge")
    elif not check.passed:
        case.add_failure_info(message=check.detail, failure_type="regression")
    return case


def junit_xml_text(result: CiResult) -> str:
    """The JUnit XML document of ``result``: one ``testsuite`` named ``benchmark-gate`` whose test cases are the
    gate's checks (class ``gate.vs_<baseline>``) and the run's own checks (class ``run``: ``requests_ok`` always,
    plus a failing case per failed run check). Properties carry the title and the report path."""
    cases: list[TestCase] = []
    if result.gate is not None:
        classname = f"gate.vs_{result.gate.baseline}"
        cases += [_case(check, classname) for check in result.gate.checks]
    if not result.run_failures:
        cases.append(_case(GateCheck("run_checks", True, "some request succeeded; error rate within its limit"), "run"))
    for code, line in result.run_failures:
        cases.append(_case(GateCheck(f"run_check_exit_{code}", False, line), "run"))
    properties = {"title": result.title, "report": result.report_path, **result.figures}
    suite = TestSuite(SUITE, cases, properties=properties)
    return to_xml_report_string([suite], prettyprint=True, encoding="utf-8")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_summary(result: CiResult) -> str:
    """The step summary: a headline with the outcome, the headline figures, one row per gate check, the run's
    failed checks, and the report's path. Markdown (GitHub-flavoured tables)."""
    outcome = "PASS" if result.exit_code == 0 else ("ERROR" if result.exit_code == 2 else "FAIL")
    lines = [f"## Benchmark {outcome}: {result.title}", ""]
    if result.figures:
        lines += ["| figure | value |", "|---|---|"]
        lines += [f"| {_cell(name)} | {_cell(value)} |" for name, value in result.figures.items()]
        lines.append("")
    if result.gate is None:
        lines.append("No gate: set `GATE=<baseline>` to judge this run against a stored baseline.")
    else:
        lines += [f"**Gate vs `{result.gate.baseline}`:** {_cell(result.gate.line)}", ""]
        lines += ["| metric | result | change |", "|---|---|---|"]
        for check in result.gate.checks:
            mark = "error" if check.error else ("pass" if check.passed else "**FAIL**")
            lines.append(f"| {_cell(check.name)} | {mark} | {_cell(check.detail)} |")
    lines.append("")
    lines += [f"- {_cell(line)}" for _, line in result.run_failures]
    if result.report_path:
        lines.append(f"Report: `{result.report_path}`")
    return "\n".join(lines).rstrip() + "\n"
