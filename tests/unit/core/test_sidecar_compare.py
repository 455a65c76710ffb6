"""Comparisons: fingerprints, named baselines, refusals, and each comparison written once in the JSON."""

from __future__ import annotations

import json

import pytest

from core.comparison import compare_with_history, report_notes
from core.fingerprint import differing_fields, fingerprint_fields, workload_fingerprint
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
    comparison = compare_with_history(new, [old, prev], {"v0.2.1": old}, 5.0)
    assert {k: c.against for k, c in comparison.items()} == {"vs_previous": prev.report_id, "vs_v0.2.1": old.report_id}
    change = comparison["vs_v0.2.1"].points[0].changes["throughput_req_per_sec"]
    assert change.change_pct == pytest.approx(12.0) and change.verdict == "no interval (single runs)"


def test_baseline_of_other_workload_is_refused_with_the_fields() -> None:
    """A baseline with another fingerprint is not compared; ``refused`` and the notes say which fields differ."""
    old = report(concurrency=50)
    new = report("benchmark_report_20260101_140000", ended=3.0)
    comparison = compare_with_history(new, [], {"big": old}, 5.0)
    assert not comparison["vs_big"].points and "concurrency: 50 -> 8" in (comparison["vs_big"].refused or "")
    notes = report_notes(new.model_copy(update={"comparison": comparison}))
    assert any(n.startswith("vs_big: not compared: workload differs") for n in notes)


def test_unloadable_baseline_is_listed_as_refused() -> None:
    """A baseline whose report vanished is reported, not a crash."""
    new = report()
    comparison = compare_with_history(new, [], {"gone": "its report x is gone"}, 5.0)
    assert {k: c.refused for k, c in comparison.items()} == {"vs_gone": "its report x is gone"}


def test_environment_changes_outside_the_fingerprint_are_flagged() -> None:
    """A different vLLM version still compares, with a note saying so."""
    old = report().model_copy(update={"environment": Environment(vllm_version="0.31.0")})
    new = report("benchmark_report_20260101_140000", ended=3.0)
    new = new.model_copy(update={"environment": Environment(vllm_version="0.32.0")})
    comparison = compare_with_history(new, [old], {}, 5.0)
    assert comparison["vs_previous"].points
    assert any("vllm_version differs (0.31.0 -> 0.32.0)" in n for n in comparison["vs_previous"].notes)


def test_a_run_whose_end_cut_many_requests_is_no_reference() -> None:
    """32 users, 20 s: 19 finished, 13 cut by the end. The finished ones are the short answers, so the run is no
    reference: not the previous run of the next one, and refused as a baseline; 1 cut in 20 still is one."""
    from core.fingerprint import unusable_reason

    old = report()
    cut = old.model_copy(update={"metrics": old.metrics.model_copy(update={"requests_total": 19,
                                                                           "requests_incomplete": 13})})  # fmt: skip
    assert "had 13 of its 32 requests cut by its end" in (unusable_reason(cut) or "")
    one = old.model_copy(update={"metrics": old.metrics.model_copy(update={"requests_total": 19,
                                                                           "requests_incomplete": 1})})  # fmt: skip
    assert unusable_reason(one) is None
    new = report("benchmark_report_20260101_140000", ended=3.0)
    assert "vs_previous" not in compare_with_history(new, [cut], {}, 5.0)


def test_a_field_one_side_could_not_read_is_no_change() -> None:
    """vLLM killed mid-run: the new report could not read the fingerprint (None); the comparison says nothing about
    it (it once said "vllm_fingerprint differs (vllm-0.32.0-85bf72ca -> vllm-0.32.0)": a guess of another form)."""
    old = report().model_copy(update={"environment": Environment(vllm_fingerprint="vllm-0.32.0-85bf72ca")})
    new = report("benchmark_report_20260101_140000", ended=3.0)
    new = new.model_copy(update={"environment": Environment(vllm_fingerprint=None)})
    previous = compare_with_history(new, [old], {}, 5.0)["vs_previous"]
    assert previous.points and not any("fingerprint" in n for n in previous.notes)


def test_each_comparison_is_written_once_and_reads_back() -> None:
    """A report's JSON holds each comparison once, under its name (no copy of its changes elsewhere), and such JSON
    validates back into the same Report."""
    old = report(throughput=2.0)
    new = report("benchmark_report_20260101_140000", throughput=2.24, ended=3.0)
    full = new.model_copy(update={"comparison": compare_with_history(new, [old], {"v0.2.1": old}, 5.0)})
    text = full.model_dump_json()
    data = json.loads(text)
    assert set(data["comparison"]) == {"vs_previous", "vs_v0.2.1"}
    assert text.count('"vs_v0.2.1"') == 1 and text.count('"vs_previous"') == 1
    assert data["comparison"]["vs_v0.2.1"]["points"][0]["changes"]["throughput_req_per_sec"]["change_pct"] == (
        pytest.approx(12.0)
    )
    assert Report.model_validate(data) == full


