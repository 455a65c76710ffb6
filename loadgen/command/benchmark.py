"""``make benchmark`` / ``./run_benchmark.sh``: parse, check (TRACE included) and wire, or serve as a remote load
worker (``--worker``). Before any load (:func:`preflight`, :func:`plan_problem`): the server answers, the model to
measure is chosen, the sidecar answers, the gate is known. The run itself is :mod:`loadgen.orchestrate.pipeline`, its
end :mod:`loadgen.orchestrate.outcome`. One benchmark at a time per stack (two would measure each other's load): an
``fcntl.flock`` on ``RUN_DIR/benchmark.lock`` for a whole run or sweep, released however the holder ends; the file
names the holder."""

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
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import httpx

from core.api import ServerFacts
from core.enginestate import EngineControl
from core.fingerprint import differing_fields, fingerprint_fields, fingerprint_of, refusal_reason
from core.flags import build_parser, parse
from core.gate import refused_line
from core.knobs.commands import BENCHMARK
from core.pipes import guard_stdout
from core.report_schema import BenchmarkConfig, Report
from core.series_stats import SeriesReport, is_series_id
from core.settings import PROJECT_ROOT, Settings, service_env
from core.shapes import MODEL_LIST, MODEL_LIST_SHAPE, ServedModel, ShapeError, answer_as, snippet
from engine.local_control import LocalEngine
from loadgen.errors import BenchError
from loadgen.locust_side.joining import host_name
from loadgen.orchestrate.locust_launch import worker_argv
from loadgen.orchestrate.outcome import EXIT_INTERRUPTED, EXIT_USAGE, STOP_SIGNALS
from loadgen.orchestrate.pipeline import rows_file_problem, run_benchmark
from loadgen.plan import bench_config, with_trace
from loadgen.sidecar_client import SidecarClient
from loadgen.workloads.dataset import Dataset, DatasetError, dataset_of
from loadgen.workloads.randomdata import prefixes_file, random_prompts_file, trace_prompts_file
from loadgen.workloads.tokenizing import ServerTokenizer, open_prompt_tokenizer
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


@dataclass(frozen=True)
class Target:
    """The server and model a run measures."""

    model: str
    served: list[str]
    backend: str = "vLLM"
    max_model_len: int | None = None  # the model's context (vLLM lists it in /v1/models); None: not said
    facts: ServerFacts | None = None  # /version and /v1/models as read here: the report's, asked once


def choose_model(served: list[str], settings: Settings) -> str:
    """The model to measure among ``served``: BENCH_MODEL, SERVED_MODEL_NAME, MODEL (if served), else the only one.
    Raises BenchError: the chosen model is not served, or several are served and none was chosen (lists them)."""
    listed = ", ".join(served) or "none"
    for variable, wanted in (("BENCH_MODEL", settings.bench_model), ("SERVED_MODEL_NAME", settings.served_model_name)):
        if wanted:
            if wanted not in served:
                raise BenchError(f"{variable}={wanted} is not served at {settings.vllm_url} (served: {listed}).")
            return wanted
    if settings.model and settings.model in served:
        return settings.model
    if len(served) == 1:
        return served[0]
    if not served:
        raise BenchError(f"the server at {settings.vllm_url} lists no model in /v1/models; is it still loading?")
    raise BenchError(f"the server at {settings.vllm_url} serves {len(served)} models ({listed}); choose one with "
                     "BENCH_MODEL=<id>.")


