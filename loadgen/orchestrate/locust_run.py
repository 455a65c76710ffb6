"""Locust headless on one plan: started bound to the benchmark's life, watched, stopped; a :class:`LocustOutcome`.

Its progress bar counts successes and failures apart, fill, rate and ETA from successes only (a run whose requests all
time out must show no rate "done"); :class:`Progress` is pure, :class:`ProgressBar` shows it. The server-down
breaker ends a run early whose requests fail at the connection level for SERVER_DOWN_S with no answer in between (a
dead vLLM would be retried as fast as the machine allows). Any HTTP answer proves the server up, except the router's
"no engine" (:data:`NO_ENGINE_ANSWERS`) and vLLM's "model not served" (the stack was switched:
:data:`MODEL_GONE_ANSWERS`); timeouts prove nothing."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from tqdm import tqdm

from core.clientview import ProcessLoad
from core.knobs import client_host
from core.records import ENGINE_GONE_ANSWERS, MODEL_GONE_ANSWERS, MODEL_GONE_LINE, NO_ENGINE_ANSWERS
from core.replicas import replicas
from core.report_schema import BenchmarkConfig
from core.settings import PROJECT_ROOT, Settings, service_env
from loadgen.childprocs import kill_group, lifetime_bound, tree_cpu_s
from loadgen.errors import WorkersMissing
from loadgen.orchestrate.locust_launch import locust_argv, worker_argv
from loadgen.plan import jsonl_rows, run_file, workload_prompts, write_plan

tqdm.monitor_interval = 0  # no monitor thread: Ctrl-C must not print its traceback
INTERRUPTED = "interrupted (Ctrl-C, SIGTERM or SIGHUP)"
SERVER_DOWN = "server down"


@dataclass
class LocustOutcome:
    """How Locust ended: exit code, CPU cores used (None under 2 s of load), why it stopped early, each process's."""

    code: int | None
    cpu_cores: float | None
    stopped: str | None = None
    processes: list[ProcessLoad] = field(default_factory=list)
    server_down: ServerDown | None = None


def read_process_loads(path: Path) -> list[ProcessLoad]:
    """The load processes' reports (``--client-file``); unreadable lines are skipped."""
    loads = [p for p in jsonl_rows(path, ProcessLoad) if p is not None] if path.exists() else []
    return sorted(loads, key=lambda p: p.slot)


def stop_locust(proc: subprocess.Popen[bytes], grace_s: float, sig: signal.Signals | None = signal.SIGINT) -> None:
    """``sig`` to Locust's process group (SIGINT: each process cancels its requests in flight and saves them as
    ``incomplete`` rows: :func:`loadgen.locust_side.user_actions.cancel_on_sigint`; None: none, it is ending by
    itself), then SIGKILL to it after ``grace_s`` s, and once more for workers that outlived their master."""
    if proc.poll() is None and sig is not None:
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            proc.send_signal(sig)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        proc.wait()
    kill_group(proc.pid)


def worker_hint(settings: Settings) -> str:
    """How to start a remote worker of this benchmark."""
    return (f"On each load host run: SIDECAR_TOKEN=<this stack's token> ./run_benchmark.sh --worker --master-host "
            f"<this host's address> --master-port {settings.master_port}")


def workers_missing(log_path: Path) -> str | None:
    """Why the master gave up (its line in the Locust log), or None."""
    try:
        text = log_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if "Gave up waiting for workers" in line or "load workers joined within" in line:
            return line.split("] ", 1)[-1].strip()
    return None


