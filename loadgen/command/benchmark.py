"""``make benchmark`` / ``./run_benchmark.sh``: warmup, a headless Locust run, then the sidecar writes the report.

``python -m loadgen.command.benchmark --concurrency 32 --duration 60`` — every knob is a flag (``--help`` lists them
with their defaults and environment names) and an environment/``.env``/make variable; flags win. The benchmark computes
the run's metrics (:mod:`core.stats`) and hands the finished run to the sidecar (:mod:`core.api`), which adds resources,
log facts and the environment and writes the report. Rows are appended to ``logs/runs/<run id>.requests.jsonl`` as they
come, so a crash of any part loses nothing: ``--report-from FILE`` builds the report from such a file later. ``--sweep``
/ ``--repeat N`` run several load points or runs and have the sidecar write a series report with confidence intervals
and the SLO knee. This module only parses and wires: the run itself is :mod:`loadgen.orchestrate.pipeline` (one pipeline
for one run and a series), its end (summary, baseline, verdicts, exit codes) :mod:`loadgen.orchestrate.outcome`.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path

from core.enginestate import EngineControl
from core.flags import build_parser, parse
from core.knobs.commands import BENCHMARK
from core.pipes import guard_stdout
from core.report_schema import BenchmarkConfig
from core.settings import Settings
from engine.local_control import LocalEngine
from loadgen.command.trace_replay import plan_with_trace, read_trace, with_trace_prompts
from loadgen.command.worker import worker_main
from loadgen.errors import BenchError
from loadgen.orchestrate.outcome import EXIT_INTERRUPTED, EXIT_USAGE, STOP_SIGNALS
from loadgen.orchestrate.pipeline import rows_file_problem, run_benchmark
from loadgen.orchestrate.preflight import Target, plan_problem, preflight
from loadgen.orchestrate.stack_lock import RunLock, StackBusy
from loadgen.plan import bench_config
from loadgen.sidecar_client import SidecarClient
from loadgen.terminal.summary import start_line
from loadgen.workloads.dataset import DatasetError, dataset_of
from loadgen.workloads.prefixes import prefixes_file
from loadgen.workloads.randomdata import random_prompts_file
from loadgen.workloads.sessions import followups_of, multi_turn_share
from loadgen.workloads.tokenizing import open_prompt_tokenizer

HELP = """\
Warmup, a measured Locust run, then the sidecar's report (reports/). Also python -m loadgen.command.benchmark and make
benchmark VAR=VALUE; --sweep / --repeat N write a series report. Exit: 0 ok, 1 report not written, 2 bad input, services
down or vLLM busy, 3 gate regression, 4 no success, 5 error rate, 6 server down, 130 interrupted."""


@contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP (CI cancellation, ``timeout``, ``docker stop``, systemd, a closed terminal) act as Ctrl-C
    while the block runs: the load stops, the report of the rows so far is written, exit 130. Only in the main
    thread (elsewhere signals cannot be handled); the previous handlers come back afterwards. SIGINT too where it was
    inherited ignored (a benchmark started as a background job by a shell without job control, as CI scripts do):
    Python then installs no Ctrl-C handler, and ``kill -INT`` would be lost."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    ignored = (signal.SIGINT,) if signal.getsignal(signal.SIGINT) == signal.SIG_IGN else ()
    previous = {sig: signal.signal(sig, signal.default_int_handler) for sig in (*STOP_SIGNALS, *ignored)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None, engine: EngineControl | None = None) -> int:
    """Run a benchmark (or rebuild a report from a records file); returns the exit code (module constants).

    SIGTERM and SIGHUP are handled as Ctrl-C (:func:`stop_signals_interrupt`)."""
    guard_stdout()
    with stop_signals_interrupt():
        try:
            return _main(argv, engine)
        except KeyboardInterrupt:  # a second Ctrl-C, or one outside the measured window
            print("\n[INFO] Interrupted: no report written.", file=sys.stderr)
            return EXIT_INTERRUPTED


def parser() -> argparse.ArgumentParser:
    """The benchmark's command line: the knobs of its view (:data:`core.knobs.commands.BENCHMARK`, :mod:`core.flags`)
    plus ``--report-from``."""
    cli = build_parser("./run_benchmark.sh", HELP, BENCHMARK)
    output = next(group for group in cli._action_groups if group.title == "output")
    output.add_argument(
        "--report-from", type=Path, metavar="ROWS_FILE",
        help="build the report from a rows file in LOGS_DIR/runs instead (a run whose report was not written)"
    )
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
        print(start_line(plan, target.backend), flush=True)
        for note in notes:
            print(note, flush=True)
        return run_benchmark(settings, plan, sidecar, engine or LocalEngine(settings), args.report_from, target.facts)


def _checked_plan(
    settings: Settings, sidecar: SidecarClient, report_from: Path | None
) -> tuple[BenchmarkConfig, Target, list[str]] | str:
    """The run's plan once every check before the load passed: the server, the model, the sidecar and the gate
    (:func:`loadgen.orchestrate.preflight.preflight`), the plan against the model (:func:`plan_problem`), and its
    prompts written (DATASET=random, TRACE, PREFIX_LEN); with the target (backend, vLLM's facts) and the lines saying
    what was prepared. Else the refusal's lines (``[ERROR] …``) to print before exit 2."""
    try:
        trace = read_trace(settings)  # a bad trace is refused before the server is even asked
        target = preflight(settings, sidecar)
        dataset = None if settings.random_dataset else dataset_of(settings.workload_file)  # the run's one parse
    except (BenchError, DatasetError) as exc:
        return f"[ERROR] {exc}"
    notes: list[str] = []
    if dataset is not None and dataset.skipped:
        print(f"[WARN] {dataset.skipped} unusable entr(y/ies) in {dataset.path} skipped; {len(dataset.prompts)} used")
    plan = bench_config(settings, target.model)
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
        if settings.random_dataset:
            plan = with_random_prompts(settings, plan, notes)
        if trace:
            plan = with_trace_prompts(settings, plan, trace[1], notes)
        if plan.prefix_len_tokens:
            opener = partial(open_prompt_tokenizer, settings, plan.model, "PREFIX_LEN")
            path = prefixes_file(plan, settings.logs_dir, settings.prompts_file, opener)
            notes.append(f"[INFO] {plan.prefix_count} shared prefix(es) of {plan.prefix_len_tokens} tokens in {path}")
            plan = plan.model_copy(update={"prefix_file": str(path)})
    except BenchError as exc:
        return f"[ERROR] {exc}"
    return plan, target, notes


def with_random_prompts(settings: Settings, plan: BenchmarkConfig, notes: list[str]) -> BenchmarkConfig:
    """DATASET=random: the plan with its token-exact prompts generated (once) for the server's tokenizer; the line
    saying where is added to ``notes``; sized by the server's tokenizer, else a local one
    (:func:`loadgen.workloads.tokenizing.open_prompt_tokenizer` says which).

    Raises:
        BenchError: no tokenizer is usable (the message says what to set), or a prompt cannot be sized.
    """
    opener = partial(open_prompt_tokenizer, settings, plan.model, "DATASET=random")
    path = random_prompts_file(plan, settings.logs_dir, settings.prompts_file, opener)
    notes.append(f"[INFO] DATASET=random: {plan.input_len_tokens}-token prompts (chat template included) in {path}")
    return plan.model_copy(update={"dataset_file": str(path)})


if __name__ == "__main__":
    raise SystemExit(main())