def _served(settings: Settings) -> list[ServedModel]:
    """The models of ``/v1/models``, after ``/health`` where the server has one (retried on errors and 5xx). Raises
    BenchError: no answer, not healthy, the key refused, or ``/v1/models`` is not a model list."""
    error: Exception | None = None
    for attempt in range(3):
        try:
            health = httpx.get(f"{settings.vllm_url}/health", timeout=10, headers=settings.vllm_headers)
            models = httpx.get(f"{settings.vllm_url}/v1/models", timeout=10, headers=settings.vllm_headers)
        except httpx.HTTPError as exc:
            error = exc
        else:
            if models.status_code < 500:
                break
            error = httpx.HTTPStatusError(f"/v1/models answered HTTP {models.status_code}", request=models.request,
                                          response=models)
        time.sleep(1.0 + attempt)
    else:
        hint = (f"Start the stack with `make up` and check {settings.vllm_log_file}, or set VLLM_BASE_URL"
                if not isinstance(error, httpx.HTTPStatusError) else  # it answers, but cannot serve
                "`make status` shows whether vLLM runs; one that runs but no longer serves is restarted by "
                f"`./start_vllm.sh` (its log: {settings.vllm_log_file})")  # fmt: skip
        raise BenchError(f"the server is not answering at {settings.vllm_url} ({type(error).__name__}: {error}). "
                         f"{hint}.") from None
    if models.status_code in (401, 403):
        raise BenchError(f"the server at {settings.vllm_url} refuses the API key (/v1/models: HTTP "
                         f"{models.status_code}): set VLLM_API_KEY to the key vLLM was started with.")
    if health.status_code not in (200, 404):  # a server without /health (404) is judged by /v1/models alone
        raise BenchError(f"the server at {settings.vllm_url} is not ready (/health: HTTP {health.status_code}).")
    if models.status_code != 200:
        raise BenchError(f"GET {settings.vllm_url}/v1/models answered HTTP {models.status_code}: "
                         f"{snippet(models.content)!r}. VLLM_BASE_URL must be an OpenAI-compatible server's root (no "
                         "/v1).")
    try:
        listed = answer_as(models, MODEL_LIST, MODEL_LIST_SHAPE)
    except ShapeError as exc:
        raise BenchError(f"{exc}. VLLM_BASE_URL must be an OpenAI-compatible server's root (no /v1).") from None
    return listed.data


def preflight(settings: Settings, sidecar: SidecarClient) -> Target:
    """Check the server and the sidecar answer, choose the model, check GATE names a baseline. Raises BenchError: what
    is wrong and what to do."""
    models = _served(settings)
    served = {m.id: m.max_model_len for m in models}
    model = choose_model(list(served), settings)
    sidecar.check_token()  # also: it answers
    if settings.gate:
        baselines = sidecar.baselines()
        if settings.gate not in baselines:
            known = ", ".join(sorted(baselines)) or "none yet"
            raise BenchError(f"GATE={settings.gate}: no baseline of that name (known: {known}). Mark one first with "
                             f"`make baseline NAME={settings.gate}` after a benchmark of the same workload.")
    try:  # vLLM's version from its /version (None: a server without one)
        answer = httpx.get(f"{settings.vllm_url}/version", timeout=5, headers=settings.vllm_headers)
        version = answer.json().get("version") if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        version = None
    version = version if isinstance(version, str) else None
    first = models[0]  # the model the report's environment names (choose_model found one)
    facts = ServerFacts(version=version, model_id=first.id, model_root=first.root, max_model_len=first.max_model_len)
    backend = "vLLM" if version else "OpenAI-compatible"
    return Target(model, list(served), backend, served[model], facts)


def smallest_prompt_tokens(settings: Settings, model: str, input_len_tokens: int | None, texts: list[str]) -> int:
    """Tokens of the smallest chat prompt: ``input_len_tokens``, else ``/tokenize`` of the shortest text, else 1."""
    if input_len_tokens is not None:
        return input_len_tokens
    if not texts:
        return 1
    tokenizer = ServerTokenizer(settings.vllm_url, model, timeout_s=10.0, headers=settings.vllm_headers)
    try:
        return max(1, tokenizer.chat_count(min(texts, key=len)))
    except BenchError:  # no usable /tokenize (its shape is checked there), or no answer
        return 1
    finally:
        tokenizer.close()