def run_locust(settings: Settings, plan: BenchmarkConfig, records_path: Path) -> LocustOutcome:
    """Run Locust headless on ``plan`` (written to ``<run id>.plan.json``; its log ``<run id>.locust.log``) with a
    progress bar, until done; stopped early by the watchdog (no request ends for WATCHDOG_S), the server-down breaker or
    Ctrl-C, the rows so far kept. Raises WorkersMissing: EXPECT_WORKERS and no worker joined in time."""
    plan_path, client_path = run_file(records_path, ".plan.json"), run_file(records_path, ".client.jsonl")
    # the Locust processes read their settings and the prompts (the benchmark's one parse of the dataset) from it
    write_plan(plan_path, plan, settings, workload_prompts(plan))
    open_loop = plan.rate_req_per_sec is not None
    argv = locust_argv(
        settings, headless=True, users=plan.concurrency, ramp_up_s=plan.ramp_up_s or 0.0, host=plan.vllm_url,
        # the open-loop dispatcher stops at DURATION and drains by itself; closed-loop users stop at --run-time
        run_time_s=None if open_loop else plan.duration_s, records_file=records_path,
        max_requests=plan.requests if plan.duration_s is None else None,
        stop_timeout_s=plan.drain_s if plan.duration_s and not open_loop else None,
        user_class="OpenLoopUser" if open_loop else "ChatUser", workers=plan.workers, client_file=client_path,
        remote_workers=plan.remote_workers,
    )
    log_path = run_file(records_path, ".locust.log")
    env = {**service_env("locust"), "LOCUST_PLAN_FILE": str(plan_path)}
    with log_path.open("w") as log:
        # each its own process group (killed whole at the end) bound to this process's life (Linux: PDEATHSIG), so
        # no load process outlives the benchmark, even one killed with SIGKILL
        def launch(command: list[str]) -> subprocess.Popen[bytes]:
            return subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True, preexec_fn=lifetime_bound(os.getpid()))  # fmt: skip

        proc = launch(argv)
        local_workers: list[subprocess.Popen[bytes]] = []
        if plan.remote_workers:  # this host's own workers join like the remote ones
            print(f"[INFO] Waiting up to {settings.expect_workers_timeout_s:.0f} s for {plan.remote_workers} remote "
                  f"load worker(s) on {settings.master_bind_host}:{settings.master_port}. {worker_hint(settings)}",
                  flush=True)  # fmt: skip
            worker = worker_argv(settings, client_host(settings.master_bind_host), argv[-1])
            local_workers = [launch(worker) for _ in range(plan.workers)]
    watchdog_s = settings.watchdog_s or plan.request_timeout_s + 60.0
    start = last_progress = time.monotonic()
    # CPU is read from the first poll that sees a finished request on, so Locust's start-up does not count as load
    first: tuple[float, float] | None = None
    last: tuple[float, float] | None = None
    stopped: str | None = None
    breaker = ServerDownBreaker(settings.server_down_s)
    count_measured = RowWatch(records_path, breaker)
    probe = EngineProbe(lambda: engine_urls(settings, plan.vllm_url), breaker)
    total = plan.requests if plan.duration_s is None else None
    ended = 0  # measured rows at the last poll, successes or not: the watchdog's progress
    with ProgressBar(total, plan.duration_s, desc="Benchmark", file=sys.stdout, dynamic_ncols=True) as bar:
        try:
            while proc.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=1.0)  # one poll a second, and none after Locust has ended
                done = count_measured()
                now = time.monotonic()
                cpu = tree_cpu_s(proc.pid)
                if cpu is not None and done:
                    last = (now, cpu)
                    first = first or last
                if count_measured.down is None and done == ended and now - last_progress >= settings.server_down_s:
                    count_measured.down = probe()  # no request ended for SERVER_DOWN_S: are the engines alive?
                if count_measured.down is not None:
                    stopped = SERVER_DOWN
                    print(f"\n[ERROR] {count_measured.down.line()}; ending the run early.", flush=True)
                    stop_locust(proc, 10.0)
                    break
                if done > ended:
                    last_progress = now
                    ended = done
                elif now - last_progress > watchdog_s:
                    stopped = f"watchdog: no request finished for {watchdog_s:.0f} s (WATCHDOG_S)"
                    print(f"\n[ERROR] {stopped}; stopping the run, the rows so far are kept.", flush=True)
                    stop_locust(proc, plan.drain_s + 10.0)
                    break
                ok, cut = count_measured.ok, count_measured.cut
                bar.show(Progress(ok, done - ok - cut, total, now - start, plan.duration_s, cut))
        except KeyboardInterrupt:
            stopped = INTERRUPTED
            print("\n[INFO] Stopping: requests in flight are cancelled and a report of the rows so far is written "
                  "(Ctrl-C again to quit without one).", flush=True)  # fmt: skip
            stop_locust(proc, plan.drain_s + 10.0)
        finally:
            stop_locust(proc, 0.0, signal.SIGKILL)  # an exception on the way out (a second Ctrl-C): none left behind
            for local in local_workers:  # stopped early: its requests cancelled too; else its master told it to quit
                stop_locust(local, 5.0, signal.SIGINT if stopped else None)
    missing = workers_missing(log_path) if plan.remote_workers and not count_measured() else None
    if missing:
        raise WorkersMissing(f"{missing}: {plan.workers} local + {plan.remote_workers} remote load worker(s) were "
                             f"expected within {settings.expect_workers_timeout_s:.0f} s (EXPECT_WORKERS_TIMEOUT_S); "
                             f"nothing was measured. {worker_hint(settings)}")  # fmt: skip
    cores = None
    if first and last and last[0] - first[0] >= 2.0:
        cores = (last[1] - first[1]) / (last[0] - first[0])
    return LocustOutcome(proc.returncode, cores, stopped, read_process_loads(client_path), count_measured.down)


