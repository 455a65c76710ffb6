"""One measured run: warmup, then Locust between two ``/metrics`` scrapes inside a sidecar sampling window (under the
profiler with PROFILE=1); rows are appended to ``logs/runs/<run id>.requests.jsonl`` as they come. PROFILE=1: vLLM's
torch profiler (traces in ``logs/profile/``); the engine controller restarts vLLM with it and back, elsewhere vLLM
must run with ``--profiler-config``.

The capacity check: whether the engine can answer a planned closed-loop load within REQUEST_TIMEOUT_S, judged from
the warm-up. ``concurrency`` users starting at once wait, the last of them, about ``concurrency × prompt_tokens /
prefill_tok_per_s`` s for a first token; the warm-up's ``at_once`` requests give the prefill rate as
``sum(prompt tokens) / max(TTFT)`` (a lower bound). Timed-out requests are replaced by new prompts to prefill, so such
a run ends with no success at all. Measurements on ERNIE-4.5-0.3B (AVX-512 ≈ 330, AVX2 bf16 41 prompt tok/s):
docs/benchmarks.md.

vLLM's ``/metrics`` around the measured window: one server (:func:`scrape_metrics`), or every engine behind the
router (:class:`ReplicaWatch`: scraped before and after, polled for KV usage and liveness during it); before a run,
a wait up to IDLE_WAIT_S for vLLM to be idle (other requests would count in its figures), or a refusal.
"""

from __future__ import annotations

import json
import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from core.clientview import ProcessLoad
from core.engineload import EngineLoad, busy_refusal, engine_load, idle_decision
from core.enginestate import EngineControl, EngineError, read_engine_state
from core.records import RequestRecord
from core.replicas import Replica, engine_url, front_in_use, replicas, router_in_use, serving_engine, switch_marker
from core.report_schema import BenchmarkConfig, causes_text, error_summary
from core.serverview_cluster import ReplicaScrapes
from core.serverview_samples import Samples, parse_exposition, sum_samples
from core.settings import Settings
from loadgen.errors import BenchError, OverCapacity, WarmupFailed, WarmupInterrupted
from loadgen.locust_side.user_actions import payload_for
from loadgen.orchestrate.locust_run import INTERRUPTED, SERVER_DOWN, ServerDown, read_process_loads, run_locust
from loadgen.plan import jsonl_rows, run_file, run_id_of, sampler_for
from loadgen.request.client import new_session, stream_chat
from loadgen.request.transport import HttpSession
from loadgen.sidecar_client import SidecarClient
from loadgen.terminal.summary import load_line


@dataclass
class Measured:
    """What one run collected: rows, the measured window, /metrics scrapes, client CPU, sampling window, traces."""

    records: list[RequestRecord]
    window_start: float
    window_end: float
    before: Samples | None = None
    after: Samples | None = None
    cpu_cores: float | None = None
    window_id: str | None = None
    traces: list[str] = field(default_factory=list)
    interrupted: bool = False  # Ctrl-C, SIGTERM, SIGHUP; a watchdog stop is a gap, not an interruption
    server_down: ServerDown | None = None  # vLLM stopped answering: the run was ended early
    engine_switch: str | None = None  # ./start_vllm.sh during the run (core.replicas.switch_marker)
    gaps: list[str] = field(default_factory=list)
    processes: list[ProcessLoad] = field(default_factory=list)
    replicas: list[ReplicaScrapes] | None = None  # with the router: each engine's scrapes (ReplicaWatch)


def read_records(path: Path) -> tuple[list[RequestRecord], int]:
    """Rows of a records file and the number of unreadable lines (a torn last line after a crash)."""
    rows = list(jsonl_rows(path, RequestRecord)) if path.exists() else []
    records = [r for r in rows if r is not None]
    return records, len(rows) - len(records)


