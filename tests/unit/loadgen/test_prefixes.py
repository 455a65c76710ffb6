"""Shared prefixes (PREFIX_LEN, PREFIX_COUNT): which request carries which prefix, the fingerprint, and the server's
prefix-cache hit rate from /metrics deltas."""

from __future__ import annotations

import json
from pathlib import Path

from core.fingerprint import fingerprint_fields
from core.report_schema import Environment
from core.requestlog import RequestLog
from core.serverview import prefix_cache_delta
from core.serverview_samples import parse_exposition
from loadgen.locust_side.process_state import RunState
from loadgen.workloads.randomdata import SEPARATOR, with_prefix
from tests.unit.loadgen.test_load_processes import plan


def _metrics(queries: float, hits: float) -> str:
    return (
        "# TYPE vllm:prefix_cache_queries counter\n"
        f'vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {queries}\n'
        "# TYPE vllm:prefix_cache_hits counter\n"
        f'vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}\n'
    )


def test_hit_rate_is_the_delta_of_vllms_two_counters() -> None:
    """1,000 → 5,000 queried tokens and 100 → 3,100 hits over the window: 3,000 of 4,000 = 75 %."""
    before, after = parse_exposition(_metrics(1000, 100)), parse_exposition(_metrics(5000, 3100))
    assert prefix_cache_delta(before, after) == (4000, 3000, 75.0)
    assert prefix_cache_delta(after, after) == (0, 0, None)  # nothing queried: no rate
    assert prefix_cache_delta({}, parse_exposition("# TYPE x counter\nx_total 1\n")) == (None, None, None)


def test_request_k_carries_prefix_k_mod_count(tmp_path: Path) -> None:
    """With 3 prefixes, request k's first message starts with prefix k mod 3 and then its own prompt; without a
    prefix file the prompts are unchanged."""
    prefixes = tmp_path / "p.json"
    prefixes.write_text(json.dumps(["AAA", "BBB", "CCC"]))
    with_file = plan(tmp_path, prefix_len_tokens=3, prefix_count=3, prefix_file=str(prefixes))
    state = RunState(with_file, RequestLog(tmp_path / "log.jsonl"))
    plain = RunState(plan(tmp_path), RequestLog(tmp_path / "log.jsonl"))
    for k in range(7):
        item, own = state.item(k), plain.item(k)
        expected = ["AAA", "BBB", "CCC"][k % 3] + SEPARATOR + own.prompt.messages[0]["content"]
        assert item.prompt.messages[0]["content"] == expected
        assert item.max_tokens == own.max_tokens
    unchanged = plain.item(7)
    assert with_prefix(unchanged, 7, []) is unchanged


def test_prefixes_join_the_fingerprint_only_when_set(tmp_path: Path) -> None:
    """A run with prefixes is another workload; a run without keeps the fingerprint fields it had before."""
    env = Environment()
    without = fingerprint_fields(plan(tmp_path), env)
    assert "prefix_len_tokens" not in without
    with_prefixes = fingerprint_fields(plan(tmp_path, prefix_len_tokens=256, prefix_count=4), env)
    assert with_prefixes["prefix_len_tokens"] == 256 and with_prefixes["prefix_count"] == 4