def clock(seconds: float) -> str:
    """``MM:SS`` (``H:MM:SS`` from one hour on), as tqdm writes times; negative values count as 0."""
    return str(tqdm.format_interval(max(seconds, 0.0)))


@dataclass(frozen=True)
class Progress:
    """Measured rows so far: ``ok``, ``failed`` and ``cut`` (in flight at the run's end: incomplete, not failures) of
    ``total`` (None: ``duration_s`` bounds it), ``elapsed_s``."""

    ok: int
    failed: int
    total: int | None
    elapsed_s: float
    duration_s: float | None = None
    cut: int = 0

    @property
    def ok_rate_req_per_s(self) -> float:
        """Successes per second since the start (0.0 before one second has passed with none)."""
        return self.ok / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        """Seconds left (of the duration, else at the success rate); None with no success yet or nothing left."""
        if self.total is None:
            return None if self.duration_s is None else max(self.duration_s - self.elapsed_s, 0.0)
        left = self.total - self.ok - self.failed - self.cut
        if self.ok == 0 or left <= 0:
            return None
        return left / self.ok_rate_req_per_s

    def text(self) -> str:
        """The bar's words: ``12 ok, 25 failed / 200 [05:31<02:10, 0.04 ok/s]`` (``, 3 cut`` after ``failed`` once the
        run's end cut some); with no success yet ``0 ok, 37 failed / 200 [05:31, no success yet: no ETA]``."""
        counts = f"{self.ok} ok, {self.failed} failed" + (f", {self.cut} cut" if self.cut else "")
        counts += f" / {self.total}" if self.total is not None else ""
        times = clock(self.elapsed_s)
        eta = self.eta_s
        if eta is not None and math.isfinite(eta):
            times += f"<{clock(eta)}"
        if self.ok == 0:
            why = "no success yet" + (": no ETA" if self.total is not None else "")
            return f"{counts} [{times}, {why}]"
        return f"{counts} [{times}, {self.ok_rate_req_per_s:.2f} ok/s]"


class ProgressBar(tqdm):
    """A tqdm bar showing :class:`Progress` in place of tqdm's count, rate and ETA:
    ``Benchmark:   6%|█▊        | 12 ok, 25 failed / 200 [05:31<1:14:56, 0.04 ok/s]``."""

    def __init__(self, total: int | None, duration_s: float | None, **kwargs: Any) -> None:
        self.seen = Progress(0, 0, total, 0.0, duration_s)
        # requests bounded: the fill is successes / total; duration bounded: no total to fill
        fmt = "{desc}: {percentage:3.0f}%|{bar}| {words}" if total is not None else "{desc}: {words}"
        super().__init__(total=total, bar_format=fmt, **kwargs)

    @property
    def format_dict(self) -> dict[str, Any]:
        """tqdm's fields plus ``words``: :meth:`Progress.text` of the last :meth:`show`."""
        return {**super().format_dict, "words": self.seen.text()}

    def show(self, seen: Progress) -> None:
        """Show ``seen``: the fill is its successes (out of the total), the words its counts, rate and ETA."""
        self.seen = seen
        self.n = seen.ok
        self.refresh()


MODEL_GONE = "the stack was switched to another model"  # the cause of a run ended by MODEL_GONE_ANSWERS
ANSWERED_ERRORS = frozenset({"http_status", "no_done", "empty_output", "invalid_stream"})


def connection_cause(message: str) -> str:
    """A ``connection`` row's error ``message`` in a few words (``connection refused``, ``DNS lookup failed``, …)."""
    text = message.lower()
    causes = (
        ([answer.decode().lower() for answer in MODEL_GONE_ANSWERS], MODEL_GONE),
        ([answer.decode().lower() for answer in NO_ENGINE_ANSWERS], "no engine answers behind the router"),
        (["refused"], "connection refused"),
        (["reset", "broken pipe"], "connection reset"),
        (["gaierror", "name or service", "resolve", "nodename"], "DNS lookup failed"),
    )
    return next((cause for words, cause in causes if any(word in text for word in words)), "connection failed")


@dataclass(frozen=True)
class ServerDown:
    """The breaker tripped: the first failure's Unix time (s), its cause in words, and how long failures went on (s)."""

    since: float
    cause: str
    for_s: float

    def line(self) -> str:
        """``vLLM stopped answering at 01:02:03: connection refused for 5 s`` (local time)."""
        at = time.strftime("%H:%M:%S", time.localtime(self.since))
        if self.cause == MODEL_GONE:
            return f"{MODEL_GONE_LINE} at {at}: {MODEL_GONE}, HTTP 404 for {self.for_s:.0f} s"
        return f"vLLM stopped answering at {at}: {self.cause} for {self.for_s:.0f} s"


