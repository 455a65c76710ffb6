"""TRACE in the benchmark command: read and check the trace before any load, plan it, write its prompts."""

from __future__ import annotations

from functools import partial

from core.report_schema import BenchmarkConfig
from core.settings import Settings
from loadgen.errors import BenchError
from loadgen.plan import with_trace
from loadgen.workloads.tokenizing import open_prompt_tokenizer
from loadgen.workloads.trace import Trace, TraceError, TraceRow, load_trace, schedule, schedule_problem
from loadgen.workloads.traceprompts import trace_prompts_file

Timed = list[tuple[float, TraceRow]]


def read_trace(settings: Settings) -> tuple[Trace, Timed] | None:
    """The trace of TRACE and its schedule (REQUESTS rows, DURATION, TRACE_SPEED); None without TRACE. Raises
    BenchError: the file is unreadable or bad (file, line and fault named)."""
    if settings.trace is None:
        return None
    try:
        trace = load_trace(settings.trace)
    except TraceError as exc:
        raise BenchError(str(exc)) from None
    return trace, schedule(trace.rows, settings.trace_speed, settings.requests, settings.duration)


def plan_with_trace(settings: Settings, plan: BenchmarkConfig, loaded: tuple[Trace, Timed],
                    max_model_len: int | None) -> BenchmarkConfig:
    """``plan`` replaying the trace, checked against the model's context and the watchdog. Raises BenchError: the replay
    cannot run (the message says why and what to do)."""
    trace, timed = loaded
    problem = schedule_problem(trace.path, timed, max_model_len, settings.watchdog_s or settings.request_timeout_s + 60)
    if problem:
        raise BenchError(problem)
    return with_trace(plan, settings, trace, timed)


def with_trace_prompts(settings: Settings, plan: BenchmarkConfig, timed: Timed, notes: list[str]) -> BenchmarkConfig:
    """The plan with the trace's token-exact prompts written (``dataset_file``); the line saying so added to ``notes``.
    Raises BenchError: no tokenizer is usable (the message says what to set), or a prompt cannot be sized."""
    opener = partial(open_prompt_tokenizer, settings, plan.model, "TRACE")
    path, raised = trace_prompts_file(plan, timed, settings.logs_dir, settings.prompts_file, opener)
    note = f"; {raised} row(s) shorter than the chat template raised to it" if raised else ""
    notes.append(f"[INFO] TRACE: {len(timed)} {plan.trace_format} rows at {plan.trace_speed:g}x, mean "
                 f"{plan.rate_req_per_sec:.3g} req/s, token-exact prompts in {path}{note}")  # fmt: skip
    return plan.model_copy(update={"dataset_file": str(path)})
