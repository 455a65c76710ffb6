"""Stats: the engine's periodic lines (old and new formats), requests.jsonl records, percentiles, slow requests."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pytest

from core.requestlog import BadLogLine, RequestLogLine
from engine.vllmlog.grammar import METRIC_FIELDS, METRICS_RE
from logtools.aggregate import (
    RELATIVE_ACCURACY,
    EngineSummary,
    RequestsRead,
    RequestStats,
    SlowRequests,
    StreamingQuantiles,
    failure_cause,
    iter_records,
)
from logtools.scan import LogScanner
from tests.synthlog import generate_vllm_log

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "logs"
REQUESTS = FIXTURES / "requests_mixed.jsonl"
ANSI = FIXTURES / "vllm_0.11_ansi_colour.log"
DOCKER_TP2 = FIXTURES / "vllm_0.11_docker_tp2_ready.log"
CRI_DEAD = FIXTURES / "vllm_0.11_k8s_cri_engine_dead.log"

NEW_GPU = (
    b"Engine 000: Avg prompt throughput: 12.3 tokens/s, Avg generation throughput: 230.1 tokens/s, Running: 16 reqs, "
    b"Waiting: 2 reqs, GPU KV cache usage: 3.2%, Prefix cache hit rate: 45.5%"
)
NEW_CPU = (
    b"Engine 000: Avg prompt throughput: 53.3 tokens/s, Avg generation throughput: 63.4 tokens/s, Running: 0 reqs, "
    b"Waiting: 0 reqs, CPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%"
)
OLD = (
    b"Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 25.3 tokens/s, Running: 1 reqs, Swapped: 0 reqs, "
    b"Pending: 3 reqs, GPU KV cache usage: 0.1%, CPU KV cache usage: 7.0%."
)


def parse_metrics(line: bytes) -> dict[str, float]:
    """One periodic stats line's numbers as :class:`EngineSummary` reads them (the last of one sample each)."""
    engine = EngineSummary()
    engine.add_rows(METRICS_RE.findall(line), None, None)
    figures = set(METRIC_FIELDS) - {"kv_cache_device"}
    return {name: value["last"] for name, value in engine.summary().items() if name in figures}


def test_new_format_periodic_line_is_parsed() -> None:
    """vLLM V1's ``Engine 000:`` line gives throughputs, running/waiting, KV cache and prefix hit rate."""
    assert parse_metrics(NEW_GPU) == {
        "prompt_tokens_per_s": 12.3,
        "generation_tokens_per_s": 230.1,
        "running_reqs": 16.0,
        "waiting_reqs": 2.0,
        "kv_cache_usage_pct": 3.2,
        "prefix_cache_hit_rate_pct": 45.5,
    }


def test_cpu_build_kv_cache_figure_is_the_kv_cache_usage() -> None:
    """The CPU build names its only KV cache ``CPU KV cache usage``: that is the KV cache figure."""
    assert parse_metrics(NEW_CPU)["kv_cache_usage_pct"] == 0.0
    assert parse_metrics(NEW_CPU)["generation_tokens_per_s"] == 63.4


def test_old_format_pending_is_waiting_and_gpu_cache_wins() -> None:
    """Old lines: Pending counts as waiting; the GPU KV cache is the figure (the CPU one there is swap space)."""
    values = parse_metrics(OLD)
    assert values["waiting_reqs"] == 3.0 and values["swapped_reqs"] == 0.0
    assert values["kv_cache_usage_pct"] == 0.1


def test_engine_summary_means_maxima_and_busy_throughput() -> None:
    """Means, maxima and last values per figure; the busy mean skips samples with nothing running."""
    rows = [METRICS_RE.findall(line)[0] for line in (NEW_GPU, NEW_CPU, NEW_GPU)]
    engine = EngineSummary()
    engine.add_rows(rows, 100.0, 120.0)
    summary = engine.summary()
    assert summary["samples"] == 3 and summary["kv_cache_device"] == "GPU"
    assert summary["generation_tokens_per_s"] == {"mean": round((230.1 * 2 + 63.4) / 3, 3), "max": 230.1, "last": 230.1}
    assert summary["busy_generation_tokens_per_s"]["mean"] == 230.1
    assert summary["running_reqs"]["max"] == 16.0