def warmup(
    plan: BenchmarkConfig, records_path: Path, headers: dict[str, str] | None = None
) -> list[RequestRecord]:
    """Send the plan's warmup requests (at most CONCURRENCY at once, ``headers`` carrying the API key), appended as
    ``warmup`` rows. Raises WarmupInterrupted: Ctrl-C (SIGTERM, SIGHUP): the requests in flight aborted (``incomplete``
    rows naming Ctrl-C), the rows so far in ``records_path``."""
    if plan.warmup_requests == 0:
        return []
    sampler = sampler_for(plan, plan.seed + 1)
    payloads = queue.SimpleQueue[dict[str, object]]()
    for _ in range(plan.warmup_requests):
        payloads.put(payload_for(plan, sampler.next()))
    done: list[RequestRecord] = []
    sessions: list[HttpSession] = []
    stop = threading.Event()
    count = min(plan.warmup_requests, plan.concurrency)
    ended = [threading.Event() for _ in range(count)]

    def worker(slot: int) -> None:
        session = new_session(headers=headers)
        sessions.append(session)
        try:
            while not stop.is_set():
                try:
                    payload = payloads.get_nowait()
                except queue.Empty:
                    return
                row = stream_chat(session, plan.vllm_url, payload, timeout_s=plan.request_timeout_s, phase="warmup")
                if stop.is_set() and not row.ok:  # Ctrl-C shut its connection down
                    row = row.model_copy(update={"error_kind": "incomplete",
                                                 "error": f"cancelled by Ctrl-C ({row.error_kind})"})  # fmt: skip
                done.append(row)
        finally:
            session.close()
            ended[slot].set()

    threads = [threading.Thread(target=worker, args=(slot,), daemon=True) for slot in range(count)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)  # short joins: Ctrl-C reaches the main thread
    except KeyboardInterrupt:
        stop.set()
        for session in list(sessions):
            session.abort()
        for event in ended:  # not Thread.join: a join that Ctrl-C interrupted can take its thread for ended (3.11)
            event.wait(WARMUP_ABORT_WAIT_S)
        append_rows(records_path, list(done))
        raise WarmupInterrupted(f"interrupted during the warmup ({len(done)} of {plan.warmup_requests} warmup "
                                "requests ended or cut); the measured run was not started") from None  # fmt: skip
    append_rows(records_path, done)
    return done


WARMUP_ABORT_WAIT_S = 2.0  # after Ctrl-C, how long each warmup thread may take to return its row, s


def append_rows(records_path: Path, rows: list[RequestRecord]) -> None:
    """Append ``rows`` to the run's rows file."""
    with records_path.open("a", encoding="utf-8") as fh:
        fh.writelines(r.model_dump_json() + "\n" for r in rows)


def write_ending(
    records_path: Path, down: ServerDown | None, interrupted: bool = False, switched: str | None = None
) -> None:
    """Keep beside the rows, for ``--report-from``, how the run ended early and a switch of vLLM during it."""
    record = {"engine_switch": switched, "server_down": asdict(down) if down else None, "interrupted": interrupted}
    record = {key: value for key, value in record.items() if value}  # only what happened
    if record:
        run_file(records_path, ".ending.json").write_text(json.dumps(record) + "\n", encoding="utf-8")


def check_capacity(settings: Settings, plan: BenchmarkConfig, done: list[RequestRecord]) -> None:
    """Refuse a closed-loop load the warm-up ``done`` shows would time out (CAPACITY_CHECK=0, open loops, traces and
    sweeps skip it), or warn when it nearly would. Raises OverCapacity, naming the concurrency the engine can serve."""
    if not settings.capacity_check or plan.rate_req_per_sec is not None or settings.sweep or settings.trace:
        return
    at_once = min(plan.warmup_requests, plan.concurrency)
    capacity = warmup_capacity(done, at_once, plan.concurrency, plan.request_timeout_s)
    if capacity is None:
        return
    refusal = capacity.refusal()
    if refusal:
        raise OverCapacity(refusal)
    warning = capacity.warning()
    if warning:
        print(f"[WARN] {warning}", flush=True)


