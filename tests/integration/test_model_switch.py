"""`VLLM_MODEL_PATH=<dir> ./start_vllm.sh` switches the served model in local mode beside the running engine while a
stream of 2 requests/s runs: the new engine starts behind the router, and not one request fails or is cut — there,
through a new engine that fails to start (a typo in VLLM_EXTRA_ARGS: argparse's line, the running engine serves on,
exit 1), and back. Only vLLM's programs change; the chat UI keeps its process and its header follows (real browser);
the sidecar's engine follows. Runs late (``stack_order(2)``) on the session stack: vLLM starts three times in one
test, so the way back after the failed start is also the way back from the other model."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import httpx
import pytest
from playwright.sync_api import Browser

from core.settings import PROJECT_ROOT
from engine.local_control import Supervisor
from tests.integration.chat_page import log_in
from tests.integration.conftest import Stack
from tests.integration.test_ui_browser import browser  # noqa: F401  (the module-scoped Chromium fixture)

sys.path.insert(0, str(PROJECT_ROOT / "benchmarks"))

from bench_switch import Answer, Stream, figures

pytestmark = [pytest.mark.integration, pytest.mark.stack_order(2)]
TINY_DIR = PROJECT_ROOT / "models" / "tiny"  # the synthetic tiny model's folder, served as "tiny"
RATE_PER_S = 2.0


def start_vllm(stack: Stack, **env: str) -> subprocess.CompletedProcess[str]:
    """``./start_vllm.sh`` with ``env`` (the stack's MODEL left out, as for a user who exports VLLM_MODEL_PATH)."""
    base = {k: v for k, v in stack.env.items() if k != "MODEL"}
    return subprocess.run([str(PROJECT_ROOT / "start_vllm.sh")], cwd=PROJECT_ROOT, env={**base, **env},
                          capture_output=True, text=True, timeout=900)  # fmt: skip


def served(stack: Stack) -> list[str]:
    models = httpx.get(f"{stack.vllm_url}/v1/models", timeout=10, headers=stack.vllm_headers).json()
    return [m["id"] for m in models["data"]]


def pids(stack: Stack) -> dict[str, int]:
    states = Supervisor(stack.run_dir).states() or {}
    return {name: int(info["pid"]) for name, info in states.items()}


def others(pid_of: dict[str, int]) -> dict[str, int]:
    """The pids of every program but vLLM's two slots."""
    return {k: v for k, v in pid_of.items() if not k.startswith("vllm")}


def lost(answers: list[Answer]) -> list[str]:
    """What went wrong with the requests that failed or were cut (empty: none)."""
    return [f"{'cut' if a.cut else 'failed'} at {a.sent_s:.1f}: {a.error}" for a in answers if a.failed or a.cut]


def output(run: subprocess.CompletedProcess[str]) -> str:
    return run.stdout[-3000:] + run.stderr[-3000:]


def test_a_model_that_cannot_be_served_changes_nothing(stack: Stack) -> None:
    """A folder that is not a model is refused (exit 2) before vLLM is touched."""
    before = pids(stack)
    run = start_vllm(stack, VLLM_MODEL_PATH=str(PROJECT_ROOT / "docs"))
    assert run.returncode == 2 and "docs" in run.stderr, run.stdout + run.stderr
    assert pids(stack) == before


def test_start_vllm_switches_under_a_stream_a_typo_is_reported_and_the_way_back_works(
    stack: Stack, browser: Browser  # noqa: F811
) -> None:
    """2 requests/s throughout. The switch to ``tiny``: only vLLM's programs change, /v1/models, the UI header and
    the sidecar's engine (the other slot, serving tiny) follow. ``VLLM_EXTRA_ARGS='--max-num-seqz 4' ./start_vllm.sh``: exit 1
    naming argparse's error line, the running engine serves on (``make status`` and ``GET /startup`` say ready,
    serving tiny). ``./start_vllm.sh`` comes back to the stack's model, the UI keeping its process. 0 failed, 0 cut;
    the longest gap between successful first tokens at most 2 s plus the slowest first token."""
    before, serving = pids(stack), httpx.get(f"{stack.sidecar_url}/startup", timeout=30).json()["engine"]["program"]
    page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    page.set_default_timeout(120_000)
    log_in(page, stack.ui_url)
    page.get_by_text("Model: ernie-tiny-synthetic").wait_for()
    stream = Stream(stack.vllm_url, stack.vllm_headers, RATE_PER_S, max_tokens=16).start()
    try:
        time.sleep(3)
        there_begun = time.time()
        run = start_vllm(stack, VLLM_MODEL_PATH=str(TINY_DIR))
        assert run.returncode == 0, output(run)
        assert "serving tiny" in run.stdout and "the swap refused or cut no request" in run.stdout, run.stdout[-3000:]
        assert others(pids(stack)) == others(before)
        assert served(stack) == ["tiny"]
        page.get_by_text(re.compile(r"Model:\s*tiny(\s|$)")).wait_for()  # no reload: the header re-probes
        engine = httpx.get(f"{stack.sidecar_url}/startup", timeout=30).json()["engine"]
        assert engine["program"] != serving and engine["served_model"] == "tiny", engine  # the other slot

        typo_begun = time.time()
        typo_run = start_vllm(stack, VLLM_EXTRA_ARGS="--max-num-seqz 4")
        typo = "error: unrecognized arguments: --max-num-seqz"
        assert typo_run.returncode == 1 and typo in typo_run.stderr, output(typo_run)
        assert "the running one keeps serving" in typo_run.stderr and "Last lines of" in typo_run.stderr
        assert served(stack) == ["tiny"]
        status = stack.make("status")
        assert status.returncode == 0 and "vLLM startup: ready" in status.stdout, status.stdout
        assert "vLLM serves tiny (" in status.stdout and "KV cache size" in status.stdout, status.stdout
        ready_s = float(re.search(r"ready after ([\d.]+) s", status.stdout)[1])  # type: ignore[index]
        last_s = float(re.search(r"last start ([\d.]+) s", status.stdout)[1])  # type: ignore[index]
        assert abs(ready_s - last_s) <= 2, status.stdout  # one start, one duration: both from its launch
        startup = httpx.get(f"{stack.sidecar_url}/startup", timeout=30).json()
        assert startup["phase"] == "ready" and startup["engine"]["served_model"] == "tiny", startup
    finally:
        back_begun = time.time()
        back = start_vllm(stack, MODEL="synthetic:tiny")  # the later tests need vLLM
        time.sleep(3)
        answers = stream.stop()
        page.context.close()
    assert back.returncode == 0, output(back)
    assert served(stack) == ["ernie-tiny-synthetic"] and pids(stack)["ui"] == before["ui"]
    assert not lost(answers), lost(answers)
    for begun, until, new in ((there_begun, typo_begun, "tiny"), (back_begun, time.time(), "ernie-tiny-synthetic")):
        f = figures(answers, begun, until, new)
        assert f.failed == f.cut == 0 and f.to_new_model_s is not None, f
        assert f.longest_gap_s is not None and f.slowest_ttft_s is not None
        assert f.longest_gap_s <= 2.0 + f.slowest_ttft_s, f
