"""The run plan: the benchmark's knobs as one :class:`core.report_schema.BenchmarkConfig` (settings -> plan ->
Locust and the report), written once with the run's settings and prompts and read by every Locust process."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from core.atomicfile import atomic_write
from core.replicas import router_fields
from core.report_schema import BenchmarkConfig
from core.settings import PROJECT_ROOT, RANDOM_DATASET, Settings
from loadgen.workloads.dataset import Prompt, dataset_of, prompts_as_json, prompts_from_json
from loadgen.workloads.trace import Trace, TraceRow, mean_rate
from loadgen.workloads.workload import WorkloadSampler

ROWS_SUFFIX = ".requests.jsonl"  # a run's rows file: logs/runs/<run id>.requests.jsonl
_M = TypeVar("_M", bound=BaseModel)
USERS_PER_WORKER = 64  # closed loop: users one Locust process serves before another is started
CHUNKS_PER_WORKER_S = 20_000.0  # open loop: expected chunks/s per process (about a third of one core's ceiling)


def run_id_of(records_path: Path) -> str:
    """The run id of a rows file: its name without ``.requests.jsonl``."""
    return records_path.name.removesuffix(ROWS_SUFFIX)


def run_file(records_path: Path, suffix: str) -> Path:
    """The run's file ``<run id><suffix>`` beside its rows file (``.plan.json``, ``.client.jsonl``, ``.locust.log``,
    ``.ending.json``)."""
    return records_path.with_name(run_id_of(records_path) + suffix)


def jsonl_rows(path: Path, model: type[_M]) -> Iterator[_M | None]:
    """Each non-blank line of the JSONL file ``path`` read as ``model`` (None: a line that is not one), lazily: a
    long run's rows file can be hundreds of MB. Raises OSError, UnicodeDecodeError: the file cannot be read."""
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                try:
                    yield model.model_validate_json(line)
                except ValueError:
                    yield None


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity: ``taskset``, container limits), else all."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def auto_workers(
    concurrency: int, rate: float | None, tokens_per_request: float, requests: int | None, cores: int | None
) -> int:
    """Locust processes when WORKERS is unset (pure): one per ``USERS_PER_WORKER`` users (closed loop) or per
    ``CHUNKS_PER_WORKER_S`` expected chunks/s (open loop: RATE × tokens per request), at most half the ``cores``,
    never more than users or requests."""
    if rate is not None:
        wanted = math.ceil(rate * tokens_per_request / CHUNKS_PER_WORKER_S)
    else:
        wanted = math.ceil(concurrency / USERS_PER_WORKER)
    return max(1, min(wanted, (cores or 1) // 2, wanted if requests is None else requests))  # wanted <= users


def load_processes(settings: Settings, concurrency: int, rate: float | None, max_in_flight: int | None,
                   tokens: float | None = None, requests: int | None = None) -> int:
    """Locust processes for ``concurrency`` users (closed loop) or ``rate`` req/s (open loop) of ``tokens`` output
    tokens each (default: the settings'): WORKERS, else :func:`auto_workers`; capped at the users (closed loop),
    the ``requests`` (default: REQUESTS unless DURATION) and ``max_in_flight``."""
    if requests is None and settings.duration is None:
        requests = settings.requests
    tokens = tokens or float(settings.fixed_max_tokens or settings.output_len_mean)
    workers = settings.workers or auto_workers(concurrency, rate, tokens, requests, usable_cores())
    if rate is None:
        workers = min(workers, concurrency)
    if requests is not None:
        workers = min(workers, requests)
    if max_in_flight is not None and rate is not None:
        workers = min(workers, max_in_flight)  # each process holds at least one request in flight
    return workers


def bench_config(settings: Settings, model: str) -> BenchmarkConfig:
    """The run's knobs from the settings, with the chosen ``model`` and its load processes."""
    fixed = settings.fixed_max_tokens
    if settings.random_dataset:
        dataset = RANDOM_DATASET
    else:
        workload = settings.workload_file.resolve()
        dataset = str(workload.relative_to(PROJECT_ROOT)) if workload.is_relative_to(PROJECT_ROOT) else str(workload)
    requests = settings.requests if settings.duration is None else None
    workers = load_processes(settings, settings.concurrency, settings.rate, settings.max_in_flight)
    turns = settings.session_turns
    return BenchmarkConfig(
        mode="open_loop" if settings.rate else "closed_loop", concurrency=settings.concurrency,
        rate_req_per_sec=settings.rate, burstiness=settings.burstiness if settings.rate else None,
        rate_end_req_per_sec=settings.rate_end,
        max_in_flight=settings.max_in_flight if settings.rate is not None else None,
        requests=requests, duration_s=settings.duration, warmup_requests=settings.warmup,
        ramp_up_s=settings.ramp_up_s or None, max_tokens=fixed or settings.output_len_cap,
        output_len_mean=None if fixed else settings.output_len_mean,
        output_len_p95=None if fixed else settings.output_len_p95,
        ignore_eos=settings.ignore_eos, temperature=settings.temperature, seed=settings.seed, dataset=dataset,
        input_mix=None if settings.random_dataset else settings.input_mix,
        input_len_tokens=settings.random_input_len if settings.random_dataset else None,
        slo=settings.slo, request_timeout_s=settings.request_timeout_s, drain_s=settings.drain_s,
        vllm_url=settings.vllm_url, model=model, workers=workers, remote_workers=settings.expect_workers,
        session_turns=turns, think_time=settings.think_time if turns > 1 else None,
        # auto: resolved on the dataset (loadgen.workloads.workload.followups_of)
        session_followups=None if turns <= 1 or settings.session_followups == "auto" else settings.session_followups,
        prefix_len_tokens=settings.prefix_len, prefix_count=settings.prefix_count if settings.prefix_len else None,
        profiled=settings.profile, price_per_hour=settings.price_per_hour,
        energy_price_per_kwh=settings.energy_price_per_kwh, **router_fields(settings),
    )


def dataset_path(config: BenchmarkConfig) -> Path:
    """``config``'s ``dataset_file`` (generated prompts), else its ``dataset`` (relative to the project)."""
    path = Path(config.dataset_file or config.dataset)
    return path if path.is_absolute() else PROJECT_ROOT / path


def workload_prompts(config: BenchmarkConfig) -> list[Prompt]:
    """The prompts of ``config``'s dataset. Raises DatasetError: it cannot be loaded."""
    return dataset_of(dataset_path(config)).prompts


def sampler_for(config: BenchmarkConfig, seed: int, prompts: Sequence[Prompt] | None = None) -> WorkloadSampler:
    """The workload of ``config`` (``prompts``, else its dataset's), seeded with ``seed``. Raises DatasetError: the
    dataset cannot be loaded. ValueError: a bad length or mix setting."""
    fixed = config.output_len_mean is None
    return WorkloadSampler(
        list(prompts) if prompts is not None else workload_prompts(config), seed,
        fixed_max_tokens=config.max_tokens if fixed else None, mean_tokens=config.output_len_mean or 120.0,
        p95_tokens=config.output_len_p95 or 280.0, cap_tokens=config.max_tokens, mix=config.input_mix,
        sequential=config.dataset == RANDOM_DATASET,  # each generated prompt once (no prefix-cache hits) per cycle
    )


PLAN_PROMPTS_KEY = "prompts"  # the workload's prompts in the plan file (absent in older plans)
PLAN_SETTINGS_KEY = "settings"  # the run's effective settings, beside the BenchmarkConfig fields
SECRET_CARRIERS = frozenset({"vllm_extra_args"})
"""Fields that may hold a secret (``VLLM_EXTRA_ARGS='--api-key …'``): never written to the plan file."""


def plan_settings(settings: Settings) -> dict[str, Any]:
    """The run's effective settings for the Locust processes, as JSON values: all but the secrets,
    :data:`SECRET_CARRIERS` and the plan file itself (those stay in the environment)."""
    secret = {name for name, info in Settings.model_fields.items() if info.repr is False}
    return settings.model_dump(mode="json", exclude=secret | SECRET_CARRIERS | {"locust_plan_file"})


def write_plan(
    path: Path, config: BenchmarkConfig, settings: Settings, prompts: Sequence[Prompt] | None = None
) -> None:
    """Write the plan for Locust (atomic), with ``settings`` (:func:`plan_settings`) and ``prompts`` when given."""
    body: dict[str, Any] = {**config.model_dump(mode="json"), PLAN_SETTINGS_KEY: plan_settings(settings)}
    if prompts is not None:
        body[PLAN_PROMPTS_KEY] = prompts_as_json(list(prompts))
    atomic_write(path, json.dumps(body, indent=2, ensure_ascii=False))


def with_trace(plan: BenchmarkConfig, settings: Settings, trace: Trace,
               timed: Sequence[tuple[float, TraceRow]]) -> BenchmarkConfig:
    """``plan`` replaying ``trace``'s ``timed`` rows (TRACE): the open loop at their mean rate, each row's output
    length exactly (IGNORE_EOS), the trace recorded, its :func:`load_processes` for that rate."""
    rate = mean_rate([at for at, _ in timed])
    outputs = [max(1, row.output_tokens) for _, row in timed]
    requests = len(timed) if settings.duration is None else None
    workers = load_processes(settings, settings.concurrency, rate, settings.max_in_flight, sum(outputs) / len(outputs),
                             len(timed))  # fmt: skip
    path = trace.path.resolve()
    return plan.model_copy(update={
        "mode": "open_loop", "rate_req_per_sec": rate, "burstiness": None, "requests": requests,
        "max_tokens": max(outputs), "output_len_mean": None, "output_len_p95": None, "ignore_eos": True,
        "dataset": str(path.relative_to(PROJECT_ROOT)) if path.is_relative_to(PROJECT_ROOT) else str(path),
        "input_mix": None, "workers": workers, "max_in_flight": settings.max_in_flight,
        "trace_file": str(trace.path), "trace_format": trace.format, "trace_sha256": trace.sha256,
        "trace_speed": settings.trace_speed, "trace_rows": len(timed),
    })


@dataclass(frozen=True)
class RunPlan:
    """What a Locust process reads from the plan file (``prompts`` None: parse the dataset itself)."""

    config: BenchmarkConfig
    settings: Settings
    prompts: list[Prompt] | None


def read_run_plan(path: Path) -> RunPlan:
    """The plan file ``path`` read once; settings not in it are the environment's (secrets always are).

    Raises:
        OSError: unreadable. ValueError: not JSON. pydantic.ValidationError: not a plan, or settings that no longer
            validate. DatasetError: malformed prompts.
    """
    body = json.loads(path.read_bytes())
    prompts = body.get(PLAN_PROMPTS_KEY) if isinstance(body, dict) else None
    values = body.get(PLAN_SETTINGS_KEY) if isinstance(body, dict) else None
    settings = Settings(**values, locust_plan_file=path) if isinstance(values, dict) else Settings()
    return RunPlan(BenchmarkConfig.model_validate(body), settings,
                   prompts_from_json(prompts) if prompts is not None else None)
