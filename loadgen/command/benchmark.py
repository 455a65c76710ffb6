"""``make benchmark`` / ``./run_benchmark.sh``: parse, check (TRACE included) and wire, or serve as a remote load
worker (``--worker``); the checks before any load are :mod:`loadgen.orchestrate.preflight`, the run itself
:mod:`loadgen.orchestrate.pipeline`, its end :mod:`loadgen.orchestrate.outcome`. One benchmark at a time per stack
(two would measure each other's load): an ``fcntl.flock`` on ``RUN_DIR/benchmark.lock`` for a whole run or sweep,
released however the holder ends; the file names the holder."""

from __future__ import annotations

import argparse
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path

from core.enginestate import EngineControl
from core.flags import build_parser, parse
from core.knobs.commands import BENCHMARK
from core.pipes import guard_stdout
from core.report_schema import BenchmarkConfig
from core.settings import PROJECT_ROOT, Settings, service_env
from engine.local_control import LocalEngine
from loadgen.errors import BenchError
from loadgen.locust_side.joining import host_name
from loadgen.orchestrate.locust_launch import worker_argv
from loadgen.orchestrate.outcome import EXIT_INTERRUPTED, EXIT_USAGE, STOP_SIGNALS
from loadgen.orchestrate.pipeline import rows_file_problem, run_benchmark
from loadgen.orchestrate.preflight import Target, plan_problem, preflight
from loadgen.plan import bench_config, with_trace
from loadgen.sidecar_client import SidecarClient
from loadgen.workloads.dataset import DatasetError, dataset_of
from loadgen.workloads.randomdata import prefixes_file, random_prompts_file, trace_prompts_file
from loadgen.workloads.tokenizing import open_prompt_tokenizer
from loadgen.workloads.trace import Trace, TraceError, TraceRow, load_trace, schedule, schedule_problem
from loadgen.workloads.workload import followups_of, multi_turn_share

HELP = """\
Warmup, a measured Locust run, then the sidecar's report (reports/). Also python -m loadgen.command.benchmark and make
benchmark VAR=VALUE; --sweep / --repeat N write a series report. Exit: 0 ok, 1 report not written, 2 bad input, services
down or vLLM busy, 3 gate regression, 4 no success, 5 error rate, 6 server down, 130 interrupted."""


@contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP (CI cancellation, ``docker stop``, a closed terminal) act as Ctrl-C while the block runs
    (in the main thread, :func:`main`'s; handlers restored after). SIGINT too where it was inherited ignored (a
    background job of a shell without job control), or ``kill -INT`` would be lost."""
    ignored = (signal.SIGINT,) if signal.getsignal(signal.SIGINT) == signal.SIG_IGN else ()
    previous = {sig: signal.signal(sig, signal.default_int_handler) for sig in (*STOP_SIGNALS, *ignored)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None, engine: EngineControl | None = None) -> int:
    """Run a benchmark (or rebuild a report from a rows file); the exit code. SIGTERM and SIGHUP act as Ctrl-C."""
    guard_stdout()
    with stop_signals_interrupt():
        try:
            return _main(argv, engine)
        except KeyboardInterrupt:  # a second Ctrl-C, or one outside the measured window
            print("\n[INFO] Interrupted: no report written.", file=sys.stderr)
            return EXIT_INTERRUPTED


def parser() -> argparse.ArgumentParser:
    """The benchmark's command line: its knobs (:data:`core.knobs.commands.BENCHMARK`) plus ``--report-from``."""
    cli = build_parser("./run_benchmark.sh", HELP, BENCHMARK)
    output = next(group for group in cli._action_groups if group.title == "output")
    output.add_argument("--report-from", type=Path, metavar="ROWS_FILE", help="build the report from a rows file in "
                        "LOGS_DIR/runs instead (a run whose report was not written)")
    return cli


