"""vLLM's ``/metrics`` around the measured window: one server (:func:`scrape_metrics`), or every engine behind the
router (:class:`ReplicaWatch`: scraped before and after, polled for KV usage and liveness during it); before a run,
a wait up to IDLE_WAIT_S for vLLM to be idle (other requests would count in its figures), or a refusal."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx

from core.enginestate import EngineLoad, busy_refusal, engine_load, idle_decision
from core.replicas import Replica, engine_url, front_in_use, replicas, router_in_use
from core.serverview_cluster import ReplicaScrapes
from core.serverview_samples import Samples, parse_exposition, sum_samples
from core.settings import Settings
from loadgen.errors import BenchError

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
    EngineBusy: still busy after IDLE_WAIT_S (:func:`core.enginestate.busy_refusal`)."""
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
