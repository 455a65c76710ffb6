"""The cluster's server cross-check: recorded vLLM 0.32 scrapes as two replicas, summed and per replica."""

from __future__ import annotations

from pathlib import Path

from core.records import RequestRecord
from core.serverview import cross_check
from core.serverview_cluster import ReplicaScrapes, cluster_view
from core.serverview_samples import Samples, parse_exposition, sum_samples

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "metrics"


def load() -> tuple[dict, dict, list[RequestRecord]]:
    """The recorded 6-request run: the server's scrapes and the client's rows."""
    before = parse_exposition((FIXTURES / "vllm_0.32_before.txt").read_text())
    after = parse_exposition((FIXTURES / "vllm_0.32_after.txt").read_text())
    rows = [RequestRecord.model_validate_json(line)
            for line in (FIXTURES / "client_rows.jsonl").read_text().splitlines()]  # fmt: skip
    return before, after, rows


def twice(rows: list[RequestRecord]) -> list[RequestRecord]:
    """The rows as two replicas' clients saw them (the second copy with other request ids)."""
    return [*rows, *(r.model_copy(update={"request_id": f"{r.request_id}-b"}) for r in rows)]


def test_summed_scrapes_agree_with_all_rows() -> None:
    """Two replicas that each served the recorded run: their summed scrapes count 12 requests, exactly the client's."""
    before, after, rows = load()
    view = cross_check(sum_samples([before, before]), sum_samples([after, after]), twice(rows))
    assert view.requests_succeeded == 12 and view.disagreements == []
    assert view.generation_tokens == 2 * sum(r.output_tokens or 0 for r in rows)


def test_per_replica_counts_shares_and_agreement() -> None:
    """Each replica: 6 requests, 50 % share, its means within tolerance of the client's; imbalance 0; KV pool read."""
    before, after, rows = load()
    scrapes = [ReplicaScrapes("vllm", "http://a:1", before, after, kv_peak_percent=3.5),
               ReplicaScrapes("vllm-1", "http://a:2", before, after)]  # fmt: skip
    view = cluster_view(scrapes, twice(rows), router_policy="round_robin", router_version="0.1.17")
    assert [r.requests_succeeded for r in view.replicas] == [6, 6]
    assert [r.share_percent for r in view.replicas] == [50.0, 50.0] and view.imbalance_percent == 0.0
    assert all(r.state == "up" and r.agrees for r in view.replicas)
    first = view.replicas[0]
    assert first.kv_peak_usage_percent == 3.5 and first.kv_pool_tokens and first.client_overhead is not None
    assert view.down == [] and view.note is None


def test_replica_down_at_the_end_is_marked_and_explained() -> None:
    """A replica whose end scrape failed: state down with the reason, no counts, left out of the shares, named in
    ``down`` and in the note on the summed counts."""
    before, after, rows = load()
    scrapes = [ReplicaScrapes("vllm", "http://a:1", before, after),
               ReplicaScrapes("vllm-1", "http://a:2", before, None, why="GET /metrics failed (ConnectError)",
                              down_since_s=4.0)]  # fmt: skip
    view = cluster_view(scrapes, rows)
    dead = view.replicas[1]
    assert dead.state == "down" and dead.down_reason and "ConnectError" in dead.down_reason
    assert dead.requests_succeeded is None and dead.down_after_s == 4.0
    assert view.replicas[0].share_percent == 100.0 and view.down == ["vllm-1"] and view.imbalance_percent is None
    assert view.note is not None and "vllm-1" in view.note


def test_sum_samples_adds_label_sets() -> None:
    """Samples add per name and label set; a label set only one replica has is kept."""
    a: Samples = {"x": {(("l", "1"),): 2.0}}
    b: Samples = {"x": {(("l", "1"),): 3.0, (("l", "2"),): 1.0}, "y": {(): 4.0}}
    assert sum_samples([a, b]) == {"x": {(("l", "1"),): 5.0, (("l", "2"),): 1.0}, "y": {(): 4.0}}


def test_per_replica_agreement_allows_the_client_lag() -> None:
    """Each replica's verdict uses the same tolerance as the summed one: client TTFTs 100 ms late disagree, unless
    the client's own mean event-loop lag (40 ms) covers the excess."""
    before, after, rows = load()
    late = [r.model_copy(update={"ttft_ms": (r.ttft_ms or 0.0) + 100.0}) for r in twice(rows)]
    scrapes = [ReplicaScrapes("vllm", "http://a:1", before, after),
               ReplicaScrapes("vllm-1", "http://a:2", before, after)]  # fmt: skip
    assert not any(r.agrees for r in cluster_view(scrapes, late).replicas)
    assert all(r.agrees for r in cluster_view(scrapes, late, client_lag_ms=40.0).replicas)


def served(short: int, long: int, ttft_s: float, e2e_s: float) -> Samples:
    """A replica's scrape after serving ``short`` prompts of <= 50 tokens and ``long`` of <= 2,000 (before: empty)."""
    n = float(short + long)
    return {"vllm:time_to_first_token_seconds_sum": {(): n * ttft_s}, "vllm:time_to_first_token_seconds_count": {(): n},
            "vllm:e2e_request_latency_seconds_sum": {(): n * e2e_s}, "vllm:e2e_request_latency_seconds_count": {(): n},
            "vllm:request_success_total": {(("finished_reason", "length"),): n},
            "vllm:request_prompt_tokens_bucket": {(("le", "50.0"),): float(short), (("le", "2000.0"),): n,
                                                  (("le", "+Inf"),): n}}  # fmt: skip


def test_each_replica_is_compared_with_the_rows_of_its_prompt_lengths() -> None:
    """Round robin gave one replica the 4 short prompts (server TTFT 60 ms) and the other the 2 long ones (360 ms):
    the client's mean over all 6 rows (200 ms) is like neither; weighted by each replica's prompt-length buckets it is
    100 and 400 ms, and both agree. Without the prompt histogram the plain means are used (and the short one
    disagrees)."""
    rows = [RequestRecord(request_id=f"s{i}", started_at=0.0, ok=True, ttft_ms=100.0, e2e_ms=200.0, prompt_tokens=30)
            for i in range(4)] + [RequestRecord(request_id=f"l{i}", started_at=0.0, ok=True, ttft_ms=400.0,
                                                e2e_ms=600.0, prompt_tokens=1500) for i in range(2)]  # fmt: skip
    short, long = served(4, 0, 0.060, 0.170), served(0, 2, 0.360, 0.570)
    view = cluster_view([ReplicaScrapes("vllm", "http://a:1", {}, short),
                         ReplicaScrapes("vllm-1", "http://a:2", {}, long)], rows)  # fmt: skip
    assert [(r.client_ttft_mean_ms, r.client_e2e_mean_ms) for r in view.replicas] == [(100.0, 200.0), (400.0, 600.0)]
    assert all(r.agrees for r in view.replicas)
    bare = {k: v for k, v in short.items() if not k.startswith("vllm:request_prompt_tokens")}
    plain = cluster_view([ReplicaScrapes("vllm", "http://a:1", {}, bare)], rows).replicas[0]
    assert plain.client_ttft_mean_ms == 200.0 and plain.agrees is False
