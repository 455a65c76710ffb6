"""Facts read from vLLM's log (recorded lines of vLLM 0.32.0 CPU and an older format)."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

from services.sidecar.logfacts import read_log_facts

RECORDED = """\
(EngineCore pid=2630) INFO 11-29 21:55:10 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='m'
(Worker pid=2656) INFO 11-29 21:55:20 [default_loader.py:501] Loading weights took 0.01 seconds
(EngineCore pid=2630) INFO 11-29 21:55:58 [kv_cache_utils.py:2327] CPU KV cache size: 2,097,152 tokens, Maximum concurrency for 4,096 tokens per request: 512.00x
(EngineCore pid=2630) INFO 11-29 21:56:00 [core.py:402] init engine (profile, create kv cache, warmup model) took 39.09 s
garbage \x00\x01 line
INFO 05-01 12:00:00 llm_engine.py:123] old format line without brackets
"""


def test_recorded_log_facts(tmp_path: Path) -> None:
    """Version, weight loading, engine init and KV cache line come out of a recorded log."""
    log = tmp_path / "vllm.log"
    log.write_text(RECORDED)
    facts = read_log_facts(log)
    assert facts.found and facts.vllm_version == "0.32.0"
    assert facts.model_load_s == 0.01 and facts.engine_init_s == 39.09
    assert facts.kv_cache_line and "2,097,152 tokens" in facts.kv_cache_line


def test_missing_log_is_not_an_error(tmp_path: Path) -> None:
    """A missing log gives found=False, no exception."""
    assert not read_log_facts(tmp_path / "nope.log").found


def test_errors_inside_window_only(tmp_path: Path) -> None:
    """WARNING/ERROR lines are kept only when their timestamp lies in the run window."""
    now = datetime.now()
    stamp = now.strftime("%m-%d %H:%M:%S")
    log = tmp_path / "vllm.log"
    log.write_text(
        f"(APIServer pid=1) ERROR {stamp} [serving.py:1] boom\n"
        "(APIServer pid=1) WARNING 01-01 00:00:00 [x.py:1] long ago\n"
    )
    facts = read_log_facts(log, time.time() - 5, time.time() + 5)
    assert len(facts.errors_in_window) == 1 and "boom" in facts.errors_in_window[0]
    assert facts.warnings_in_window == []