def test_generated_log_engine_lines_and_http_counts_match(tmp_path: Path) -> None:
    """Every periodic line of a generated log (old and new formats) is summarised; HTTP counts are exact."""
    facts = generate_vllm_log(tmp_path / "vllm.log", n_lines=20_000, seed=11)
    engine = EngineSummary()
    result = LogScanner(on_metrics=engine.add_rows, block_bytes=32 << 10).scan([tmp_path / "vllm.log"])
    assert engine.samples == facts.metrics_lines
    assert result.lines == facts.lines
    assert (result.http.inference_requests, result.http.status_4xx, result.http.status_5xx) == (
        facts.inference_requests,
        facts.status_4xx,
        facts.status_5xx,
    )
    summary = engine.summary()
    assert summary["first"] is not None and summary["running_reqs"]["max"] <= 16


@pytest.mark.parametrize(
    ("log", "samples", "first", "last", "http"),
    [
        (ANSI, 3, "T21:55:50", "T21:56:10", (2, 1, 0)),
        (DOCKER_TP2, 2, "T10:20:58", "T10:21:08", (2, 0, 0)),
        (CRI_DEAD, 1, "T11:00:42", "T11:00:42", (1, 0, 1)),
    ],
)
def test_engine_lines_of_coloured_and_container_logs_are_dated(
    log: Path, samples: int, first: str, last: str, http: tuple[int, int, int]
) -> None:
    """Coloured, Docker-stamped and CRI-tagged stats lines are all summarised and dated; HTTP lines are counted."""
    engine = EngineSummary()
    result = LogScanner(on_metrics=engine.add_rows).scan([log])
    summary = engine.summary()
    assert summary["samples"] == samples and summary["kv_cache_device"] == "GPU"
    assert first in summary["first"] and last in summary["last"]
    assert (result.http.inference_requests, result.http.status_4xx, result.http.status_5xx) == http


def test_engine_lines_before_since_are_left_out(tmp_path: Path) -> None:
    """With --since, periodic lines stamped before the window are not summarised."""
    log = tmp_path / "vllm.log"
    lines = []
    for minutes_ago in (50, 40, 30, 20, 10, 1):
        stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(time.time() - minutes_ago * 60))
        lines.append(f"(APIServer pid=1) INFO {stamp} [loggers.py:257] {NEW_GPU.decode()}")
    log.write_text("\n".join(lines) + "\n")
    engine = EngineSummary()
    LogScanner(on_metrics=engine.add_rows, since_s=time.time() - 25 * 60).scan([log])
    assert engine.samples == 3


def test_requests_log_bad_lines_are_counted_not_fatal() -> None:
    """Malformed lines (not JSON, wrong types, bad ts/status, truncated, binary) are counted with reasons."""
    counts = RequestsRead()
    records = list(iter_records([REQUESTS], counts))
    assert [r.request_id for r in records] == ["ui-1", "lt-1", "lt-2", "lt-3", "ui-2", "lt-4"]
    assert counts.bad_lines == 9 and counts.records == 6
    assert len(counts.bad_examples) == 5 and counts.bad_examples[0].startswith("requests_mixed.jsonl:3: not JSON")


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b'{"ts": "2026-11-29T22:00:00Z", "status": "ok", "total_ms": "fast"}', "total_ms"),
        (b'{"ts": "2026-11-29T22:00:00Z", "status": "done"}', "status"),
        (b'{"status": "ok"}', "ts"),
        (b'{"ts": "2026-11-29T22:00:00Z", "status": "ok", "completion_tokens": 1.5}', "completion_tokens"),
        (b'{"ts": "2026-11-29T22:00:00Z", "status": "ok", "ttft_ms": NaN}', "ttft_ms"),
    ],
)
def test_record_validation_names_the_bad_field(line: bytes, reason: str) -> None:
    """A record with a mistyped field is rejected with that field's name in the message."""
    with pytest.raises(BadLogLine, match=reason):
        RequestLogLine.parse(line)


