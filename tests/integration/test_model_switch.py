"""`VLLM_MODEL_PATH=<dir> ./start_vllm.sh` switches the served model in local mode beside the running engine: only
vLLM's programs change (the new slot starts, the old one stops), the chat UI keeps its process and its header follows
(real browser); a typo in VLLM_EXTRA_ARGS is reported with argparse's line while the running engine serves on.
Runs late (``stack_order(2)``): it starts vLLM three times — there, the typo (refused by vLLM's argparse), back —
one test, so the way back after the failed start is also the way back from the other model (a vLLM start costs a
minute on the CI host). Requests during a switch: tests/integration/test_blue_green.py."""

from __future__ import annotations

import re
import subprocess

import httpx
import pytest
from playwright.sync_api import Browser

from core.settings import PROJECT_ROOT
from engine.local_control import Supervisor
from tests.integration.chat_page import log_in
from tests.integration.conftest import Stack
from tests.integration.test_ui_browser import browser  # noqa: F401  (the module-scoped Chromium fixture)

pytestmark = [pytest.mark.integration, pytest.mark.stack_order(2)]
TINY_DIR = PROJECT_ROOT / "models" / "tiny"


def start_vllm(stack: Stack, **env: str) -> subprocess.CompletedProcess[str]:
    """``./start_vllm.sh`` with ``env`` (the stack's MODEL left out, as for a user who exports VLLM_MODEL_PATH)."""
    base = {k: v for k, v in stack.env.items() if k != "MODEL"}
    return subprocess.run([str(PROJECT_ROOT / "start_vllm.sh")], cwd=PROJECT_ROOT, env={**base, **env},
                          capture_output=True, text=True, timeout=900)


def served(stack: Stack) -> list[str]:
    models = httpx.get(f"{stack.vllm_url}/v1/models", timeout=10, headers=stack.vllm_headers).json()
    return [m["id"] for m in models["data"]]


def pids(stack: Stack) -> dict[str, int]:
    states = Supervisor(stack.run_dir).states() or {}
    return {name: int(info["pid"]) for name, info in states.items()}


def test_a_model_that_cannot_be_served_changes_nothing(stack: Stack) -> None:
    """A folder that is not a model is refused (exit 2) before vLLM is touched."""
    before = pids(stack)
    run = start_vllm(stack, VLLM_MODEL_PATH=str(PROJECT_ROOT / "docs"))
    assert run.returncode == 2 and "docs" in run.stderr, run.stdout + run.stderr
    assert pids(stack) == before


def others(pid_of: dict[str, int]) -> dict[str, int]:
    """The pids of every program but vLLM's two slots."""
    return {k: v for k, v in pid_of.items() if not k.startswith("vllm")}


def test_start_vllm_switches_the_model_a_typo_is_reported_and_the_way_back_works(
    stack: Stack, browser: Browser  # noqa: F811
) -> None:
    """Only vLLM's programs change; /v1/models and the UI header show the new model. Then
    ``VLLM_EXTRA_ARGS='--max-num-seqz 4' ./start_vllm.sh``: exit 1 naming argparse's error line, and the running
    engine serves on (``make status`` and ``GET /startup`` say ready, serving tiny). ``./start_vllm.sh`` without it
    comes back to the stack's model, the UI keeping its process."""
    before = pids(stack)
    page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    page.set_default_timeout(120_000)
    log_in(page, stack.ui_url)
    page.get_by_text("Model: ernie-tiny-synthetic").wait_for()
    try:
        run = start_vllm(stack, VLLM_MODEL_PATH=str(TINY_DIR))
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        assert "serving tiny" in run.stdout and "no request refused or cut" in run.stdout, run.stdout[-3000:]
        after = pids(stack)
        assert others(after) == others(before)
        assert served(stack) == ["tiny"]
        page.get_by_text(re.compile(r"Model:\s*tiny(\s|$)")).wait_for()  # the header re-probes every few seconds

        typo_run = start_vllm(stack, VLLM_EXTRA_ARGS="--max-num-seqz 4")
        typo = "error: unrecognized arguments: --max-num-seqz"
        assert typo_run.returncode == 1 and typo in typo_run.stderr, typo_run.stdout[-3000:] + typo_run.stderr[-3000:]
        assert "the running one keeps serving" in typo_run.stderr and "Last lines of" in typo_run.stderr
        assert served(stack) == ["tiny"]
        status = stack.make("status")
        assert status.returncode == 0 and "vLLM startup: ready" in status.stdout, status.stdout
        startup = httpx.get(f"{stack.sidecar_url}/startup", timeout=30).json()
        assert startup["phase"] == "ready" and startup["engine"]["served_model"] == "tiny", startup
    finally:
        back = start_vllm(stack, MODEL="synthetic:tiny")  # the later tests need vLLM
        page.context.close()
    assert back.returncode == 0, back.stdout[-3000:] + back.stderr[-3000:]
    assert served(stack) == ["ernie-tiny-synthetic"] and pids(stack)["ui"] == before["ui"]
