"""The chat UI in a real browser (Debian's headless Chromium via Playwright) against the real Chainlit app and vLLM.

Screenshots land in ``test-artifacts/``. Chromium and CJK fonts come from ``scripts/setup_browser.sh``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, WebSocket, sync_playwright

from core.settings import PROJECT_ROOT
from tests.integration.conftest import SECRETS, UI_USERNAME, Stack

pytestmark = pytest.mark.integration

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = PROJECT_ROOT / "test-artifacts"
TIMING_RE = re.compile(r"Total: (\d+)ms \| Prompt: (\d+)ms \| Gen: (\d+)ms")
CJK_RE = re.compile(r"[\u4e00-\u9fff]")
SEED_QUESTION = "请用三句话解释MoE架构的核心思想"
PAGE_TIMEOUT_MS = 90_000


def require_browser() -> None:
    """Fail with the fix when Chromium or the CJK fonts are missing (``make test`` installs both)."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/setup_browser.sh")
    fonts = subprocess.run(["fc-list"], capture_output=True, text=True, check=False).stdout
    if "Noto Sans CJK" not in fonts:
        pytest.fail("fonts-noto-cjk is missing (Chinese would render as boxes): run scripts/setup_browser.sh")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Chromium from Debian (no browser download)."""
    require_browser()
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


class SocketFrames:
    """Chainlit's socket.io events received by the page (to see tokens arrive as a stream)."""

    def __init__(self, page: Page) -> None:
        self.events: list[str] = []
        page.on("websocket", self._attach)

    def _attach(self, ws: WebSocket) -> None:
        ws.on("framereceived", self._frame)

    def _frame(self, payload: str | bytes) -> None:
        text = payload if isinstance(payload, str) else payload.decode("utf-8", "replace")
        if match := re.match(r'^42\["([a-z_]+)"', text):
            self.events.append(match.group(1))

    def count(self, event: str) -> int:
        return self.events.count(event)


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh browser tab (own context) per test."""
    context = browser.new_context(viewport={"width": 1400, "height": 900}, locale="en-US")
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    tab = context.new_page()
    try:
        yield tab
    finally:
        context.close()


def screenshot(page: Page, name: str) -> Path:
    """Save a full-page screenshot as a test artifact."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=True)
    return path


def request_log(logs_dir: Path) -> list[dict[str, Any]]:
    """Lines of ``requests.jsonl`` (empty when it does not exist yet)."""
    path = logs_dir / "requests.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def ui_lines(logs_dir: Path, since: int) -> list[dict[str, Any]]:
    """UI lines of the request log after the first ``since`` lines."""
    return [line for line in request_log(logs_dir)[since:] if line["source"] == "ui"]


def log_in(page: Page, url: str) -> None:
    """Open the UI and sign in on Chainlit's login page (the test stack sets UI_PASSWORD)."""
    page.goto(url)
    page.locator("#email").fill(UI_USERNAME)
    page.locator("#password").fill(SECRETS["UI_PASSWORD"])
    page.get_by_role("button", name="Sign In").click()


def open_chat(page: Page, url: str, status: str) -> None:
    """Open the UI, sign in and wait until the header shows ``Status: <status>``."""
    log_in(page, url)
    page.get_by_text(f"Status: {status}").wait_for()


def send(page: Page, text: str) -> None:
    """Type ``text`` into the composer and send it."""
    page.locator("#chat-input").fill(text)
    page.keyboard.press("Enter")


def timing_lines(page: Page) -> list[tuple[int, int, int]]:
    """Every ``Total | Prompt | Gen`` line shown, as ``(total_ms, prompt_ms, gen_ms)``."""
    return [tuple(map(int, m)) for m in TIMING_RE.findall(page.locator("body").inner_text())]  # type: ignore[misc]


def wait_for_timing_lines(page: Page, count: int, timeout_s: float = 120) -> list[tuple[int, int, int]]:
    """Wait until ``count`` timing lines are shown."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = timing_lines(page)
        if len(lines) >= count:
            return lines
        page.wait_for_timeout(250)
    pytest.fail(f"no timing line #{count} within {timeout_s:.0f} s; page:\n{page.locator('body').inner_text()}")


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def vllm_metrics(vllm_url: str) -> dict[str, float]:
    """vLLM's running-requests gauge and its finished-request counters (``finished_stop``, ``finished_length``)."""
    text = httpx.get(f"{vllm_url}/metrics", timeout=10).text
    values = {"running": 0.0, "finished_stop": 0.0, "finished_length": 0.0}
    for line in text.splitlines():
        if match := re.match(r"^vllm:num_requests_running\{[^}]*\} ([0-9.e+]+)$", line):
            values["running"] += float(match.group(1))
        elif match := re.match(
            r'^vllm:request_success_total\{[^}]*finished_reason="(stop|length)"[^}]*\} ([0-9.e+]+)$', line
        ):
            values[f"finished_{match.group(1)}"] += float(match.group(2))
    return values