def test_request_stats_match_statistics_module() -> None:
    """Counts, error rate, percentiles (statistics.quantiles, within the sketch's bound) and tokens/s."""
    stats = RequestStats()
    for record in iter_records([REQUESTS], RequestsRead()):
        stats.add(record)
    summary = stats.summary()
    assert (summary["requests"], summary["ok"], summary["errors"]) == (6, 4, 2)
    assert summary["error_rate"] == pytest.approx(2 / 6, abs=1e-4)
    assert summary["by_source"] == {"loadtest": 4, "ui": 2}
    ok_totals = [900.0, 1500.0, 2500.0, 700.0]
    cuts = statistics.quantiles(ok_totals, n=100, method="inclusive")
    assert summary["total_ms"]["p50"] == pytest.approx(cuts[49], rel=RELATIVE_ACCURACY)
    assert summary["total_ms"]["max"] == 2500.0 and summary["total_ms"]["mean"] == 1400.0
    assert summary["completion_tokens"] == 100 + 128 + 128 + 64
    # window: from the first start (the 30 s timeout that ended 22:03:19 began 22:02:49) to the last end (22:03:21)
    assert summary["window_s"] == pytest.approx(32.0)
    assert summary["completion_tokens_per_s"] == pytest.approx(420 / summary["window_s"], rel=1e-3)
    assert summary["top_errors"][0]["error"] in ("timeout after # ms", "vLLM is not reachable")


def test_percentiles_of_one_and_none() -> None:
    """One value is every percentile; no values give None."""
    one = StreamingQuantiles()
    one.add(42.0)
    assert one.summary() == {
        "p50": 42.0, "p90": 42.0, "p95": 42.0, "p99": 42.0, "mean": 42.0, "max": 42.0, "percentile_error_pct": 0.5
    }  # fmt: skip
    assert StreamingQuantiles().summary() is None


@pytest.mark.parametrize(
    "shape",
    ["lognormal", "uniform", "with_zeros_and_ties", "two_clusters"],
)
def test_sketch_percentiles_are_within_the_stated_bound_of_exact_ones(shape: str) -> None:
    """p50/p90/p95/p99 of 200,000 latencies lie within 0.5 % of statistics.quantiles' exact (inclusive) values."""
    import random

    rng = random.Random(7)
    n = 200_000
    values = {
        "lognormal": [rng.lognormvariate(6.5, 1.2) for _ in range(n)],
        "uniform": [rng.uniform(1.0, 60_000.0) for _ in range(n)],
        "with_zeros_and_ties": [float(rng.choice((0, 0, 5, 5, 5, 120, 4000))) for _ in range(n)],
        "two_clusters": [rng.gauss(40.0, 2.0) if rng.random() < 0.9 else rng.gauss(30_000.0, 500.0) for _ in range(n)],
    }[shape]
    sketch = StreamingQuantiles()
    for value in values:
        sketch.add(value)
    summary = sketch.summary()
    assert summary is not None
    exact = statistics.quantiles(values, n=100, method="inclusive")
    for p in (50, 90, 95, 99):
        assert summary[f"p{p}"] == pytest.approx(exact[p - 1], rel=RELATIVE_ACCURACY, abs=1e-3), p
    assert summary["max"] == max(values) and summary["mean"] == pytest.approx(statistics.fmean(values), abs=1e-3)


def test_sketch_memory_does_not_grow_with_the_count() -> None:
    """After 10,000 values, 90,000 more of the same spread add almost no memory (bounded state, not a list)."""
    import random
    import tracemalloc

    rng = random.Random(3)
    tracemalloc.start()
    try:
        sketch = StreamingQuantiles()
        for _ in range(10_000):
            sketch.add(rng.lognormvariate(6.0, 1.0))
        after_10k = tracemalloc.get_traced_memory()[0]
        for _ in range(90_000):
            sketch.add(rng.lognormvariate(6.0, 1.0))
        grown_bytes = tracemalloc.get_traced_memory()[0] - after_10k
    finally:
        tracemalloc.stop()
    assert grown_bytes < 64 * 1024  # a list of the values would have grown by 90,000 x 8 bytes = 720 KB


