"""One measured run: warmup, then Locust between two ``/metrics`` scrapes inside a sidecar sampling window (under the
profiler with PROFILE=1: :mod:`loadgen.orchestrate.profiling`); rows are appended to
``logs/runs/<run id>.requests.jsonl`` as they come.

The capacity check: whether the engine can answer a planned closed-loop load within REQUEST_TIMEOUT_S, judged from
the warm-up. ``concurrency`` users starting at once wait, the last of them, about ``concurrency × prompt_tokens /
prefill_tok_per_s`` s for a first token; the warm-up's ``at_once`` requests give the prefill rate as
``sum(prompt tokens) / max(TTFT)`` (a lower bound). Timed-out requests are replaced by new prompts to prefill, so such
a run ends with no success at all. Measurements on ERNIE-4.5-0.3B (AVX-512 ≈ 330, AVX2 bf16 41 prompt tok/s):
docs/benchmarks.md.
"""

from __future__ import annotations

import json
import math
import queue
import threading
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path

from core.clientview import ProcessLoad
from core.enginestate import EngineControl
from core.records import RequestRecord
from core.replicas import engine_url, serving_engine, switch_marker
from core.report_schema import BenchmarkConfig, causes_text, error_summary
from core.serverview_cluster import ReplicaScrapes
from core.serverview_samples import Samples
from core.settings import Settings
from loadgen.errors import OverCapacity, WarmupFailed, WarmupInterrupted
from loadgen.locust_side.user_actions import payload_for
from loadgen.orchestrate.locust_run import INTERRUPTED, SERVER_DOWN, ServerDown, read_process_loads, run_locust
from loadgen.orchestrate.profiling import TRACE_SUFFIXES, disable_profiler, enable_profiler, profiler_post
from loadgen.orchestrate.replica_watch import ReplicaWatch, left_after_stop, scrape_metrics, wait_until_idle
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