def test_header_stream_timing_and_request_log(stack: Stack, page: Page) -> None:
    """Header shows model/backend/status; a starter streams an answer with its timing line; both turns are logged."""
    frames = SocketFrames(page)
    before = len(request_log(stack.logs_dir))
    open_chat(page, stack.ui_url, "Ready")
    header = page.locator("body").inner_text()
    assert "Model: ernie-tiny-synthetic" in header
    assert re.search(r"Backend: vLLM \d+\.\d+", header)
    assert "noise by design" in header  # the synthetic model is announced plainly

    page.get_by_text("MoE 架构").click()  # the seed's question, as a starter
    page.get_by_text(SEED_QUESTION).first.wait_for()
    ((total_ms, prompt_ms, gen_ms),) = wait_for_timing_lines(page, 1)
    assert frames.count("stream_start") >= 1 and frames.count("stream_token") >= 1, frames.events
    assert total_ms >= prompt_ms > 0 and gen_ms >= 0 and abs(total_ms - prompt_ms - gen_ms) <= 1
    body = page.locator("body").inner_text()
    assert "\ufffd" not in body
    answer = body.split(SEED_QUESTION, 1)[1].split("Total:", 1)[0]
    assert CJK_RE.search(answer), f"no Chinese characters in the answer: {answer!r}"
    screenshot(page, "ui_chat.png")

    send(page, "请再详细一点")  # second turn: the history goes along
    wait_for_timing_lines(page, 2)
    screenshot(page, "ui_chat_two_turns.png")

    first, second = ui_lines(stack.logs_dir, before)[-2:]
    for line in (first, second):
        assert line["status"] == "ok" and line["error"] is None and line["model"] == "ernie-tiny-synthetic"
        assert line["request_id"] and line["ts"] and line["completion_tokens"] > 0
    assert abs(first["ttft_ms"] - prompt_ms) <= 1 and abs(first["total_ms"] - total_ms) <= 1
    assert second["prompt_tokens"] > first["prompt_tokens"] + first["completion_tokens"] - 5  # history was sent


def test_stop_cancels_the_request_on_the_server(stack: Stack, page: Page) -> None:
    """Stop aborts a long answer in vLLM (it never finishes there), the answer says Stopped, the log says cancelled."""
    before = len(request_log(stack.logs_dir))
    open_chat(page, stack.ui_url, "Ready")
    page.locator("#chat-settings-open-modal").click()
    page.locator("#max_tokens").fill("4000")  # 10+ s of tokens for the tiny model on a CPU
    page.locator("#confirm").click()
    finished_before = vllm_metrics(stack.vllm_url)
    send(page, "写一篇很长的文章")
    deadline = time.monotonic() + 180  # a loaded 2-core machine can take long to render and send
    while vllm_metrics(stack.vllm_url)["running"] < 1:
        assert time.monotonic() < deadline, "vLLM never started the request"
        time.sleep(0.1)
    # Click while the answer is short: re-rendering a long streaming message keeps a loaded CPU's renderer busy.
    page.locator("#stop-button").click(force=True)  # a transient overlay must not delay the click past the answer
    deadline = time.monotonic() + 60
    while (metrics := vllm_metrics(stack.vllm_url))["running"] > 0:
        assert time.monotonic() < deadline, "vLLM still generates a minute after Stop"
        time.sleep(0.25)
    assert metrics["finished_stop"] == finished_before["finished_stop"], "the request ran to its end"
    assert metrics["finished_length"] == finished_before["finished_length"], "the request ran to max_tokens"
    page.get_by_text("The request was cancelled on the server").wait_for()
    screenshot(page, "ui_stopped.png")
    (line,) = ui_lines(stack.logs_dir, before)
    assert line["status"] == "cancelled" and line["error"] == "cancelled"


def test_too_long_message_shows_limit_and_size(stack: Stack, page: Page) -> None:
    """A message longer than the context is refused before generation, with the limit and its size."""
    before = len(request_log(stack.logs_dir))
    open_chat(page, stack.ui_url, "Ready")
    send(page, "你好" * 5000)  # about 5,000 tokens
    page.get_by_text("Too long for the model").wait_for()
    body = page.locator("body").inner_text()
    match = re.search(r"Your message is ([\d,]+) tokens, but ernie-tiny-synthetic reads at most ([\d,]+) tokens", body)
    assert match, body[-2000:]
    size, limit = (int(group.replace(",", "")) for group in match.groups())
    assert size > limit > 0
    (line,) = ui_lines(stack.logs_dir, before)
    assert line["status"] == "error" and line["error"].startswith("context too long")
    assert line["prompt_tokens"] == size


@pytest.fixture
def ui_without_vllm(stack: Stack, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A second UI (same launcher) whose vLLM URL points at a port where nothing listens; stopped afterwards."""
    ui_port, dead_port = free_port(), free_port()
    logs_dir = tmp_path / "logs"
    env = {
        **stack.env,
        "UI_PORT": str(ui_port),
        "VLLM_BASE_URL": f"http://127.0.0.1:{dead_port}",
        "LOGS_DIR": str(logs_dir),
        "TMPDIR": str(tmp_path),  # Chainlit's runtime folder lands here, removed with the test's tmp_path
    }
    log = (tmp_path / "ui.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.ui.launch"], cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{ui_port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "ui.log").read_text()
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            pytest.fail(f"second UI not up in 120 s:\n{(tmp_path / 'ui.log').read_text()}")
        yield url, logs_dir
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
        log.close()


def test_backend_down_is_explained(ui_without_vllm: tuple[str, Path], page: Page) -> None:
    """With vLLM not running the header says Down and a message gets the 'backend down' answer with what to do."""
    url, logs_dir = ui_without_vllm
    open_chat(page, url, "Down")
    send(page, "你好")
    page.get_by_text("The model server is down").wait_for()
    body = page.locator("body").inner_text()
    assert "make up" in body and "not reachable" in body
    screenshot(page, "ui_backend_down.png")
    (line,) = ui_lines(logs_dir, 0)
    assert line["status"] == "error" and line["error"].startswith("backend down")
    assert os.path.exists(logs_dir / "requests.jsonl")