def test_slow_requests_keeps_the_slowest_finished_and_counts_all() -> None:
    """Finished requests over the threshold: all counted, the N slowest kept, slowest first; the 30 s time-out and
    the failed request are no slow requests, counted apart by cause."""
    slow = SlowRequests(threshold_ms=800.0, keep=2)
    for record in iter_records([REQUESTS], RequestsRead()):
        slow.add(record)
    summary = slow.summary()
    assert (summary["requests"], summary["finished"], summary["slow"]) == (6, 4, 3)
    assert [r["request_id"] for r in summary["slowest"]] == ["lt-2", "lt-1"]
    assert summary["not_finished_by_cause"] == {"timeout": 1, "vLLM is not reachable": 1}


@pytest.mark.parametrize(
    ("status", "error", "cause"),
    [
        ("cancelled", "incomplete: cancelled by the end of the run (GreenletExit)", "cancelled"),
        ("cancelled", "cancelled: the chat session disconnected", "cancelled"),
        ("error", "timeout: no chunk within 300 s", "timeout"),
        ("error", "timeout after 300 s", "timeout"),
        ("error", "http_status: HTTP 400 max_tokens too large", "http_status"),
        ("error", "backend down: http://127.0.0.1:8100 not reachable", "backend down"),
        ("error", "HTTP 500: Internal Server Error", "HTTP 500"),
        ("error", None, "error"),
        ("error", "x" * 80, "error"),
    ],
)
def test_a_request_that_did_not_finish_is_named_by_its_cause(status: str, error: str | None, cause: str) -> None:
    """Benchmark rows (``<error kind>: <message>``) and UI lines (the UI's causes) both reduce to a short cause."""
    record = RequestLogLine(ts="2026-11-29T22:03:19+00:00", source="x", request_id="r", model=None,
                            prompt_tokens=None, completion_tokens=None, ttft_ms=None, total_ms=1.0,
                            status=status, error=error)  # type: ignore[arg-type]  # fmt: skip
    assert failure_cause(record) == cause


def test_requests_since_filters_by_end_time(tmp_path: Path) -> None:
    """Records that ended before --since are counted as outside the window, not as bad."""
    path = tmp_path / "requests.jsonl"
    now = time.time()
    rows = []
    for age_s in (7200, 3000, 60):
        ts = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(now - age_s))
        rows.append(json.dumps({"ts": ts, "source": "ui", "request_id": str(age_s), "status": "ok", "total_ms": 5}))
    path.write_text("\n".join(rows) + "\n")
    counts = RequestsRead()
    kept = [r.request_id for r in iter_records([path], counts, since_s=now - 3600)]
    assert kept == ["3000", "60"] and counts.before_since == 1 and counts.bad_lines == 0


def test_request_log_truncated_while_read_is_reported(tmp_path: Path) -> None:
    """A requests.jsonl truncated mid-read (copytruncate): records read so far count, the shrink is in the facts."""
    import os

    path = tmp_path / "requests.jsonl"
    row = {"ts": "2026-11-29T22:00:00Z", "source": "ui", "request_id": "r", "status": "ok", "total_ms": 5.0}
    path.write_text((json.dumps(row) + "\n") * 2000)
    counts = RequestsRead()
    records = iter_records([path], counts, block_bytes=8192)
    stats = RequestStats()
    stats.add(next(records))
    os.truncate(path, 0)
    for record in records:
        stats.add(record)
    assert 0 < counts.records < 2000 and counts.bad_lines == 0 and stats.total == counts.records
    assert counts.read.shrunk_files == [str(path)] and "shrank while being read" in counts.read.problems[0]
