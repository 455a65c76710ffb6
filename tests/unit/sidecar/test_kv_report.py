"""vLLM's KV cache in the report: gauges scraped from /metrics, window peaks, preemptions, the KV-bound verdict."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from core.report_resources import kv_bound_reason
from core.report_schema import KvCacheStats, Resources
from core.serverview import cross_check
from core.serverview_samples import parse_exposition
from core.stats import RunMetrics
from loadgen.terminal.summary import format_summary
from sidecar.render.page_sections import report_sections
from sidecar.render.pages import write_markdown
from sidecar.reports.builder import build_metrics
from sidecar.sampling.enginemetrics import EngineGauges, EngineMetricsReader, parse_gauges
from sidecar.sampling.resources import Sample, kv_cache_stats, summarise
from sidecar.sampling.sampler import Sampler, WindowRegistry
from tests.unit.sidecar.test_sidecar_store import report

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "metrics"
AFTER = (FIXTURES / "vllm_0.32_after.txt").read_text()


def gauges(usage: float, running: float = 1, waiting: float = 0, preempted: float = 0) -> EngineGauges:
    return EngineGauges(usage, running, waiting, preempted, 455, 128, 1024**3, 58_240)


def test_recorded_vllm_metrics_give_pool_and_usage() -> None:
    """vLLM 0.32's /metrics (CPU build, 4 GiB pool): 1,820 blocks of 128 = 232,960 tokens, usage and queue gauges."""
    g = parse_gauges(AFTER)
    assert (g.pool_blocks, g.block_size_tokens, g.pool_tokens, g.pool_bytes) == (1820, 128, 232_960, 4 * 1024**3)
    assert (g.kv_usage_percent, g.running, g.waiting, g.preemptions_total) == (0.0, 0.0, 0.0, 0.0)


def test_usage_fraction_becomes_percent() -> None:
    """vllm:kv_cache_usage_perc is a 0..1 fraction ("1 means 100 percent"); the report uses percent."""
    text = 'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.375\nvllm:num_requests_waiting{engine="0"} 3.0\n'
    g = parse_gauges(text)
    assert g.kv_usage_percent == 37.5 and g.waiting == 3.0 and g.pool_tokens is None


def test_reader_scrapes_at_its_own_interval_and_says_why_not() -> None:
    """The reader scrapes at most every interval (unless forced) and keeps a reason when vLLM cannot be read."""
    calls: list[str] = []

    def get(url: str) -> str:
        calls.append(url)
        if len(calls) == 3:
            raise httpx.ConnectError("refused")
        return AFTER

    reader = EngineMetricsReader("http://127.0.0.1:1/", interval_s=1.0, get=get)
    assert reader.read(100.0) is not None and reader.unavailable_reason is None
    assert reader.read(100.5) is None and len(calls) == 1
    assert reader.read(100.6, force=True) is not None and len(calls) == 2
    assert reader.read(102.0) is None and "ConnectError" in (reader.unavailable_reason or "")
    assert calls[0] == "http://127.0.0.1:1/metrics" and reader.last is not None


def test_a_server_without_metrics_is_one_short_line() -> None:
    """A server answering 404 on /metrics (the mock, other servers): ``cannot read …/metrics: HTTP 404``, one line,
    not httpx's two-line text with a link."""

    def get(url: str) -> str:
        request = httpx.Request("GET", url)
        httpx.Response(404, request=request).raise_for_status()
        return ""

    reader = EngineMetricsReader("http://x", get=get)
    assert reader.read(0.0) is None and reader.unavailable_reason == "cannot read http://x/metrics: HTTP 404"


def test_a_server_without_vllm_gauges_is_named() -> None:
    """Another Prometheus endpoint (no vllm:kv_cache_usage_perc) gives None and a reason, not zeros."""
    reader = EngineMetricsReader("http://x", get=lambda url: "process_cpu_seconds_total 1.0\n")
    assert reader.read(0.0) is None and "not a vLLM" in (reader.unavailable_reason or "")


def test_window_peaks_of_the_kv_cache() -> None:
    """Peak and mean usage, running/waiting peaks and the pool over the samples that carried vLLM's gauges."""
    samples = [
        Sample(t=1.0, engine=gauges(10.0, running=2)),
        Sample(t=1.5),  # a tick without a scrape
        Sample(t=2.0, engine=gauges(90.0, running=8, waiting=3)),
        Sample(t=3.0, engine=gauges(50.0, running=4)),
    ]
    kv = summarise(samples, start=0.0).kv_cache
    assert kv is not None
    assert (kv.usage_peak_percent, kv.usage_mean_percent, kv.samples) == (90.0, 50.0, 3)
    assert (kv.requests_running_peak, kv.requests_waiting_peak) == (8, 3)
    assert (kv.pool_gb, kv.pool_blocks, kv.pool_tokens) == (1.0, 455, 58_240)