def context_problem(max_output_tokens: int, prompt_tokens: int, max_model_len: int | None, knob: str) -> str | None:
    """Why ``max_output_tokens`` cannot fit the context ``max_model_len`` (None: unknown) with ``prompt_tokens``
    (pure; all in tokens; ``knob`` named in the message); None when it fits."""
    if max_model_len is None or max_output_tokens + prompt_tokens <= max_model_len:
        return None
    room = max_model_len - prompt_tokens
    return (f"{knob}={max_output_tokens} cannot fit the model's context: max_model_len={max_model_len} tokens, and "
            f"the smallest prompt takes {prompt_tokens} token(s), so at most {max(room, 0)} output tokens fit. Lower "
            f"{knob} to {max(room, 1)} or less (or serve a longer context: VLLM_MAX_MODEL_LEN).")


def gate_problem(settings: Settings, sidecar: SidecarClient, plan: BenchmarkConfig, served: list[str]) -> str | None:
    """GATE=name before any load: the gate's ``[GATE] ERROR vs name: not comparable: …`` line when the baseline cannot
    judge this plan (:func:`core.fingerprint.refusal_reason`; hardware taken from the baseline, the model the first of
    ``served``); None when it can. Raises BenchError: the sidecar is unreachable."""
    if not settings.gate:
        return None
    target = sidecar.baselines().get(settings.gate)
    if target is None:
        return None
    model = served[0] if served else plan.model
    if is_series_id(target):
        reason = None if settings.sweep else series_refusal(sidecar, target, plan, model)
    elif (baseline := sidecar.get(f"/reports/{target}", Report)) is None:
        reason = f"its report {target} no longer exists"
    else:
        env = baseline.environment.model_copy(update={"served_model_name": model})
        reason = refusal_reason(baseline, fingerprint_fields(plan, env))
    return refused_line(settings.gate, reason) if reason else None


def series_refusal(sidecar: SidecarClient, series_id: str, plan: BenchmarkConfig, model: str) -> str | None:
    """One load point against a series baseline: why no point of it has the plan's workload (how it differs from the
    first); None when one has or it cannot be read. Raises BenchError: the sidecar is unreachable."""
    series = sidecar.get(f"/series/{series_id}", SeriesReport)
    if series is None:
        return f"its series {series_id} no longer exists"
    first = next((p.report_ids[0] for p in series.points if p.report_ids), None)
    reference = sidecar.get(f"/reports/{first}", Report) if first else None
    if reference is None:
        return None
    env = reference.environment.model_copy(update={"served_model_name": model})
    fields = fingerprint_fields(plan, env)
    if any(p.fingerprint == fingerprint_of(fields) for p in series.points):
        return None
    old = fingerprint_fields(reference.config, reference.environment)
    return (f"no load point of {series_id} has this workload; it differs from its first point ({first}: "
            f"{'; '.join(differing_fields(old, fields))})")


def plan_problem(
    settings: Settings, sidecar: SidecarClient, plan: BenchmarkConfig, target: Target, dataset: Dataset | None
) -> str | None:
    """The plan's checks before any load (:func:`context_problem`, :func:`gate_problem`): the line to print, or None.
    Raises BenchError: the sidecar is unreachable."""
    if target.max_model_len is not None:
        texts = [] if dataset is None else ["\n".join(m["content"] for m in p.messages) for p in dataset.prompts]
        prompt = smallest_prompt_tokens(settings, plan.model, plan.input_len_tokens, texts)
        knob = "MAX_TOKENS" if settings.fixed_max_tokens is not None else "OUTPUT_LEN_CAP"  # sets the longest output
        knob = "RANDOM_OUTPUT_LEN" if settings.random_dataset else knob
        problem = context_problem(plan.max_tokens, prompt, target.max_model_len, knob)
        if problem:
            return f"[ERROR] {problem}"
    return gate_problem(settings, sidecar, plan, target.served)


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