def measure(settings: Settings, plan: BenchmarkConfig, records_path: Path, sidecar: SidecarClient) -> Measured:
    """Once the engine is idle: warmup, then Locust between two /metrics scrapes in a sidecar sampling window.

    Raises:
        ProfilingError: the profiler could not be started or stopped.
        EngineBusy: vLLM still held other requests after IDLE_WAIT_S (nothing sent).
        WarmupFailed, WarmupInterrupted, OverCapacity: nothing measured (the warmup rows are in ``records_path``).
        SidecarRefused: the sidecar cannot see ``records_path``, so it could write no report (nothing measured).
    """
    wait_until_idle(settings)
    done = warmup(plan, records_path, settings.vllm_headers)
    failed = sum(not r.ok for r in done)
    if done and failed == len(done):  # in the server's words: "http_status 10 (max_tokens=99999 cannot be …)"
        raise WarmupFailed(f"every warmup request failed ({len(done)} of {len(done)}): "
                           f"{causes_text(error_summary(done, 'warmup'))}. The measured run was not started: it "
                           "would fail the same way.")  # fmt: skip
    print(f"[INFO] Warmup completed: {len(done)} requests" + (f" ({failed} failed)" if failed else ""))
    check_capacity(settings, plan, done)
    # before any load: refused (SidecarRefused) when the sidecar cannot see this run's rows file, its report's source
    window = sidecar.start_window(run_id_of(records_path))
    print(load_line(plan), flush=True)
    if settings.profile:
        profiler_post(settings, "/start_profile", 60)
    watch = ReplicaWatch.of(settings)  # with the router: every engine behind it (scraped and polled from now)
    engine_before = serving_engine(settings)  # behind the stack's router: the engine itself (its /metrics)
    before, why_before = (None, None) if watch else scrape_metrics(engine_url(settings), settings.vllm_headers)
    window_start = time.time()
    outcome = run_locust(settings, plan, records_path)
    window_end = time.time()
    engine_after = serving_engine(settings)
    switched = switch_marker(engine_before, engine_after)
    # before anything else can fail: a report rebuilt from the rows says so too
    write_ending(records_path, outcome.server_down, outcome.stopped == INTERRUPTED, switched)
    after, why_after = scrape_metrics(engine_url(settings), settings.vllm_headers) if not watch else (None, None)
    gaps = []
    if switched:  # ./start_vllm.sh during the run: two engines served it, their counters apart
        before = after = None
        gaps.append("server cross-check skipped: vLLM was switched during the run (each engine counted its own)")
        print(f"[WARN] {switched}", flush=True)
    if watch:
        before, after, partial = watch.end()
        gaps += [partial] if partial else []
    elif (before is None or after is None) and not switched:
        gaps.append(f"server cross-check skipped: {why_before or why_after}")
    if window is None:
        gaps.append("sidecar sampling window not opened: resources are the samples between the run's first and last")
    if outcome.stopped and outcome.stopped not in (INTERRUPTED, SERVER_DOWN):
        gaps.append(f"run stopped early by the {outcome.stopped}")
    left = left_after_stop(settings) if outcome.stopped and outcome.stopped != SERVER_DOWN else None
    if left:
        print(f"[WARN] {left}", flush=True)
        gaps.append(left)
    traces: list[str] = []
    if settings.profile:
        profiler_post(settings, "/stop_profile", 600)  # vLLM writes its traces: can take a while
        found = settings.profile_dir.rglob("*") if settings.profile_dir.is_dir() else ()
        traces = [str(p) for p in sorted(found) if p.is_file() and p.name.endswith(TRACE_SUFFIXES)
                  and p.stat().st_mtime >= window_start - 5]  # Chrome-trace files written since the window's start
        print(f"[INFO] Profiler wrote {len(traces)} trace file(s)")
    if outcome.code not in (0, 1) and not outcome.stopped:  # 1: some request failed; the report counts them
        print(f"[WARN] Locust exited with code {outcome.code}; building the report from the rows collected.")
    records, bad = read_records(records_path)
    if bad:
        print(f"[WARN] {bad} unreadable row(s) in {records_path} skipped")
    return Measured(
        records, window_start, window_end, before, after, outcome.cpu_cores, window.window_id if window else None,
        traces, interrupted=outcome.stopped == INTERRUPTED, gaps=gaps, processes=outcome.processes,
        server_down=outcome.server_down, engine_switch=switched, replicas=watch.scrapes if watch else None,
    )


