"""make compare of two sweeps that differ in one vLLM flag, on the real CPU vLLM.

Runs late (``stack_order(1)``): it restarts vLLM with ``--max-num-seqs 2`` (``VLLM_EXTRA_ARGS`` through ``./start_vllm.sh``) and
leaves it so; the next restart without the variable (the model-switch test) serves the stack's own arguments.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.conftest import TEST_ENGINE_ARGS, Stack
from tests.integration.test_sweep import series_of

pytestmark = [pytest.mark.integration, pytest.mark.stack_order(1)]


def test_compare_lists_the_differing_vllm_flag_first_and_shows_both_curves(stack: Stack) -> None:
    """Two concurrency sweeps, the second after restarting vLLM with --max-num-seqs 2: `make compare A= B=` lists
    that flag as the first difference, pairs both points and writes a page with both curves."""
    sweep = {"SWEEP": "concurrency:1,4", "REQUESTS": "8", "MAX_TOKENS": "16", "WARMUP": "1", "COOLDOWN_S": "0"}
    first = stack.make("sweep", timeout_s=600, **sweep)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    switched = stack.python(
        "-m", "stack.engine_switch", timeout_s=900, VLLM_EXTRA_ARGS=f"{TEST_ENGINE_ARGS} --max-num-seqs 2"
    )
    assert switched.returncode == 0, switched.stdout[-3000:] + switched.stderr[-3000:]
    state = json.loads(stack.engine_state_file.read_text())
    assert state["argv"][-2:] == ["--max-num-seqs", "2"]
    second = stack.make("sweep", timeout_s=600, **sweep)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    a, b = series_of(first.stdout)["series_id"], series_of(second.stdout)["series_id"]
    compared = stack.make("compare", f"A={a}", f"B={b}", timeout_s=120)
    assert compared.returncode == 0, compared.stdout[-3000:] + compared.stderr[-3000:]
    diffs = [line for line in compared.stdout.splitlines() if line.startswith("[DIFF]")]
    assert diffs[0] == "[DIFF] vLLM flags: --max-num-seqs: unset (vLLM's default) -> 2", compared.stdout
    paired = [line for line in compared.stdout.splitlines() if line.startswith("[COMPARE] concurrency")]
    assert len(paired) == 2 and "throughput" in paired[0]
    path = Path(compared.stdout.split("[REPORT] Comparison saved to ")[1].split()[0])
    comparison = json.loads(path.read_text())
    assert [len(comparison[side]["points"]) for side in ("a", "b")] == [2, 2]
    page = (path.parent / comparison["html_file"]).read_text()
    assert "--max-num-seqs" in page and '<img alt="Latency against load"' in page  # one plot, both curves
