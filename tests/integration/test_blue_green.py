"""`VLLM_MODEL_PATH=<another model> ./start_vllm.sh` while a stream of 2 requests/s runs: the new engine starts beside
the old one behind the router, and not one request fails or is cut — there, back, and through a new engine that
fails to start (the old one serves on, exit 1). The UI header and the sidecar follow the new model. Its own stack on
its own ports (the session stack's model switch is tests/integration/test_model_switch.py), tiny models, ``-O0``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Browser

from core.settings import PROJECT_ROOT
from tests.integration.chat_page import log_in
from tests.integration.conftest import Stack, running_stack, stack_env
from tests.integration.test_ui_browser import browser  # noqa: F401  (the module-scoped Chromium fixture)

sys.path.insert(0, str(PROJECT_ROOT / "benchmarks"))

from bench_switch import Answer, Stream, figures

pytestmark = pytest.mark.integration

_BASE = 28200 + int(os.environ.get("TEST_PORT_OFFSET", "0"))
PORTS = {"UI_PORT": _BASE, "VLLM_PORT": _BASE + 1, "SIDECAR_PORT": _BASE + 2, "LOCUST_WEB_PORT": _BASE + 3,
         "REPLICA_PORT_BASE": _BASE + 10}  # fmt: skip
TINY_DIR = PROJECT_ROOT / "models" / "tiny"  # the synthetic tiny model's folder, served as "tiny"
RATE_PER_S = 2.0
VLLM_URL = f"http://127.0.0.1:{PORTS['VLLM_PORT']}"  # the router in front (Stack's URLs are the session stack's)
UI_URL = f"http://127.0.0.1:{PORTS['UI_PORT']}"
SIDECAR_URL = f"http://127.0.0.1:{PORTS['SIDECAR_PORT']}"


@pytest.fixture(scope="module")
def switching(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """`make up` with the router in front of one engine (the default) on this module's ports."""
    tmp = tmp_path_factory.mktemp("blue-green")
    env = {**stack_env(tmp), **{k: str(v) for k, v in PORTS.items()}, "STARTUP_TIMEOUT_S": "1200"}
    with running_stack(env, tmp, up_timeout_s=1500) as s:
        yield s


def start_vllm(stack: Stack, **env: str) -> subprocess.CompletedProcess[str]:
    """``./start_vllm.sh`` with ``env`` (the stack's MODEL left out, as for a user who exports VLLM_MODEL_PATH)."""
    base = {k: v for k, v in stack.env.items() if k != "MODEL"}
    return subprocess.run([str(PROJECT_ROOT / "start_vllm.sh")], cwd=PROJECT_ROOT, env={**base, **env},
                          capture_output=True, text=True, timeout=1500)  # fmt: skip


def sidecar_engine(stack: Stack) -> dict[str, object]:
    """The engine the sidecar says serves now (``GET /startup``'s ``engine``)."""
    return dict(httpx.get(f"{SIDECAR_URL}/startup", timeout=30).json()["engine"])


def lost(answers: list[Answer]) -> list[str]:
    """What went wrong with the requests that failed or were cut (empty: none)."""
    return [f"{'cut' if a.cut else 'failed'} at {a.sent_s:.1f}: {a.error}" for a in answers if a.failed or a.cut]


def test_switches_under_a_stream_lose_no_request_and_everything_follows(
    switching: Stack, browser: Browser  # noqa: F811
) -> None:
    """2 requests/s throughout: the switch to ``tiny`` (the UI header and the sidecar's engine follow: vllm-b serving
    tiny), the switch back, and a start that fails (``--max-num-seqz``: exit 1 naming it, the old engine serves on):
    0 failed, 0 cut; the longest gap between successful first tokens at most 2 s plus the slowest first token."""
    page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    page.set_default_timeout(120_000)
    log_in(page, UI_URL)
    page.get_by_text("Model: ernie-tiny-synthetic").wait_for()
    stream = Stream(VLLM_URL, switching.vllm_headers, RATE_PER_S, max_tokens=16).start()
    try:
        time.sleep(3)
        there_begun = time.time()
        there = start_vllm(switching, VLLM_MODEL_PATH=str(TINY_DIR))
        assert there.returncode == 0, there.stdout[-3000:] + there.stderr[-3000:]
        page.get_by_text(re.compile(r"Model:\s*tiny(\s|$)")).wait_for()  # no reload: the header re-probes
        engine = sidecar_engine(switching)
        assert engine["program"] == "vllm-b" and engine["served_model"] == "tiny", engine
        time.sleep(3)
        back_begun = time.time()
        back = start_vllm(switching, MODEL="synthetic:tiny")
        assert back.returncode == 0, back.stdout[-3000:] + back.stderr[-3000:]
        assert sidecar_engine(switching)["served_model"] == "ernie-tiny-synthetic"
        failed_begun = time.time()
        typo = start_vllm(switching, MODEL="synthetic:tiny", VLLM_EXTRA_ARGS="-O0 --max-num-seqz 4")
        assert typo.returncode == 1, typo.stdout[-3000:] + typo.stderr[-3000:]
        assert "unrecognized arguments: --max-num-seqz" in typo.stderr and "keeps serving" in typo.stderr
        time.sleep(3)
    finally:
        answers = stream.stop()
        page.context.close()
    assert not lost(answers), lost(answers)
    models = {a.model for a in answers}
    assert {"tiny", "ernie-tiny-synthetic"} <= models, models
    for begun, until, new in ((there_begun, back_begun, "tiny"), (back_begun, failed_begun, "ernie-tiny-synthetic")):
        f = figures(answers, begun, until, new)
        assert f.failed == f.cut == 0 and f.to_new_model_s is not None, f
        assert f.longest_gap_s is not None and f.slowest_ttft_s is not None
        assert f.longest_gap_s <= 2.0 + f.slowest_ttft_s, f
    assert httpx.get(f"{VLLM_URL}/v1/models", headers=switching.vllm_headers,
                     timeout=10).json()["data"][0]["id"] == "ernie-tiny-synthetic"  # fmt: skip