def test_a_much_warmer_prefix_cache_is_noted_beside_the_comparison() -> None:
    """A run whose prompts vLLM's prefix cache mostly held already (74 % of the prompt tokens against 0 % in the
    run compared with) gets a note naming both rates and what to do, for vs_previous and a named baseline alike; rates
    within 20 points, or a side without vLLM's /metrics, get none."""
    from core.serverview import ServerView

    def served(rate: float | None) -> ServerView:
        return ServerView.model_construct(prefix_cache_hit_rate_percent=rate)

    def notes(new_rate: float | None, old: Report) -> list[str]:
        new = report("benchmark_report_20260101_140000", ended=3.0).model_copy(update={"server": served(new_rate)})
        compared = new.model_copy(update={"comparison": compare_with_history(new, [old], {"v1": old}, 5.0)})
        return [n for n in report_notes(compared) if "prefix cache" in n]

    old = report("benchmark_report_20260101_120000").model_copy(update={"server": served(0.0)})
    noted = notes(73.6, old)
    assert [n.split(":")[0] for n in noted] == ["vs_previous", "vs_v1"]
    assert "0% of the prompt tokens then and 74% now" in noted[0] and "./start_vllm.sh" in noted[0]
    assert notes(15.0, old) == notes(None, old) == []
    assert notes(73.6, old.model_copy(update={"server": None})) == []


def test_a_flag_one_side_did_not_pass_reads_as_vllms_default_and_its_config_hash_is_not_a_second_change() -> None:
    """A fresh user read `--max-num-seqs: None -> 1` and `vllm_fingerprint differs (vllm-0.32.0-f9832c0b ->
    vllm-0.32.0-6708f32d)`, which looked like another vLLM build: the flag's missing side is vLLM's default, and
    the system fingerprint (a hash of vLLM's config) is not noted again when a flag explains it; a new vLLM version
    still is."""
    from core.comparison import environment_notes
    from core.report_schema import Environment
    from loadgen.terminal.summary import side_text

    old = Environment(vllm_version="0.32.0", vllm_fingerprint="vllm-0.32.0-f9832c0b", vllm_args=["--port", "1"])
    new = old.model_copy(update={"vllm_fingerprint": "vllm-0.32.0-6708f32d",
                                 "vllm_args": ["--port", "1", "--max-num-seqs", "1"]})  # fmt: skip
    notes = environment_notes(old, new)
    assert notes == ["vLLM flag --max-num-seqs differs (unset (vLLM's default) -> 1); the comparison includes that "
                     "change"], notes  # fmt: skip
    upgraded = new.model_copy(update={"vllm_version": "0.33.0", "vllm_fingerprint": "vllm-0.33.0-1"})
    assert any(n.startswith("vllm_fingerprint differs") for n in environment_notes(old, upgraded))
    assert side_text("vLLM flags", None) == "unset (vLLM's default)" and side_text("workload", None) == "unset"


def test_make_compare_shows_the_medians_and_itl_and_says_which_way_a_single_runs_change_went() -> None:
    """A fresh user's `make compare` of --max-num-seqs 1 against the default showed throughput and the p99s only,
    hiding TTFT p50 +341 %, and said "no interval (single runs)" without better or worse: its line now carries the
    medians, ITL and TPOT, and each single-run change says which way it went."""
    from core.comparison import compare_reports
    from loadgen.terminal.summary import change_parts
    from tests.unit.sidecar.test_sidecar_store import report

    old = report(throughput=2.0)
    new = report(throughput=1.0)
    ttft = new.metrics.ttft.model_copy(update={"p50_ms": 88.0})  # the old run's is 20 ms
    new = new.model_copy(update={"metrics": new.metrics.model_copy(update={"ttft": ttft})})
    (point,) = compare_reports(new, old, 5.0).points
    line = change_parts(point, hits=True)
    assert "throughput -50% (worse; single runs: no interval)" in line, line
    assert "TTFT p50 +340% (worse; single runs: no interval)" in line, line
    assert "TPOT p50" in line and "E2E p50" in line
    assert "TTFT p50" not in change_parts(point)  # a run's own [COMPARE] line stays short
