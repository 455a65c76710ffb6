"""Comparisons: fingerprints, named baselines, refusals and the direct ``comparison.vs_<name>`` keys."""

from __future__ import annotations

import json

import pytest

from core.compare import (
    compare_with_history,
    differing_fields,
    fingerprint_fields,
    metric_changes,
    workload_fingerprint,
)
from core.report_schema import Environment, Report
from tests.unit.sidecar.test_sidecar_store import report


def test_fingerprint_ignores_seed_and_slo_but_not_load_shape() -> None:
    """Seed and SLOs do not change the workload; concurrency, lengths and the model do."""
    base = report()
    same = base.config.model_copy(update={"seed": 7, "slo": {"ttft_ms": 500.0}})
    assert workload_fingerprint(same, base.environment) == workload_fingerprint(base.config, base.environment)
    for update in ({"concurrency": 9}, {"max_tokens": 64}, {"dataset": "other"}, {"rate_req_per_sec": 2.0}):
        other = base.config.model_copy(update=update)
        assert workload_fingerprint(other, base.environment) != workload_fingerprint(base.config, base.environment)
    gpu = Environment(gpu_model="NVIDIA H200", gpu_count=1)
    assert workload_fingerprint(base.config, gpu) != workload_fingerprint(base.config, base.environment)


def test_differing_fields_name_old_and_new_values() -> None:
    """The refusal reason lists each differing field as ``name: old -> new``."""
    a, b = report(), report(concurrency=50)
    diff = differing_fields(fingerprint_fields(a.config, a.environment), fingerprint_fields(b.config, b.environment))
    assert diff == ["concurrency: 8 -> 50"]


def test_named_baseline_of_same_workload_is_compared() -> None:
    """Every named baseline of the same fingerprint yields ``vs_<name>`` next to ``vs_previous``."""
    old = report("benchmark_report_20260101_120000", throughput=2.0)
    prev = report("benchmark_report_20260101_130000", throughput=2.2, ended=2.0)
    new = report("benchmark_report_20260101_140000", throughput=2.24, ended=3.0)
    comparison = compare_with_history(new.config, new.environment, new.metrics, [old, prev], {"v0.2.1": old})
    assert comparison.against == {"vs_previous": prev.report_id, "vs_v0.2.1": old.report_id}
    assert comparison.changes_pct["vs_v0.2.1"]["throughput_req_per_sec_pct"] == pytest.approx(12.0)
    assert comparison.fingerprint == workload_fingerprint(new.config, new.environment)


def test_baseline_of_other_workload_is_refused_with_the_fields() -> None:
    """A baseline with another fingerprint is not compared; ``refused`` and the notes say which fields differ."""
    old = report(concurrency=50)
    new = report("benchmark_report_20260101_140000", ended=3.0)
    comparison = compare_with_history(new.config, new.environment, new.metrics, [], {"big": old})
    assert "vs_big" not in comparison.changes_pct
    assert "concurrency: 50 -> 8" in comparison.refused["vs_big"]
    assert any(n.startswith("vs_big: refused") for n in comparison.notes)


def test_unloadable_baseline_is_listed_as_refused() -> None:
    """A baseline whose report vanished is reported, not a crash."""
    new = report()
    comparison = compare_with_history(new.config, new.environment, new.metrics, [], {"gone": "its report x is gone"})
    assert comparison.refused == {"vs_gone": "its report x is gone"}


def test_environment_changes_outside_the_fingerprint_are_flagged() -> None:
    """A different vLLM version still compares, with a note saying so."""
    old = report().model_copy(update={"environment": Environment(vllm_version="0.31.0")})
    new = report("benchmark_report_20260101_140000", ended=3.0)
    new_env = Environment(vllm_version="0.32.0")
    comparison = compare_with_history(new.config, new_env, new.metrics, [old])
    assert "vs_previous" in comparison.changes_pct
    assert any("vllm_version differs (0.31.0 -> 0.32.0)" in n for n in comparison.notes)


