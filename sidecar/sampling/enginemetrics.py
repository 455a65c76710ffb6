"""vLLM's scheduler and KV-cache gauges from its ``/metrics``: only the families the report needs are parsed (KV use
as a 0..1 fraction, running/waiting, preemptions, the pool's geometry in ``vllm:cache_config_info`` labels).
Sources: vLLM 0.32 ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``) and ``vllm/config/cache.py``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import httpx

from core.enginestate import RUNNING, WAITING
from core.serverview_samples import parse_exposition

KV_USAGE = "vllm:kv_cache_usage_perc"
PREEMPTIONS = "vllm:num_preemptions_total"
CACHE_INFO = "vllm:cache_config_info"
WANTED = (KV_USAGE, RUNNING, WAITING, PREEMPTIONS, CACHE_INFO)


@dataclass(frozen=True)
class EngineGauges:
    """One scrape: KV usage (%), request counts, cumulative preemptions and the pool's geometry (None: not exposed)."""

    kv_usage_percent: float | None
    running: float | None
    waiting: float | None
    preemptions_total: float | None
    pool_blocks: int | None = None
    block_size_tokens: int | None = None
    pool_bytes: int | None = None
    pool_tokens: int | None = None


def _int_label(labels: dict[str, str], name: str) -> int | None:
    try:
        value = int(float(labels[name]))
    except (KeyError, ValueError):
        return None
    return value if value > 0 else None


def parse_gauges(text: str) -> EngineGauges:
    """The gauges of a ``/metrics`` exposition (summed over engines; KV usage is the mean over engines). Raises
    ValueError: the kept lines are not a Prometheus exposition."""
    kept = "\n".join(line for line in text.splitlines() if line.startswith(WANTED)) + "\n"
    samples = parse_exposition(kept)

    def total(name: str) -> float | None:
        values = samples.get(name)
        return sum(values.values()) if values else None

    usage = samples.get(KV_USAGE)
    blocks = block_size = pool_bytes = tokens = None
    for labels_tuple in samples.get(CACHE_INFO, {}):
        labels = dict(labels_tuple)
        blocks = _int_label(labels, "num_gpu_blocks")
        block_size = _int_label(labels, "block_size")
        pool_bytes = _int_label(labels, "kv_cache_memory_bytes")
        tokens = _int_label(labels, "kv_cache_size_tokens") or (blocks * block_size if blocks and block_size else None)
        break
    return EngineGauges(
        kv_usage_percent=100.0 * sum(usage.values()) / len(usage) if usage else None,
        running=total(RUNNING),
        waiting=total(WAITING),
        preemptions_total=total(PREEMPTIONS),
        pool_blocks=blocks,
        block_size_tokens=block_size,
        pool_bytes=pool_bytes,
        pool_tokens=tokens,
    )


class EngineMetricsReader:
    """Scrapes ``<vllm_url>/metrics`` at most every ``interval_s`` (never raises; ``unavailable_reason`` says why
    not). ``vllm_url`` may be a function asked before each scrape (a blue/green switch moves the engine); ``get`` is
    injectable. One keep-alive client (a new one per scrape costs ≈ 28 ms CPU, docs/measured.md); :meth:`close`."""

    def __init__(
        self,
        vllm_url: str | Callable[[], str],
        interval_s: float = 1.0,
        timeout_s: float = 2.0,
        get: Callable[[str], str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self._base = vllm_url
        self._headers = headers or {}
        self.interval_s = interval_s
        self._timeout_s = timeout_s
        self._get = get or self._http_get
        self._client: httpx.Client | None = None
        self._last_t: float | None = None
        self.last: EngineGauges | None = None
        """The latest successful scrape."""
        self.unavailable_reason: str | None = "not scraped yet"

    @property
    def url(self) -> str:
        """``<vllm_url>/metrics`` of the engine now."""
        base = self._base() if callable(self._base) else self._base
        return f"{base.rstrip('/')}/metrics"

    def _http_get(self, url: str) -> str:
        if self._client is None:
            self._client = httpx.Client(timeout=self._timeout_s, headers=self._headers)
        response = self._client.get(url)
        response.raise_for_status()
        return response.text

    def close(self) -> None:
        """Close the kept connection (a later scrape opens a new one)."""
        client, self._client = self._client, None
        if client is not None:
            client.close()

    def read(self, now: float, force: bool = False) -> EngineGauges | None:
        """Gauges scraped now when ``interval_s`` has passed since the last scrape (or ``force``); else None."""
        if not force and self._last_t is not None and now - self._last_t < self.interval_s:
            return None
        self._last_t = now
        url = self.url
        try:
            gauges = parse_gauges(self._get(url))
        except (httpx.HTTPError, ValueError) as exc:
            self.unavailable_reason = f"cannot read {url}: {_why(exc)}"[:300]
            return None
        if gauges.kv_usage_percent is None:
            self.unavailable_reason = f"{url} has no {KV_USAGE} (not a vLLM server?)"
            return None
        self.unavailable_reason = None
        self.last = gauges
        return gauges


def _why(exc: Exception) -> str:
    """One line: ``HTTP 404`` for a non-200 answer, else the exception's name and first line."""
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