def test_no_gauges_gives_the_reason_or_nothing() -> None:
    """Without any scrape the KV section says why (vLLM unreachable), or is absent when nothing is known."""
    assert kv_cache_stats([Sample(t=1.0)]) is None
    stats = kv_cache_stats([Sample(t=1.0)], "cannot read http://x/metrics")
    assert stats is not None and stats.samples == 0 and stats.unavailable_reason


def test_timeline_carries_kv_usage_and_queue() -> None:
    """Every timeline point has vLLM's KV usage and running/waiting requests next to memory."""
    point = summarise([Sample(t=5.0, engine=gauges(42.0, running=6, waiting=1))], start=4.0).timeline[0]
    assert (point.t_s, point.kv_cache_usage_percent, point.requests_running, point.requests_waiting) == (
        1.0,
        42.0,
        6,
        1,
    )


def test_sampler_scrapes_vllm_when_due_and_when_forced() -> None:
    """The sampler stores vLLM's gauges on the ticks the reader is due, and on a forced tick (window edges)."""
    reader = EngineMetricsReader("http://x", interval_s=3600, get=lambda url: AFTER)
    sampler = Sampler(None, pid_source=lambda: None, interval_s=10, engine=reader)
    assert sampler.sample_once().engine is not None
    assert sampler.sample_once().engine is None
    assert sampler.sample_once(force_engine=True).engine is not None


def test_opening_a_window_takes_a_sample() -> None:
    """A sampling window starts with a sample (the on_start hook), so its first KV reading is at its start."""
    taken: list[int] = []
    registry = WindowRegistry(lambda start, end: Resources(), on_start=lambda: taken.append(1))
    registry.start()
    assert taken == [1]


def test_preemptions_are_counted_over_the_window() -> None:
    """server.preemptions is the vllm:num_preemptions_total delta between the two scrapes."""
    before = parse_exposition(AFTER)
    after = parse_exposition(
        AFTER.replace(
            'vllm:num_preemptions_total{engine="0",model_name="ernie-4.5-0.3b-synthetic"} 0.0',
            'vllm:num_preemptions_total{engine="0",model_name="ernie-4.5-0.3b-synthetic"} 7.0',
        )
    )
    assert cross_check(before, after, []).preemptions == 7
    assert cross_check(before, before, []).preemptions == 0
    assert cross_check({}, {}, []).preemptions is None


@pytest.mark.parametrize(
    ("kv", "preemptions", "needle"),
    [
        (KvCacheStats(usage_peak_percent=60.0, requests_waiting_peak=0, samples=3), 0, None),
        (KvCacheStats(usage_peak_percent=99.0, requests_waiting_peak=0, samples=3), 0, None),
        (
            KvCacheStats(usage_peak_percent=97.0, requests_waiting_peak=5, pool_tokens=58_240, samples=3),
            0,
            "97% full of 58,240 tokens with up to 5",
        ),
        (KvCacheStats(usage_peak_percent=100.0, samples=3), 12, "preempted 12 request(s)"),
        (None, 3, "preempted 3"),
        (None, None, None),
    ],
)
def test_kv_bound_verdict(kv: KvCacheStats | None, preemptions: int | None, needle: str | None) -> None:
    """KV-bound: preemptions, or a pool ≥ 95 % full while requests waited; a full pool alone is not."""
    reason = kv_bound_reason(kv, preemptions)
    assert (reason is None) if needle is None else (reason is not None and needle in reason)


def _with_kv(kv: KvCacheStats, preemptions: int) -> object:
    base = report()
    resources = Resources(vllm_rss_peak_gb=1.0, kv_cache=kv)
    server = cross_check({}, {"vllm:num_preemptions_total": {(): float(preemptions)}}, [])
    run = RunMetrics.model_validate(base.metrics.model_dump(include=set(RunMetrics.model_fields)))
    metrics = build_metrics(run, resources, server.preemptions)
    return base.model_copy(update={"resources": resources, "metrics": metrics, "server": server})