def from_records_file(path: Path) -> Measured:
    """A finished run rebuilt from its rows file and the client and ending (:func:`write_ending`) files beside it (no
    scrapes, no CPU)."""
    records, _ = read_records(path)
    first = min((r.started_at for r in records), default=time.time())  # only a warmup: its span
    start = min((r.started_at for r in records if r.phase == "measured"), default=first)
    end = max((r.ended_at for r in records), default=time.time())
    run = Measured(records, start, end, processes=read_process_loads(run_file(path, ".client.jsonl")))
    with suppress(OSError, ValueError, KeyError, TypeError, AttributeError):  # no readable ending: nothing to add
        ending = json.loads(run_file(path, ".ending.json").read_text(encoding="utf-8"))
        d = ending.get("server_down")
        run.server_down = None if d is None else ServerDown(float(d["since"]), str(d["cause"]), float(d["for_s"]))
        run.interrupted, run.engine_switch = ending.get("interrupted") is True, ending.get("engine_switch")
    return run


def run_measured(
    settings: Settings, plan: BenchmarkConfig, records_path: Path, sidecar: SidecarClient, engine: EngineControl
) -> Measured:
    """:func:`measure`, with vLLM restarted with its profiler and back around it when PROFILE=1. Raises
    ProfilingError: profiling was asked for and failed."""
    try:
        if settings.profile:
            enable_profiler(settings, engine)
        return measure(settings, plan, records_path, sidecar)
    finally:
        if settings.profile:
            disable_profiler(settings, engine)  # also after Ctrl-C or a failure half-way through the restart


SERVABLE_SHARE = 0.5  # servable: the first wave's last first token within this share of REQUEST_TIMEOUT_S


@dataclass(frozen=True)
class Capacity:
    """The warm-up's prefill and output speeds (tok/s) over ``at_once`` requests of ``prompt_tokens`` (mean, chat
    template included), and what they mean for ``concurrency`` users under REQUEST_TIMEOUT_S ``timeout_s``."""

    prefill_tok_per_s: float
    output_tok_per_s: float
    at_once: int
    prompt_tokens: float
    concurrency: int
    timeout_s: float

    @property
    def first_wave_ttft_s(self) -> float:
        """Estimated wait, s, of the last of ``concurrency`` users starting together for its first token."""
        return self.concurrency * self.prompt_tokens / self.prefill_tok_per_s

    @property
    def servable_users(self) -> int:
        """The most users whose first wave gets every first token within :data:`SERVABLE_SHARE` of the timeout."""
        return max(1, math.floor(SERVABLE_SHARE * self.timeout_s * self.prefill_tok_per_s / self.prompt_tokens))

    def measured(self) -> str:
        """What the warm-up measured, for the lines below."""
        return (f"the warm-up of {self.at_once} request(s) at once measured {self.prefill_tok_per_s:.0f} prompt tok/s "
                f"prefilled, {self.output_tok_per_s:.1f} output tok/s, {self.prompt_tokens:.0f}-token prompts")

    def refusal(self) -> str | None:
        """Why the load cannot be served (last first tokens after the timeout), with the load that can; else None."""
        if self.first_wave_ttft_s <= self.timeout_s:
            return None
        return (f"At {self.concurrency} users starting together this engine would give the last of them its first "
                f"token after about {self.first_wave_ttft_s:.0f} s, over REQUEST_TIMEOUT_S={self.timeout_s:g} s: "
                f"requests would time out and be replaced faster than it answers ({self.measured()}). It can serve "
                f"--concurrency {self.servable_users}; or raise --request-timeout; --no-capacity-check "
                "(CAPACITY_CHECK=0) sends the load anyway.")

    def warning(self) -> str | None:
        """A note when the first wave fits the timeout with less than the margin; else None."""
        if self.refusal() or self.first_wave_ttft_s <= SERVABLE_SHARE * self.timeout_s:
            return None
        return (f"At {self.concurrency} users the last first token of the first wave comes after about "
                f"{self.first_wave_ttft_s:.0f} s, near REQUEST_TIMEOUT_S={self.timeout_s:g} s: expect timeouts "
                f"({self.measured()}; --concurrency {self.servable_users} keeps within half of it)")


