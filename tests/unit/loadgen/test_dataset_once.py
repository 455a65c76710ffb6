"""A run parses its dataset once: the benchmark's checks, warmup and plan share one parse, and the Locust processes
take the prompts from the plan file instead of parsing the dataset again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.records import RequestRecord
from core.requestlog import RequestLog
from core.settings import Settings
from loadgen.locust_side.process_state import RunState
from loadgen.orchestrate import locust_run, measured_run
from loadgen.plan import bench_config, read_run_plan, sampler_for, write_plan
from loadgen.workloads import dataset


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    """Every parse of a dataset file (calls of :func:`loadgen.workloads.dataset.load_dataset`), from a clean slate."""
    seen: list[Path] = []
    real = dataset.load_dataset

    def counting(path: Path) -> dataset.Dataset:
        seen.append(path)
        return real(path)

    monkeypatch.setattr(dataset, "load_dataset", counting)
    dataset.forget_parsed()
    yield seen
    dataset.forget_parsed()


def settings_for(tmp_path: Path, prompts: int = 30) -> Settings:
    data = tmp_path / "d.jsonl"
    data.write_text("".join(f'{{"prompt": "题目{i}", "task": "t{i % 3}"}}\n' for i in range(prompts)), encoding="utf-8")
    return Settings(
        _env_file=None,  # type: ignore[call-arg]
        dataset=data, logs_dir=tmp_path / "logs", run_dir=tmp_path / "run", requests=12, warmup=4, concurrency=2,
    )  # fmt: skip


def fake_stream_chat(session: Any, url: str, payload: dict[str, Any], **kw: Any) -> RequestRecord:
    return RequestRecord(request_id="w", started_at=0.0, ok=True, e2e_ms=1.0, phase=kw.get("phase", "measured"))


def items(state: RunState, count: int) -> list[tuple[str, int]]:
    state.begin(count, None)
    return [(state.item(k).prompt.prompt_id, state.item(k + 1).max_tokens) for k in range(0, count, 2)]


def test_one_runs_code_path_parses_the_dataset_once(
    tmp_path: Path, parses: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checks, warmup and the plan (the benchmark's process) parse the dataset once; two fresh Locust processes that
    read the plan file parse it zero times and draw the same requests as a sampler over a fresh parse."""
    settings = settings_for(tmp_path)
    checked = dataset.dataset_of(settings.workload_file)  # benchmark._main's check of the dataset
    plan = bench_config(settings, "m")
    monkeypatch.setattr(measured_run, "stream_chat", fake_stream_chat)
    records = tmp_path / "20260101_120000.requests.jsonl"
    assert len(measured_run.warmup(plan, records)) == 4  # the real warmup, its request function faked
    plan_path = records.with_name("20260101_120000.plan.json")
    monkeypatch.setattr(locust_run.subprocess, "Popen", _no_locust)  # run_locust up to starting Locust
    with pytest.raises(_LocustStarted):
        locust_run.run_locust(settings, plan, records)
    assert len(parses) == 1 and plan_path.exists()
    drawn = []
    for _ in range(2):  # two Locust processes: nothing remembered from the benchmark's process
        dataset.forget_parsed()
        run = read_run_plan(plan_path)
        assert run.config == plan and run.prompts == checked.prompts
        state = RunState(run.config, RequestLog(tmp_path / "requests.jsonl"), run.prompts)
        drawn.append(items(state, 12))
    assert len(parses) == 1
    fresh = sampler_for(plan, plan.seed, dataset.load_dataset(settings.workload_file).prompts)
    expected = [(fresh.next().prompt.prompt_id, fresh.next().max_tokens) for _ in range(6)]
    assert drawn[0] == drawn[1] == expected


def test_a_plan_without_prompts_is_parsed_once_per_process(tmp_path: Path, parses: list[Path]) -> None:
    """A plan written without the prompts (older benchmark, a remote worker's plan): the process parses the dataset
    itself, once, although it builds its workload twice (at start and at each test start)."""
    settings = settings_for(tmp_path)
    plan = bench_config(settings, "m")
    write_plan(tmp_path / "old.plan.json", plan, settings)
    run = read_run_plan(tmp_path / "old.plan.json")
    assert run.prompts is None
    state = RunState(run.config, RequestLog(tmp_path / "requests.jsonl"), run.prompts)
    items(state, 4)
    items(state, 4)
    assert len(parses) == 1


def test_an_edited_dataset_is_parsed_again(tmp_path: Path, parses: list[Path]) -> None:
    """The one parse is remembered only while the file is unchanged: a dataset edited between runs is read anew."""
    settings = settings_for(tmp_path, prompts=5)
    assert len(dataset.dataset_of(settings.workload_file).prompts) == 5
    settings_for(tmp_path, prompts=7)
    assert len(dataset.dataset_of(settings.workload_file).prompts) == 7 and len(parses) == 2


class _LocustStarted(Exception):
    """Raised instead of starting Locust: the plan is written by then."""


def _no_locust(*args: Any, **kwargs: Any) -> Any:
    raise _LocustStarted
