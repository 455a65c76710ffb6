"""The client-overhead benchmark's pure parts: overhead per client, the verdict, the README section, mock metrics."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from bench_peer_agreement import (
    ClientRun,
    table_lines,
    theirs_from_result,
    verdict_lines,
    vllm_token_itl_ms,
    with_table,
)

from core.records import RequestRecord
from core.serverview import client_overhead
from core.serverview_samples import parse_exposition
from loadgen.selftest.mock_answers import MockMetrics


def run(client: str, ttft: float, itl: float, tok_s: float = 80.0, server_tok_s: float = 80.0) -> ClientRun:
    return ClientRun(client, 48, 0, tok_s, {"ttft": 1000 + ttft, "itl": 80 + itl, "e2e": 6000.0},
                     {"ttft": 1000.0, "itl": 80.0, "e2e": 5950.0}, server_tok_s, 0.2)  # fmt: skip


def test_verdict_compares_median_overheads_and_the_servers_tokens() -> None:
    """Ours passes when its median TTFT and ITL overheads are at most vLLM's and its tok/s matches the server's."""
    rounds = [[run("ours", 70, 0.4), run("vllm", 90, 0.5)], [run("vllm", 74, 0.6), run("ours", 72, 0.5)],
              [run("ours", 99, 0.3), run("vllm", 71, 0.4)]]  # fmt: skip
    lines, passed = verdict_lines(rounds)
    assert passed, lines
    worse = [[run("ours", 100, 0.4), run("vllm", 90, 0.5)]]
    lines, passed = verdict_lines(worse)
    assert not passed and "TTFT overhead (median of 1): ours +100.0 ms, vLLM's client +90.0 ms" in lines[0]
    _, passed = verdict_lines([[run("ours", 1, 0.1, tok_s=84.0), run("vllm", 90, 0.5)]])
    assert not passed  # 84 / 80 = 1.05: outside ±3 %


def test_table_shows_client_minus_server() -> None:
    """Each row gives the overhead with both means, in the order the clients ran."""
    lines = table_lines([[run("vllm", 91, 0.4), run("ours", 70.4, 0.25)]])
    assert lines[2].startswith("| 0 | `vllm bench serve` | 80.0 | 1.000 | +91 ms (1091 − 1000) | +0.40 ms (80.40 − 80.00)")
    assert lines[3].startswith("| 0 | ours |")


def test_readme_section_is_replaced_between_markers() -> None:
    """The table replaces what lies between the markers, the rest stays; without markers a clear error."""
    text = "a\n<!-- bench-peer:start -->\nold\n<!-- bench-peer:end -->\nb\n"
    assert with_table(text, "new") == "a\n<!-- bench-peer:start -->\nnew\n<!-- bench-peer:end -->\nb\n"
    with pytest.raises(ValueError, match="bench-peer"):
        with_table("no markers", "new")


def test_mock_metrics_read_back_as_vllms() -> None:
    """The mock's /metrics parses as vLLM's and its means are what was recorded (one request: 100 ms, then 20 ms)."""
    metrics = MockMetrics()
    metrics.record(10.0, [10.1, 10.12, 10.14], tokens=3, prompt_tokens=7)
    before = parse_exposition(MockMetrics().exposition().decode())
    after = parse_exposition(metrics.exposition().decode())
    row = RequestRecord(request_id="r", phase="measured", started_at=0, ok=True, ttft_ms=110.0, itl_ms=[20.0, 20.0],
                        e2e_ms=150.0, output_tokens=3)  # fmt: skip
    figures = {f.name: f for f in client_overhead(before, after, [row]).figures}
    assert figures["ttft"].added_ms == pytest.approx(10.0)
    assert figures["itl"].added_ms == pytest.approx(0.0, abs=1e-6)
    assert figures["e2e"].added_ms == pytest.approx(10.0)


def test_vllm_result_without_frames_has_no_server_figures() -> None:
    """A vLLM result read without its /metrics frames keeps the client's means and no server ones."""
    result = {"completed": 48, "failed": 0, "output_throughput": 80.0, "duration": 38.4, "mean_ttft_ms": 1000.0,
              "mean_itl_ms": 80.0, "mean_e2el_ms": 6000.0}  # fmt: skip
    r = theirs_from_result(result, None, None, None)
    assert r.client_ms == {"ttft": 1000.0, "itl": 80.0, "itl_own": 80.0, "e2e": 6000.0} and r.added_ms("ttft") is None


def test_vllm_itl_counts_one_gap_per_token() -> None:
    """vLLM's client's ITL list starts with the role chunk → first token gap (≈ 0): dropped, so 3 tokens' gaps of
    80 ms give 80 ms, where its own mean_itl_ms gives 60 ms."""
    result = {"completed": 1, "failed": 0, "output_throughput": 1.0, "duration": 1.0, "mean_itl_ms": 60.0,
              "itls": [[0.0, 0.08, 0.08, 0.08]], "errors": [""]}  # fmt: skip
    assert vllm_token_itl_ms(result) == pytest.approx(80.0)
    assert theirs_from_result(result, None, None, None).client_ms["itl_own"] == 60.0
