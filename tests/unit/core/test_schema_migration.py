"""Reports and baselines written by the previous schema (1.2: a real report of `./run_benchmark.sh --baseline v1`,
made by main before the 1.3 fields) still load, compare and gate after them."""

from __future__ import annotations

import json
from pathlib import Path

from core.comparison import compare_with_history
from core.fingerprint import fingerprint_fields, fingerprint_of, refusal_reason
from core.gate import gate_verdict
from core.report_schema import SCHEMA_VERSION, BenchmarkConfig, Report, migrate_report

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "report_1.2.json"


def load_1_2() -> Report:
    data = json.loads(FIXTURE.read_text())
    assert data["schema_version"] == "1.2"
    return Report.model_validate(migrate_report(data))


def test_a_1_2_report_loads_as_the_current_version() -> None:
    report = load_1_2()
    assert report.schema_version == SCHEMA_VERSION == "1.5"
    assert report.metrics.requests_ok > 0
    assert report.server is not None and report.server.client_overhead == []  # the new fields: their defaults
    assert report.config.remote_workers == 0


def test_a_1_2_baseline_is_comparable_with_a_new_run_of_its_workload_and_gates_it() -> None:
    old = load_1_2()
    fields = fingerprint_fields(old.config, old.environment)
    assert fingerprint_of(fields) == old.fingerprint  # the fingerprint did not move with the new fields
    assert refusal_reason(old, fields) is None
    slower = old.metrics.model_copy(update={"throughput_req_per_sec": old.metrics.throughput_req_per_sec * 0.5})
    new = old.model_copy(update={"metrics": slower, "report_id": "benchmark_report_x"})
    comparison = compare_with_history(new, [old], {"v1": old}, 5.0)
    assert {k: c.against for k, c in comparison.items()} == {"vs_previous": old.report_id, "vs_v1": old.report_id}
    new = new.model_copy(update={"comparison": comparison})
    verdict = gate_verdict(new, "v1", threshold_pct=5.0)
    assert verdict.exit_code == 3 and "throughput" in verdict.line
    same = old.model_copy(update={"comparison": compare_with_history(old, [old], {"v1": old}, 5.0)})
    assert gate_verdict(same, "v1", threshold_pct=5.0).exit_code == 0


def test_the_bundled_corpus_keeps_its_fingerprint_after_it_moved() -> None:
    """A run of the bundled corpus at its new path (loadgen/workloads/data/) compares with reports naming loadtest/data/."""
    old = load_1_2()
    assert old.config.dataset == "loadtest/data/prompts_zh.jsonl"
    moved = old.config.model_copy(update={"dataset": "loadgen/workloads/data/prompts_zh.jsonl"})
    assert fingerprint_of(fingerprint_fields(moved, old.environment)) == old.fingerprint
    other = old.config.model_copy(update={"dataset": "my/own.jsonl"})
    assert fingerprint_of(fingerprint_fields(other, old.environment)) != old.fingerprint


def test_users_see_the_moved_corpus_at_its_current_path_while_fingerprints_stay_equal() -> None:
    """The fingerprint keeps the alias loadtest/data/…, but what a user reads (a refusal's differing fields, the
    A/B differences of `make compare`) names loadgen/workloads/data/…; an old and a new run of the corpus show no
    dataset difference at all."""
    from core.comparison import Side, differences
    from core.fingerprint import current_dataset

    old = load_1_2()
    assert current_dataset("loadtest/data/prompts_zh.jsonl") == "loadgen/workloads/data/prompts_zh.jsonl"
    assert current_dataset("my/own.jsonl") == "my/own.jsonl"
    other = old.config.model_copy(update={"dataset": "my/own.jsonl"})
    reason = refusal_reason(old, fingerprint_fields(other, old.environment))
    assert reason is not None and "dataset: 'loadgen/workloads/data/prompts_zh.jsonl' -> 'my/own.jsonl'" in reason
    assert "loadtest/" not in reason

    def side(config: BenchmarkConfig) -> Side:
        return Side(ref="x", kind="report", id="x", environment=old.environment, config=config, points=[])

    moved = old.config.model_copy(update={"dataset": "loadgen/workloads/data/prompts_zh.jsonl"})
    assert not [d for d in differences(side(old.config), side(moved)) if d.field == "dataset"]
    (diff,) = [d for d in differences(side(old.config), side(other)) if d.field == "dataset"]
    assert (diff.a, diff.b) == ("loadgen/workloads/data/prompts_zh.jsonl", "my/own.jsonl")


def test_workload_differences_compare_only_the_knobs_of_each_runs_load_mode() -> None:
    """Two open-loop runs whose (unused) CONCURRENCY differs show no concurrency difference, only their rates; an
    open-loop run against a closed-loop one shows the mode and each side's own knobs (None where one has none)."""
    from core.comparison import Side, differences

    old = load_1_2()

    def side(**update: object) -> Side:
        return Side(ref="x", kind="report", id="x", environment=old.environment,
                    config=old.config.model_copy(update=update), points=[])  # fmt: skip

    open_a = side(mode="open_loop", concurrency=4, rate_req_per_sec=2.0, ramp_up_s=1.0)
    open_b = side(mode="open_loop", concurrency=50, rate_req_per_sec=4.0, ramp_up_s=5.0)
    assert [(d.field, d.a, d.b) for d in differences(open_a, open_b) if d.group == "workload"] == [
        ("rate_req_per_sec", "2.0", "4.0")
    ]
    closed = side(mode="closed_loop", concurrency=8, rate_req_per_sec=None)
    mixed = {d.field: (d.a, d.b) for d in differences(closed, open_a) if d.group == "workload"}
    assert mixed["mode"] == ("closed_loop", "open_loop") and mixed["concurrency"] == ("8", None)
    assert mixed["rate_req_per_sec"] == (None, "2.0")


def test_a_1_4_comparison_with_notes_and_a_refusal_reads_as_one_comparison_each() -> None:
    """A 1.4 report's comparison — changes written twice, notes apart and prefixed, a refused baseline — reads as
    one comparison per reference: its notes without the prefix, the refusal its own, the p99 change under its
    series name; the gate judges it as before (a throughput drop of 12 % fails)."""
    data = json.loads(FIXTURE.read_text())
    changes = {"throughput_req_per_sec_pct": -12.0, "latency_p99_ms_pct": 1.0, "gpu_mem_peak_gb_pct": None}
    data["comparison"] = {
        "fingerprint": "abc", "against": {"vs_v1": "benchmark_report_20260101_120000"},
        "changes_pct": {"vs_v1": changes}, "vs_v1": changes, "refused": {"vs_old": "workload differs (c: 4 -> 8)"},
        "notes": ["vs_v1: vllm_version differs (a -> b); the comparison includes that change",
                  "vs_old: refused: workload differs (c: 4 -> 8)"],
    }  # fmt: skip
    report = Report.model_validate(data)
    assert report.fingerprint == "abc" and set(report.comparison) == {"vs_v1", "vs_old"}
    v1 = report.comparison["vs_v1"]
    assert v1.notes == ["vllm_version differs (a -> b); the comparison includes that change"]
    assert v1.points[0].changes["e2e_p99_ms"].change_pct == 1.0 and "gpu_mem_peak_gb" not in v1.points[0].changes
    assert report.comparison["vs_old"].refused == "workload differs (c: 4 -> 8)"
    verdict = gate_verdict(report, "v1", threshold_pct=5.0)
    assert verdict.exit_code == 3 and "throughput_req_per_sec -12.0% (limit -5%)" in verdict.line