class ServerDownBreaker:
    """Trips when connection-level failures span ``limit_s`` (SERVER_DOWN_S, > 0) seconds with no answer between;
    the verdict names the first failure's time and the latest one's cause."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self.first: float | None = None
        self.cause = ""

    def answered(self) -> None:
        """A request succeeded or the server answered with an error: it is up."""
        self.first = None

    def failed(self, ended_at: float, message: str, cause: str | None = None) -> ServerDown | None:
        """A request failed at the connection level at Unix time ``ended_at`` (s), ``cause`` in words (default: from
        ``message``); the verdict once tripped."""
        if self.first is None or ended_at < self.first:
            self.first = ended_at
        self.cause = cause or connection_cause(message)  # the latest: a cut stream first, then the dead server
        span = ended_at - self.first
        return ServerDown(self.first, self.cause, span) if span >= self.limit_s else None


class EngineProbe:
    """Asks each engine's ``GET /health`` (vLLM: 200 while its engine core lives, 503 once it died) when no request
    has ended for SERVER_DOWN_S: a server stopped gracefully (SIGTERM: uvicorn waits for open streams while its engine
    core is gone) leaves every stream hanging with no row failing, so the probes feed the breaker instead. Any engine
    answering otherwise than 503 (another server without ``/health``: 404) is up. ``urls`` are read at each probe
    (a model switch moves an engine to its other slot)."""

    def __init__(self, urls: Callable[[], list[str]], breaker: ServerDownBreaker, timeout_s: float = 5.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.urls = urls
        self.breaker = breaker
        self.timeout_s = timeout_s
        self.clock = clock

    def __call__(self) -> ServerDown | None:
        """One probe of every engine; the breaker's verdict once failures span SERVER_DOWN_S (None: no engine)."""
        message, cause = "", None
        for url in self.urls():
            try:
                status = httpx.get(f"{url}/health", timeout=self.timeout_s).status_code
            except httpx.TimeoutException:
                continue  # slow, not gone (a loaded host): no verdict either way
            except httpx.HTTPError as exc:
                message = f"GET {url}/health: {type(exc).__name__}: {exc}"  # its cause read as a failed row's
                continue
            if status != 503:
                self.breaker.answered()
                return None
            message, cause = f"GET {url}/health answered HTTP 503", "its engine died (/health answers 503)"
        return self.breaker.failed(self.clock(), message, cause) if message else None


def engine_urls(settings: Settings, fallback: str) -> list[str]:
    """The URLs of the engines the run's requests reach (:func:`core.replicas.replicas`); ``fallback``, the URL
    Locust sends to, when ENGINE_URLS does not parse."""
    try:
        return [replica.url for replica in replicas(settings)]
    except ValueError:
        return [fallback]


class RowWatch:
    """Reads a growing rows file's new complete lines: counts measured rows (``count``; ``ok`` of them successes,
    ``cut`` incomplete) and feeds the breaker (``down`` once tripped)."""

    def __init__(self, path: Path, breaker: ServerDownBreaker | None = None) -> None:
        self.path = path
        self.breaker = breaker
        self.offset = 0
        self.count = 0
        self.ok = 0
        self.cut = 0
        self.down: ServerDown | None = None

    def __call__(self) -> int:
        """Measured rows so far (a line still being written is read next time)."""
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return self.count
        end = data.rfind(b"\n") + 1
        self.offset += end
        for line in data[:end].splitlines():
            if b'"phase":"measured"' not in line:
                continue
            self.count += 1
            self.ok += b'"ok":true' in line
            self.cut += b'"error_kind":"incomplete"' in line
            if self.breaker is not None and self.down is None:
                self._watch(line)
        return self.count

    def _watch(self, line: bytes) -> None:
        assert self.breaker is not None
        no_engine = b'"error_kind":"http_status"' in line and any(answer in line for answer in ENGINE_GONE_ANSWERS)
        if not no_engine and (
            b'"ok":true' in line or any(b'"error_kind":"%s"' % k.encode() in line for k in ANSWERED_ERRORS)
        ):
            self.breaker.answered()
        elif no_engine or b'"error_kind":"connection"' in line:
            try:
                row = json.loads(line)
                ended_at = float(row["started_at"]) + float(row.get("e2e_ms") or 0.0) / 1000.0
            except (ValueError, KeyError, TypeError):
                return
            self.down = self.breaker.failed(ended_at, str(row.get("error") or ""))
