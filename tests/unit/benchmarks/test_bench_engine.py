"""The engine-defaults benchmark's pure parts: start-up phases from vLLM's log, compile-cache outcome, round order."""

from __future__ import annotations

import calendar
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from bench_engine_defaults import compile_cache, round_order

from engine.vllmlog.startup import start_breakdown

# A warm start of vLLM 0.32's CPU build (lines shortened), launched at 21:29:00.
LOG = b"""[INFO] Starting vLLM: python -m vllm.entrypoints.openai.api_server
(APIServer pid=1) INFO 11-30 21:29:20 [api_utils.py:286] non-default args: {}
(EngineCore pid=2) INFO 11-30 21:29:46 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: x
(Worker pid=3) INFO 11-30 21:29:59 [cpu_model_runner.py:68] Starting to load model /m...
(Worker pid=3) INFO 11-30 21:30:00 [default_loader.py:501] Loading weights took 0.50 seconds
(Worker pid=3) INFO 11-30 21:30:02 [cpu_model_runner.py:87] Warming up model for the compilation...
(Worker pid=3) INFO 11-30 21:30:15 [cpu_model_runner.py:91] Warming up done.
(EngineCore pid=2) INFO 11-30 21:30:16 [core.py:402] init engine (profile, create kv cache, warmup model) took 14.1 s
(APIServer pid=1) INFO 11-30 21:30:17 [entry.py:140] Starting vLLM server on http://127.0.0.1:8100
""".splitlines()
LAUNCH_S = calendar.timegm(time.strptime("2026-11-30 21:29:00", "%Y-%m-%d %H:%M:%S")) + time.timezone


def test_start_breakdown_splits_a_warm_start_into_phases() -> None:
    """Imports, two process spawns, weights, warm-up and the rest, in seconds between the marking lines."""
    phases = start_breakdown(LOG, LAUNCH_S)
    assert phases == {
        "imports_api_server": 20.0,
        "spawn_engine_core": 26.0,
        "spawn_worker": 13.0,
        "load_weights": 1.0,
        "to_warmup": 2.0,
        "warmup_compile": 13.0,
        "kv_cache_and_rest": 1.0,
        "api_ready": 1.0,
    }


def test_a_start_without_warm_up_has_a_zero_warm_up_phase() -> None:
    """An eager start (no warm-up lines) counts 0 s of warm-up, not a missing phase."""
    phases = start_breakdown([x for x in LOG if b"Warming" not in x], LAUNCH_S)
    assert phases["warmup_compile"] == 0.0 and phases["kv_cache_and_rest"] == 16.0


def test_compile_cache_outcomes() -> None:
    """vLLM's AOT artifact loaded, failed to load, written first, or AOT off."""
    assert compile_cache([b"[backbone] Directly load AOT compilation from path /x"]) == "aot-hit"
    assert compile_cache([b"Compiling model again due to a load failure from /x, reason: y"]) == "aot-load-failed"
    assert compile_cache([b"[backbone] saved AOT compiled function to /x", b"Warming up model"]) == "aot-written"
    assert compile_cache(LOG) == "no-aot" and compile_cache([]) == "no-compile"


def test_rounds_rotate_the_order() -> None:
    """Each variant goes first once every len(variants) rounds."""
    assert [round_order(["a", "b", "c"], i)[0] for i in range(4)] == ["a", "b", "c", "a"]