def test_a_run_whose_end_cut_many_requests_is_no_reference() -> None:
    """32 users, 20 s: 19 finished, 13 cut by the end. The finished ones are the short answers, so the run is no
    reference: not the previous run of the next one, and refused as a baseline; 1 cut in 20 still is one."""
    from core.compare import unusable_reason

    old = report()
    cut = old.model_copy(update={"metrics": old.metrics.model_copy(update={"requests_total": 19,
                                                                           "requests_incomplete": 13})})  # fmt: skip
    assert "had 13 of its 32 requests cut by its end" in (unusable_reason(cut) or "")
    one = old.model_copy(update={"metrics": old.metrics.model_copy(update={"requests_total": 19,
                                                                           "requests_incomplete": 1})})  # fmt: skip
    assert unusable_reason(one) is None
    new = report("benchmark_report_20260101_140000", ended=3.0)
    assert "vs_previous" not in compare_with_history(new.config, new.environment, new.metrics, [cut]).changes_pct


def test_a_field_one_side_could_not_read_is_no_change() -> None:
    """vLLM killed mid-run: the new report could not read the fingerprint (None); the comparison says nothing about
    it (it once said "vllm_fingerprint differs (vllm-0.32.0-85bf72ca -> vllm-0.32.0)": a guess of another form)."""
    old = report().model_copy(update={"environment": Environment(vllm_fingerprint="vllm-0.32.0-85bf72ca")})
    new = report("benchmark_report_20260101_140000", ended=3.0)
    comparison = compare_with_history(new.config, Environment(vllm_fingerprint=None), new.metrics, [old])
    assert "vs_previous" in comparison.changes_pct and not any("fingerprint" in n for n in comparison.notes)


def test_json_has_direct_comparison_keys_and_reads_back() -> None:
    """comparison.vs_<name>.<metric>_pct exists in the JSON, and such JSON validates back into a Report."""
    old = report(throughput=2.0)
    new = report("benchmark_report_20260101_140000", throughput=2.24, ended=3.0)
    comparison = compare_with_history(new.config, new.environment, new.metrics, [old], {"v0.2.1": old})
    full = new.model_copy(update={"comparison": comparison})
    data = json.loads(full.model_dump_json())
    assert data["comparison"]["vs_v0.2.1"]["throughput_req_per_sec_pct"] == pytest.approx(12.0)
    assert Report.model_validate(data).comparison == comparison


def test_metric_changes_are_rounded_and_none_where_missing() -> None:
    """Percent changes have two decimals; a metric missing on either side is None."""
    changes = metric_changes(report(throughput=3.0).metrics, report(throughput=2.0).metrics)
    assert changes["throughput_req_per_sec_pct"] == 50.0 and changes["gpu_mem_peak_gb_pct"] is None


def test_a_much_warmer_prefix_cache_is_noted_beside_the_comparison() -> None:
    """A run whose prompts vLLM's prefix cache mostly held already (74 % of the prompt tokens against 0 % in the
    run compared with) gets a note naming both rates and what to do, for vs_previous and a named baseline alike; rates
    within 20 points, or a side without vLLM's /metrics, get none."""
    from core.serverview import ServerView

    def served(rate: float | None) -> ServerView:
        return ServerView.model_construct(prefix_cache_hit_rate_percent=rate)

    old = report("benchmark_report_20260101_120000").model_copy(update={"server": served(0.0)})
    new = report("benchmark_report_20260101_140000", ended=3.0)
    warm = compare_with_history(new.config, new.environment, new.metrics, [old], {"v1": old}, served(73.6))
    noted = [n for n in warm.notes if "prefix cache" in n]
    assert [n.split(":")[0] for n in noted] == ["vs_previous", "vs_v1"]
    assert "0% of the prompt tokens then and 74% now" in noted[0] and "./start_vllm.sh" in noted[0]
    for rate in (15.0, None):
        same = compare_with_history(new.config, new.environment, new.metrics, [old], {"v1": old}, served(rate))
        assert not [n for n in same.notes if "prefix cache" in n]
    unscraped = old.model_copy(update={"server": None})
    assert not [n for n in compare_with_history(new.config, new.environment, new.metrics, [unscraped], None,
                                                served(73.6)).notes if "prefix cache" in n]  # fmt: skip