def test_summary_and_markdown_state_the_kv_cache() -> None:
    """The terminal summary and the Markdown give the pool, peak usage and preemptions, and say not KV-bound."""
    kv = KvCacheStats(
        pool_gb=1.0,
        pool_tokens=58_240,
        usage_peak_percent=37.0,
        requests_running_peak=8,
        requests_waiting_peak=0,
        samples=20,
    )
    r = _with_kv(kv, 0)
    lines = format_summary(r, "/tmp/r.json")  # type: ignore[arg-type]
    line = next(x for x in lines if x.startswith("[RESULT] KV cache"))
    assert "1.00 GB (58,240 tokens): peak 37% used, up to 8 running / 0 waiting, 0 preemptions" in line
    assert "not KV-bound" in line and not any(x.startswith("[WARN] KV-bound") for x in lines)
    md = write_markdown(report_sections(r, []))  # type: ignore[arg-type]
    assert "| KV cache pool / peak used | 1.00 GB (58,240 tokens), peak 37 % used" in md
    assert r.metrics.kv_cache_gb == 1.0 and r.metrics.kv_cache_usage_peak_percent == 37.0  # type: ignore[attr-defined]


def test_summary_warns_when_the_run_was_kv_bound() -> None:
    """Preemptions in the window: the summary says KV-bound and what to change."""
    kv = KvCacheStats(
        pool_gb=0.1,
        pool_tokens=5_760,
        usage_peak_percent=100.0,
        requests_running_peak=3,
        requests_waiting_peak=5,
        samples=20,
    )
    lines = format_summary(_with_kv(kv, 4), "/tmp/r.json")  # type: ignore[arg-type]
    assert any("KV-bound: vLLM preempted 4 request(s)" in x for x in lines)
    assert any(x.startswith("[WARN] KV-bound run") and "KV_CACHE_GB" in x for x in lines)


def test_reader_keeps_one_connection_and_follows_the_engine_to_a_new_port() -> None:
    """Scrapes reuse one keep-alive connection (a client per scrape cost ≈ 28 ms of CPU each); when the engine moves
    (a blue/green switch: another port), the next scrape reaches the new one; ``close`` ends the connection."""
    import http.server
    import threading

    connections: list[int] = []

    class Metrics(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            connections.append(self.connection.getsockname()[1])

        def do_GET(self) -> None:
            body = AFTER.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    def serve() -> http.server.ThreadingHTTPServer:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    blue, green = serve(), serve()
    engine = {"url": f"http://127.0.0.1:{blue.server_address[1]}"}
    reader = EngineMetricsReader(lambda: engine["url"], interval_s=1.0)
    try:
        for t in range(5):
            assert reader.read(float(t), force=True) is not None, reader.unavailable_reason
        assert connections == [blue.server_address[1]]
        engine["url"] = f"http://127.0.0.1:{green.server_address[1]}"
        assert reader.read(10.0, force=True) is not None and reader.read(11.0, force=True) is not None
        assert connections == [blue.server_address[1], green.server_address[1]]
    finally:
        reader.close()
        for server in (blue, green):
            server.shutdown()
            server.server_close()
    assert reader._client is None


def test_a_window_across_a_model_switch_keeps_the_pool_of_the_engine_it_began_on() -> None:
    """A run during which ``./start_vllm.sh`` switched models: the KV pool reported is the first engine's (the run's
    model), not the one that serves at the end (a fresh user saw the new tiny model's 2,097,152-token pool in an
    ERNIE run's report)."""
    ernie = gauges(10.0)  # 455 blocks of 128
    tiny = EngineGauges(5.0, 1, 0, 0, 16_384, 128, 1024**3, 2_097_152)
    kv = kv_cache_stats([Sample(t=1.0, engine=ernie), Sample(t=2.0, engine=tiny), Sample(t=3.0, engine=tiny)])
    assert kv is not None and (kv.pool_blocks, kv.pool_tokens) == (455, 58_240)


def test_a_measured_window_longer_than_the_duration_says_why() -> None:
    """DURATION 60 s and a measured window of 83.5 s (the answers in flight at the end drain): the report's row says
    what the window is, so the two figures do not look like a contradiction."""
    r = report()
    r = r.model_copy(update={"config": r.config.model_copy(update={"duration_s": 60.0}),
                             "metrics": r.metrics.model_copy(update={"duration_s": 83.5})})  # fmt: skip
    assert "83.5 s (first request sent to last answer; DURATION 60 s plus the drain)" in write_markdown(report_sections(r, []))
    r = r.model_copy(update={"metrics": r.metrics.model_copy(update={"duration_s": 60.4})})
    assert "DURATION 60 s plus the drain" not in write_markdown(report_sections(r, []))