def _main(argv: list[str] | None, engine: EngineControl | None) -> int:
    args, settings = parse(parser(), argv)
    if settings.worker:  # this host sends load for a benchmark elsewhere: no report, no lock here
        return worker_main(settings)
    for note in settings.ignored_knobs:
        print(f"[WARN] {note}", flush=True)
    problem = rows_file_problem(args.report_from, settings.logs_dir / "runs") if args.report_from else None
    if problem:  # before the server is asked: a wrong path is bad input, whatever runs
        print(f"[ERROR] --report-from {args.report_from}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    with ExitStack() as held:
        if not args.report_from:  # one benchmark at a time per stack, held for the whole run or sweep: taken first,
            try:  # so a second benchmark is refused at once, before any check or line of a start
                held.enter_context(RunLock(settings.run_dir, settings.logs_dir / "runs"))
            except (StackBusy, OSError) as exc:
                print(f"[ERROR] {exc}", file=sys.stderr)
                return EXIT_USAGE
        sidecar = SidecarClient.of(settings)
        ready = _checked_plan(settings, sidecar, args.report_from)
        if isinstance(ready, str):  # every refusal comes before the start line: nothing started, nothing was sent
            print(ready, file=sys.stderr)
            return EXIT_USAGE
        plan, target, notes = ready
        print(f"[INFO] Starting benchmark for {plan.model} ({target.backend} backend)", flush=True)  # the seed's
        for note in notes:
            print(note, flush=True)
        return run_benchmark(settings, plan, sidecar, engine or LocalEngine(settings), args.report_from, target.facts)


def _checked_plan(
    settings: Settings, sidecar: SidecarClient, report_from: Path | None
) -> tuple[BenchmarkConfig, Target, list[str]] | str:
    """The plan, its target and the lines saying what was prepared, once every check before the load passed and its
    prompts are written (DATASET=random, TRACE, PREFIX_LEN); else the refusal's ``[ERROR] …`` lines (exit 2)."""
    try:
        trace = read_trace(settings)  # a bad trace is refused before the server is even asked
        target = preflight(settings, sidecar)
        dataset = None if settings.random_dataset else dataset_of(settings.workload_file)  # the run's one parse
    except (BenchError, DatasetError) as exc:
        return f"[ERROR] {exc}"
    notes: list[str] = []
    plan = bench_config(settings, target.model)
    if dataset is not None and dataset.skipped:  # not JSON, or no prompt / messages / conversation with a user turn
        print(f"[WARN] {dataset.path}: {dataset.skipped_text()}: not JSON, or no prompt, messages or conversation "
              f"ending in a user turn; {len(dataset.prompts)} used", flush=True)  # fmt: skip
        plan = plan.model_copy(update={"dataset_skipped": dataset.skipped_text()})
    if plan.session_turns > 1:  # conversations: the dataset's real follow-up turns, or drawn ones
        prompts = dataset.prompts if dataset else []
        followups = followups_of(prompts, plan.session_turns, settings.session_followups)
        if followups == "dataset" and multi_turn_share(prompts) == 0:
            return (f"[ERROR] SESSION_FOLLOWUPS=dataset replays the dataset's own follow-up turns, but "
                    f"{settings.workload_file} holds no multi-turn conversation: use a ShareGPT conversation file "
                    "(DATASET) or SESSION_FOLLOWUPS=drawn")  # fmt: skip
        plan = plan.model_copy(update={"session_followups": followups})
    if report_from:
        return plan, target, notes
    try:
        plan = plan_with_trace(settings, plan, trace, target.max_model_len) if trace else plan
        refused = plan_problem(settings, sidecar, plan, target, dataset)
    except BenchError as exc:
        refused = f"[ERROR] {exc}"
    if refused:
        return f"{refused}\n[ERROR] Nothing was sent."
    try:
        if settings.random_dataset:  # token-exact prompts (chat template included), written once
            opener = partial(open_prompt_tokenizer, settings, plan.model, "DATASET=random")
            path = random_prompts_file(plan, settings.logs_dir, settings.prompts_file, opener)
            notes.append(f"[INFO] DATASET=random: {plan.input_len_tokens}-token prompts (chat template included) in "
                         f"{path}")
            plan = plan.model_copy(update={"dataset_file": str(path)})
        if trace:
            opener = partial(open_prompt_tokenizer, settings, plan.model, "TRACE")
            path, raised = trace_prompts_file(plan, trace[1], settings.logs_dir, settings.prompts_file, opener)
            note = f"; {raised} row(s) shorter than the chat template raised to it" if raised else ""
            notes.append(f"[INFO] TRACE: {len(trace[1])} {plan.trace_format} rows at {plan.trace_speed:g}x, mean "
                         f"{plan.rate_req_per_sec:.3g} req/s, token-exact prompts in {path}{note}")  # fmt: skip
            plan = plan.model_copy(update={"dataset_file": str(path)})
        if plan.prefix_len_tokens:
            opener = partial(open_prompt_tokenizer, settings, plan.model, "PREFIX_LEN")
            path = prefixes_file(plan, settings.logs_dir, settings.prompts_file, opener)
            notes.append(f"[INFO] {plan.prefix_count} shared prefix(es) of {plan.prefix_len_tokens} tokens in {path}")
            plan = plan.model_copy(update={"prefix_file": str(path)})
    except BenchError as exc:
        return f"[ERROR] {exc}"
    return plan, target, notes


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


def worker_main(settings: Settings) -> int:
    """Join WORKER_RUNS runs in a row (0: until no master answers), a fresh Locust worker each; the last worker's
    exit code (0: every run served; 2: not configured)."""
    if not settings.master_host:
        print("[ERROR] --worker needs --master-host HOST (MASTER_HOST): the host running ./run_benchmark.sh "
              "--expect-workers N", flush=True)  # fmt: skip
        return EXIT_USAGE
    if not settings.sidecar_token:
        print("[ERROR] --worker needs the stack's sidecar token to join: set SIDECAR_TOKEN to the content of the "
              "benchmark host's run/sidecar_token (SIDECAR_TOKEN_FILE)", flush=True)  # fmt: skip
        return EXIT_USAGE
    print(f"[INFO] Load worker {host_name(settings.load_host_name)} joining the benchmark on "
          f"{settings.master_host}:{settings.master_port} (Ctrl-C to leave)", flush=True)  # fmt: skip
    argv = worker_argv(settings, settings.master_host)
    env = {**service_env("locust"), "LOCUST_JOIN": "1"}  # both user classes exist until the plan arrives
    served = 0
    try:
        while True:
            code = subprocess.run(argv, cwd=PROJECT_ROOT, env=env, check=False).returncode
            if code != 0:
                # with WORKER_RUNS=0 the end of the series is a master that no longer answers (Locust gives up)
                return 0 if settings.worker_runs == 0 and served else code
            served += 1
            if served == settings.worker_runs:
                return 0
            print(f"[INFO] Run {served} done; waiting for the next run's master on {settings.master_host}:"
                  f"{settings.master_port}", flush=True)  # fmt: skip
    except KeyboardInterrupt:
        return 130



LOCK_NAME = "benchmark.lock"


class StackBusy(Exception):
    """Another benchmark holds the stack's lock; the message names it and what to do."""


class RunLock:
    """The stack's benchmark lock (``with RunLock(run_dir):``). Raises StackBusy: on entering, when another process
    holds it. OSError: the lock file cannot be made (RUN_DIR not writable)."""

    def __init__(self, run_dir: Path, fallback_dir: Path | None = None) -> None:
        self.path = run_dir / LOCK_NAME
        self.fallback = fallback_dir / LOCK_NAME if fallback_dir is not None else None

    def _open(self) -> int:
        """The lock file's descriptor: in RUN_DIR, else (read-only, as in the compose Locust container) in the
        fallback folder. Raises OSError: neither can be made."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            if self.fallback is None:
                raise
            self.path, self.fallback = self.fallback, None
            return self._open()

    def __enter__(self) -> RunLock:
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode("utf-8", errors="replace").strip() or "unknown"
            os.close(fd)
            raise StackBusy(f"another benchmark is running against this stack ({holder}); wait for it to end, or stop "
                            "it (Ctrl-C in its terminal, or kill -TERM <its pid>: it writes the report of its requests "
                            f"so far), then run again. Lock: {self.path}") from None
        os.ftruncate(fd, 0)
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        os.pwrite(fd, f"pid {os.getpid()}, since {started}: {' '.join(sys.argv)[:300]}\n".encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *_: object) -> None:
        os.ftruncate(self._fd, 0)
        os.close(self._fd)  # closing releases the lock


if __name__ == "__main__":
    raise SystemExit(main())
