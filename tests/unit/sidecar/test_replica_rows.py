"""The Replicas table of a report: one row per engine, a down replica with its reason, the line above it."""

from __future__ import annotations

from core.serverview_cluster import ClusterView, ReplicaView
from sidecar.render.view_rows import REPLICA_HEADER, cluster_lines, replica_rows


def test_rows_show_counts_shares_and_a_down_replica() -> None:
    """An up replica shows its counts and share; a down one DOWN with its reason and when polls failed; the line
    above names the router's version and policy, the imbalance and who was down."""
    view = ClusterView(
        router_policy="round_robin",
        router_version="0.1.17",
        replicas=[
            ReplicaView(name="vllm", url="http://h:1", state="up", requests_succeeded=30, share_percent=100.0,
                        requests_failed=0, ttft_mean_ms=80.0, e2e_mean_ms=200.0, agrees=True, kv_pool_tokens=4096,
                        kv_peak_usage_percent=1.5, preemptions=0),
            ReplicaView(name="vllm-1", url="http://h:2", state="down", down_reason="GET /metrics failed (ConnectError)",
                        down_after_s=3.0),
        ],
        down=["vllm-1"],
        note="vllm-1 could not be scraped at the end",
    )  # fmt: skip
    rows = replica_rows(view)
    assert len(rows) == 2 and all(len(r) == len(REPLICA_HEADER) for r in rows)
    assert rows[0][:4] == ["vllm (http://h:1)", "up", "30", "100.0 %"] and rows[0][7] == "yes"
    assert rows[1][1] == "DOWN (GET /metrics failed (ConnectError); polls failed from 3 s)" and rows[1][2] == "n/a"
    lines = cluster_lines(view)
    assert lines[0].startswith("vllm-router 0.1.17, policy round_robin; 2 replicas; imbalance n/a")
    assert "DOWN at the end of the run: vllm-1" in lines and view.note in lines