def warmup_capacity(rows: Sequence[RequestRecord], at_once: int, concurrency: int, timeout_s: float) -> Capacity | None:
    """The :class:`Capacity` the warm-up ``rows`` (sent ``at_once`` at a time) show; None with fewer than two
    answers that have prompt tokens and a first token, or no time elapsed."""
    answered = [r for r in rows if r.ok and r.prompt_tokens and r.ttft_ms]
    if len(answered) < 2:
        return None
    first = sorted(answered, key=lambda r: r.started_at)[: max(1, at_once)]  # the requests sent together
    latest_ttft_s = max(r.ttft_ms or 0.0 for r in first) / 1000
    wall_s = max(r.ended_at for r in rows) - min(r.started_at for r in rows)
    if latest_ttft_s <= 0 or wall_s <= 0:
        return None
    prompt = sum(r.prompt_tokens or 0 for r in first)
    output = sum(r.output_tokens or 0 for r in answered)
    return Capacity(prompt / latest_ttft_s, output / wall_s, len(first), prompt / len(first), concurrency, timeout_s)


TRACE_SUFFIXES = (".json", ".json.gz")


class ProfilingError(RuntimeError):
    """The profiler cannot be used; the message says why and what to do."""


def enable_profiler(settings: Settings, engine: EngineControl) -> None:
    """Make sure vLLM runs with its profiler: the launcher started it with one (``logs/engine_state.json``), else a
    restart with it (undo with :func:`disable_profiler`). Raises ProfilingError: no controller runs the engine and
    vLLM has no profiler, or the restart failed."""
    state = read_engine_state(settings.engine_state_file)
    if state is not None and state.profiler:
        return
    try:
        status = engine.status()
    except EngineError as exc:  # supervisord not answering
        raise ProfilingError(f"cannot see vLLM's process: {exc}") from None
    if status is None:
        raise ProfilingError("PROFILE=1 needs vLLM started with --profiler-config: in local mode `make up` first; with "
                             'compose set VLLM_EXTRA_ARGS=\'--profiler-config {"profiler":"torch",'
                             '"torch_profiler_dir":"/app/logs/profile"}\'')
    print("[INFO] Restarting vLLM with its torch profiler for this run (switching back afterwards)...", flush=True)
    try:
        engine.restart(status.request.model_copy(update={"profiler": True}))
    except EngineError as exc:
        raise ProfilingError(f"vLLM with profiler did not start: {exc}") from None


def disable_profiler(settings: Settings, engine: EngineControl) -> None:
    """Restart vLLM without the profiler when the controller started it with one (no controller: nothing)."""
    try:
        status = engine.status()
    except EngineError as exc:  # supervisord not answering
        print(f"[WARN] vLLM may still run with its profiler: {exc}", flush=True)
        return
    if status is None or not status.request.profiler:
        return
    print("[INFO] Restarting vLLM without the profiler...", flush=True)
    try:
        engine.restart(status.request.model_copy(update={"profiler": False}))
    except EngineError as exc:
        print(f"[WARN] vLLM did not come back without the profiler: {exc}", flush=True)


