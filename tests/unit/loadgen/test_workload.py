"""Workload sampling: output-length distribution, buckets, determinism, arrivals; dataset loaders."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from core.distributions import arrival_gaps_s, lognormal_params
from core.parsing import parse_mix
from core.settings import PROJECT_ROOT
from loadgen.workloads.dataset import DatasetError, Prompt, load_dataset
from loadgen.workloads.workload import WorkloadSampler

SHAREGPT = PROJECT_ROOT.parent / "shared" / "data" / "alpaca_zh_demo.sharegpt.json"


def prompts() -> list[Prompt]:
    return [
        Prompt("s", "qa", [{"role": "user", "content": "短"}]),
        Prompt("m", "qa", [{"role": "user", "content": "中" * 100}]),
        Prompt("l", "long_doc", [{"role": "user", "content": "长" * 1000}]),
    ]


def test_default_output_lengths_have_seed_mean_and_p95() -> None:
    """Sampled max_tokens have mean ≈ 120 and P95 ≈ 280 (the seed's figures)."""
    sampler = WorkloadSampler(prompts(), seed=1)
    draws = np.asarray([sampler.max_tokens() for _ in range(20000)])
    assert draws.mean() == pytest.approx(120, rel=0.05)
    assert np.percentile(draws, 95) == pytest.approx(280, rel=0.05)
    assert draws.min() >= 1 and draws.max() <= 1024


def test_lognormal_params_reject_impossible_shapes() -> None:
    """A P95 at or below the mean has no log-normal."""
    with pytest.raises(ValueError, match="OUTPUT_LEN_MEAN < OUTPUT_LEN_P95"):
        lognormal_params(120, 100)


def test_same_seed_same_sequence() -> None:
    """The workload is reproducible from SEED."""
    a = [(w.prompt.prompt_id, w.max_tokens) for w in (WorkloadSampler(prompts(), 7).next() for _ in range(1))]
    s1, s2 = WorkloadSampler(prompts(), 7), WorkloadSampler(prompts(), 7)
    seq1 = [(w.prompt.prompt_id, w.max_tokens) for w in (s1.next() for _ in range(50))]
    seq2 = [(w.prompt.prompt_id, w.max_tokens) for w in (s2.next() for _ in range(50))]
    assert seq1 == seq2 and seq1[0] == a[0]
    s3 = WorkloadSampler(prompts(), 8)
    assert seq1 != [(w.prompt.prompt_id, w.max_tokens) for w in (s3.next() for _ in range(50))]


def test_fixed_max_tokens() -> None:
    """With a fixed length every request asks for it."""
    sampler = WorkloadSampler(prompts(), 0, fixed_max_tokens=64)
    assert {sampler.next().max_tokens for _ in range(20)} == {64}


def test_input_mix_draws_buckets_by_weight() -> None:
    """INPUT_MIX weights decide how often each input-length bucket is drawn."""
    sampler = WorkloadSampler(prompts(), 3, fixed_max_tokens=8, mix={"short": 0.8, "long": 0.2})
    buckets = [sampler.next().prompt.bucket for _ in range(5000)]
    assert set(buckets) == {"short", "long"}
    assert buckets.count("short") / len(buckets) == pytest.approx(0.8, abs=0.03)


def test_mix_asking_for_a_missing_bucket_is_an_error() -> None:
    """A mix naming a bucket the dataset lacks fails with a clear message."""
    with pytest.raises(ValueError, match="long"):
        WorkloadSampler(prompts()[:1], 0, mix={"short": 0.5, "long": 0.5})


def test_parse_mix() -> None:
    """The mix text is parsed and normalised; bad parts are named."""
    assert parse_mix("short:1,long:3") == {"short": 0.25, "long": 0.75}
    with pytest.raises(ValueError, match="huge:1"):
        parse_mix("huge:1")


def test_poisson_arrivals_have_the_requested_rate() -> None:
    """Gaps average 1/RATE; burstiness 1 gives exponential gaps (CV ≈ 1)."""
    gaps = arrival_gaps_s(4.0, 1.0, seed=0)
    sample = np.asarray([next(gaps) for _ in range(20000)])
    assert sample.mean() == pytest.approx(0.25, rel=0.03)
    assert sample.std() / sample.mean() == pytest.approx(1.0, rel=0.05)


def test_zero_rate_is_refused() -> None:
    """RATE=0 is an error that says what to do."""
    with pytest.raises(ValueError, match="unset it for a closed loop"):
        next(arrival_gaps_s(0.0, 1.0, 0))


def test_bundled_corpus_loads_with_buckets_and_tasks() -> None:
    """The bundled Chinese corpus loads without skips and has several task types."""
    dataset = load_dataset(PROJECT_ROOT / "loadgen/workloads/data/prompts_zh.jsonl")
    assert dataset.skipped == 0 and len(dataset.prompts) >= 40
    assert len({p.task for p in dataset.prompts}) >= 5
    assert any("MoE" in p.messages[-1]["content"] for p in dataset.prompts)


def test_jsonl_bad_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    """Invalid JSON, missing prompt and a dialogue ending with the assistant are skipped and counted."""
    path = tmp_path / "p.jsonl"
    lines = [
        json.dumps({"prompt": "你好"}, ensure_ascii=False),
        "{not json",
        json.dumps({"text": "no prompt field"}),
        json.dumps({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}),
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "a"},
                    {"role": "assistant", "content": "b"},
                    {"role": "user", "content": "c"},
                ],
                "task": "dialogue",
            }
        ),
    ]
    path.write_text("\n".join(lines), encoding="utf-8")
    dataset = load_dataset(path)
    assert dataset.skipped == 3 and len(dataset.prompts) == 2
    assert dataset.prompts[1].messages[-1]["content"] == "c"
    # where they stand, for the warning and the report's config.dataset_skipped
    assert dataset.skipped_text() == "3 unusable entries skipped (lines 2, 3, 4)"


def test_missing_and_empty_datasets_are_clear_errors(tmp_path: Path) -> None:
    """A missing file, a folder and a file with nothing usable each name the path and what is wrong with it."""
    with pytest.raises(DatasetError, match="not found"):
        load_dataset(tmp_path / "nope.jsonl")
    with pytest.raises(DatasetError, match="is a folder: DATASET names one file"):
        load_dataset(tmp_path)
    (tmp_path / "empty.jsonl").write_text("{}\n")
    with pytest.raises(DatasetError, match="no usable entry"):
        load_dataset(tmp_path / "empty.jsonl")


def test_sharegpt_conversations_end_at_last_human_turn(tmp_path: Path) -> None:
    """ShareGPT entries become messages up to the last human turn; broken entries are counted."""
    data = [
        {"id": "a", "conversations": [{"from": "human", "value": "问"}, {"from": "gpt", "value": "答"}]},
        {"id": "b", "conversations": [{"from": "alien", "value": "?"}]},
    ]
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    dataset = load_dataset(path)
    assert dataset.skipped == 1 and dataset.prompts[0].messages == [{"role": "user", "content": "问"}]
    assert dataset.skipped_text() == "1 unusable entry skipped (entries 2)"


@pytest.mark.skipif(not SHAREGPT.exists(), reason=f"shared data {SHAREGPT} absent")
def test_real_sharegpt_file_loads() -> None:
    """The shared 1,000-conversation Chinese ShareGPT file loads fully, short prompts in the short bucket mostly."""
    dataset = load_dataset(SHAREGPT)
    assert len(dataset.prompts) + dataset.skipped == 1000 and dataset.skipped == 0
    assert sum(p.bucket == "short" for p in dataset.prompts) > 500
