"""Shared prefixes against the real CPU vLLM: PREFIX_LEN=256 PREFIX_COUNT=4 makes vLLM's prefix cache hit, the
report carries the hit rate from /metrics, and `make compare` names the difference."""

from __future__ import annotations

import pytest

from tests.integration.conftest import Stack
from tests.integration.test_benchmark_modes import report_of

pytestmark = pytest.mark.integration


def test_shared_prefixes_raise_the_prefix_cache_hit_rate(stack: Stack) -> None:
    """The same random-prompt run without and with 4 shared 256-token prefixes: the hit rate rises from near 0 to
    well above it (about 3 of 4 requests find their prefix cached), both in the reports; compare lists the knob."""
    knobs = {"DATASET": "random", "RANDOM_INPUT_LEN": "64", "REQUESTS": "16", "WARMUP": "0", "CONCURRENCY": "2",
             "MAX_TOKENS": "4", "IGNORE_EOS": "1", "SEED": "7"}  # fmt: skip
    stack.wait_until_idle()
    plain = stack.make("benchmark", timeout_s=600, **knobs)
    assert plain.returncode == 0, plain.stdout[-3000:] + plain.stderr[-3000:]
    stack.wait_until_idle()
    shared = stack.make("benchmark", timeout_s=600, PREFIX_LEN="256", PREFIX_COUNT="4", **knobs)
    assert shared.returncode == 0, shared.stdout[-3000:] + shared.stderr[-3000:]
    a, b = report_of(plain.stdout), report_of(shared.stdout)
    rate_a = a["server"]["prefix_cache_hit_rate_percent"]
    rate_b = b["server"]["prefix_cache_hit_rate_percent"]
    print(f"\n[prefix] hit rate without {rate_a:.1f}%, with 4 x 256-token prefixes {rate_b:.1f}%")
    assert rate_a is not None and rate_b is not None
    assert rate_a < 10.0 and rate_b > 40.0 and rate_b > rate_a + 30.0, (rate_a, rate_b)
    assert b["config"]["prefix_len_tokens"] == 256 and b["config"]["prefix_count"] == 4
    assert "[SERVER] Prefix cache: " in shared.stdout
    prompt_a = a["metrics"]["prompt_tokens_total"] / a["metrics"]["requests_ok"]
    prompt_b = b["metrics"]["prompt_tokens_total"] / b["metrics"]["requests_ok"]
    assert abs(prompt_b - prompt_a - 256 - 1) <= 2, (prompt_a, prompt_b)  # the prefix plus the blank line's token
    compared = stack.make("compare", f"A={a['report_id']}", f"B={b['report_id']}", timeout_s=120)
    assert compared.returncode == 0, compared.stdout[-3000:] + compared.stderr[-3000:]
    assert "prefix_len_tokens: unset -> 256" in compared.stdout, compared.stdout
    assert "prefix-cache hit rate" in compared.stdout, compared.stdout