def profiler_post(settings: Settings, path: str, timeout_s: float) -> None:
    """``POST path`` to vLLM itself (``/start_profile``, ``/stop_profile``), within ``timeout_s`` s. Raises
    ProfilingError: no answer, or not HTTP 200."""
    try:
        url = engine_url(settings)  # vLLM itself: the router in front does not pass the profiler endpoints on
        response = httpx.post(f"{url}{path}", timeout=timeout_s, headers=settings.vllm_headers)
    except httpx.HTTPError as exc:
        raise ProfilingError(f"POST {path} failed: {type(exc).__name__}: {exc}") from None
    if response.status_code != 200:
        raise ProfilingError(f"POST {path} answered HTTP {response.status_code}: {response.text[:300]}")


POLL_S = 1.0  # how often each replica is polled during the run, and a busy engine read again before it, s
SAY_EVERY_S = 10.0  # how often an unchanged busy figure is printed again, s
KV_USAGE = "vllm:kv_cache_usage_perc"


def scrape_metrics(vllm_url: str, headers: dict[str, str] | None = None) -> tuple[Samples | None, str | None]:
    """vLLM's ``/metrics`` parsed, or ``(None, why)`` when it cannot be read; ``headers`` carry the API key."""
    try:
        response = httpx.get(f"{vllm_url}/metrics", timeout=10, headers=headers)
    except httpx.HTTPError as exc:
        return None, f"GET /metrics failed ({type(exc).__name__})"
    if response.status_code != 200:
        return None, f"GET /metrics answered HTTP {response.status_code}"
    try:
        samples = parse_exposition(response.text)
    except ValueError:
        return None, "GET /metrics is not a Prometheus exposition"
    if "vllm:request_success_total" not in samples and "vllm:generation_tokens_total" not in samples:
        return None, "GET /metrics has no vLLM request counters (not a vLLM server?)"
    return samples, None


def kv_usage_percent(text: str) -> float | None:
    """``vllm:kv_cache_usage_perc`` (0..1, mean over engines) of ``text``, in percent; None: absent or unparsable."""
    kept = "\n".join(line for line in text.splitlines() if line.startswith(KV_USAGE)) + "\n"
    try:
        values = list(parse_exposition(kept).get(KV_USAGE, {}).values())
    except ValueError:
        return None
    return 100.0 * sum(values) / len(values) if values else None


class ReplicaWatch:
    """Every engine's scrapes around the window and its polls during it (a daemon thread): on creation every engine
    is scraped (the window's start) and the polls begin."""

    def __init__(self, engines: list[Replica], headers: dict[str, str]) -> None:
        self.headers = headers
        self.scrapes = [ReplicaScrapes(r.name, r.url, None, None) for r in engines]
        for scrape in self.scrapes:
            scrape.before, scrape.why = scrape_metrics(scrape.url, headers)
        self._stop = threading.Event()
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._poll, name="replica-watch", daemon=True)
        self._thread.start()

    @classmethod
    def of(cls, settings: Settings) -> ReplicaWatch | None:
        """The watch of the stack's engines, begun; None without the router."""
        return cls(replicas(settings), settings.vllm_headers) if router_in_use(settings) else None

    def _poll(self) -> None:
        with httpx.Client(timeout=POLL_S * 2, headers=self.headers) as client:
            while not self._stop.wait(POLL_S):
                for scrape in self.scrapes:
                    try:
                        response = client.get(f"{scrape.url}/metrics")
                        response.raise_for_status()
                    except httpx.HTTPError:
                        if scrape.down_since_s is None:
                            scrape.down_since_s = round(time.monotonic() - self._start, 1)
                        continue
                    usage = kv_usage_percent(response.text)
                    if usage is not None:
                        scrape.kv_peak_percent = max(usage, scrape.kv_peak_percent or 0.0)

    def end(self) -> tuple[Samples | None, Samples | None, str | None]:
        """Stop polling, scrape every engine again; the summed ``(before, after, None)``, or ``(None, None, why)`` when
        an engine was not read both times (its counts missing, a sum cannot be checked)."""
        self._stop.set()
        self._thread.join(POLL_S * 5)
        for scrape in self.scrapes:
            scrape.after, why = scrape_metrics(scrape.url, self.headers)
            scrape.why = scrape.why or why
        both = [s for s in self.scrapes if s.before is not None and s.after is not None]
        missing = [f"{s.name} ({s.why})" for s in self.scrapes if s not in both]
        if missing:
            return None, None, (f"summed server cross-check skipped: {', '.join(missing)} could not be scraped, so "
                                "the servers' counts lack its requests; per-replica figures in the report's replicas")
        return sum_samples([s.before for s in both if s.before]), sum_samples([s.after for s in both if s.after]), None


class EngineBusy(BenchError):
    """vLLM still held other requests after IDLE_WAIT_S: the run was not started (the message has the figure)."""


def load_now(settings: Settings) -> EngineLoad | None:
    """The requests the engines hold now (their ``/metrics``); None when none can be read or has vLLM's gauges."""
    urls = [r.url for r in replicas(settings)] if router_in_use(settings) else [engine_url(settings)]
    scrapes = [samples for samples, _ in (scrape_metrics(url, settings.vllm_headers) for url in urls) if samples]
    return engine_load(scrapes)


def left_after_stop(settings: Settings) -> str | None:
    """After a run stopped early behind the stack's router: what the engines still hold, and why; None when no
    router is in front (vLLM aborts at once) or nothing is held or readable."""
    if not front_in_use(settings):
        return None
    load = load_now(settings)
    if load is None or not load.busy:
        return None
    # measured with vllm-router 0.1.17 (docs/benchmarking.md, "A clean hand-over between runs")
    return (f"vLLM still held {load.text()} when the run stopped: vllm-router passes a client's cancel on only once a "
            "request has streamed its first token, so vLLM prefills each queued one before it drops it; the next run "
            "waits for them (IDLE_WAIT_S)")  # fmt: skip


def wait_until_idle(
    settings: Settings,
    read: Callable[[], EngineLoad | None] | None = None,
    out: Callable[[str], None] = print,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Return once the engine holds no request (at once when IDLE_WAIT_S is 0 or unreadable); the wait, s. Raises
    EngineBusy: still busy after IDLE_WAIT_S (:func:`core.engineload.busy_refusal`)."""
    limit_s = settings.idle_wait_s
    if limit_s <= 0:
        return 0.0
    reader = read or (lambda: load_now(settings))
    start = said = clock()
    load = reader()
    if load is None or idle_decision(load, 0.0, limit_s) == "go":
        return 0.0
    out(f"[INFO] vLLM is busy: {load.text()} not of this run (another client's, or a stopped run's not yet "
        f"aborted); waiting up to {limit_s:g} s for it to be idle (IDLE_WAIT_S)")  # fmt: skip
    shown = load
    while True:
        sleep(POLL_S)
        now = reader()
        waited_s = clock() - start
        if now is None or idle_decision(now, waited_s, limit_s) == "go":
            out(f"[INFO] vLLM is idle after {waited_s:.0f} s of waiting")
            return waited_s
        if idle_decision(now, waited_s, limit_s) == "refuse":
            raise EngineBusy(busy_refusal(now, waited_s))
        if now != shown or clock() - said >= SAY_EVERY_S:
            out(f"[INFO] vLLM still busy after {waited_s:.0f} s: {now.text()}")
            shown, said = now, clock()
