"""The chat UI in a real browser (Debian's headless Chromium via Playwright) against the real Chainlit app and vLLM.

Screenshots land in ``test-artifacts/``. Chromium and CJK fonts come from ``scripts/setup_browser.sh``. The page
helpers are :mod:`tests.integration.chat_page`, the cancel checks :mod:`tests.integration.cancel_check`.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright
from playwright.sync_api import Error as PlaywrightError

from core.settings import PROJECT_ROOT
from tests.integration.cancel_check import cancel_mid_answer, request_log, ui_lines
from tests.integration.chat_page import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    CJK_RE,
    CLOSE_AT_FIRST_TOKEN_JS,
    LEGEND,
    PAGE_TIMEOUT_MS,
    SEED_QUESTION,
    TOKENS_RE,
    SocketFrames,
    open_chat,
    require_browser,
    screenshot,
    send,
    set_max_tokens,
    stop_at_first_token,
    wait_for_timing_lines,
)
from tests.integration.conftest import Stack
from ui import chat_errors as errors

pytestmark = pytest.mark.integration

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


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_header_stream_timing_and_request_log(stack: Stack, page: Page) -> None:
    """Header shows model/backend/status; a starter streams an answer with its timing line; both turns are logged."""
    frames = SocketFrames(page)
    before = len(request_log(stack.logs_dir))
    open_chat(page, stack.ui_url, "Ready")
    assert page.locator("#side-view-title").inner_text().strip() == "vLLM status"  # the panel's title shows
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
    assert LEGEND in body  # the timing line is explained where it is shown
    assert_timing_line_wraps_between_fields(page)
    screenshot(page, "ui_chat.png")
    page.locator("code", has_text="Total:").last.locator("xpath=ancestor::div[1]").screenshot(
        path=str(ARTIFACTS / "ui_timing_line.png")
    )

    send(page, "请再详细一点")  # second turn: the history goes along
    wait_for_timing_lines(page, 2)
    screenshot(page, "ui_chat_two_turns.png")

    first, second = ui_lines(stack.logs_dir, before)[-2:]
    for line in (first, second):
        assert line["status"] == "ok" and line["error"] is None and line["model"] == "ernie-tiny-synthetic"
        assert line["request_id"] and line["ts"] and line["completion_tokens"] > 0
    assert abs(first["ttft_ms"] - prompt_ms) <= 1 and abs(first["total_ms"] - total_ms) <= 1
    assert second["prompt_tokens"] > first["prompt_tokens"] + first["completion_tokens"] - 5  # history was sent


def assert_timing_line_wraps_between_fields(page: Page) -> None:
    """In a narrow window the timing line wraps, but only at a ``|`` separator: every rendered line of it starts
    with a field name or a value followed by its unit, never with a field's tail such as ``out``."""
    page.set_viewport_size({"width": 520, "height": 900})
    try:
        code = page.locator("code", has_text="Total:").last
        rects = code.evaluate(
            """el => { const range = document.createRange(); const text = el.textContent; const lines = [];
                let top = null, start = 0;
                for (let i = 0; i < text.length; i++) {
                    range.setStart(el.firstChild, i); range.setEnd(el.firstChild, i + 1);
                    const r = range.getClientRects()[0]; if (!r) continue;
                    if (top !== null && Math.abs(r.top - top) > 2) { lines.push(text.slice(start, i)); start = i; }
                    top = r.top; }
                lines.push(text.slice(start)); return lines; }"""
        )
        assert len(rects) > 1, f"the narrow window should make the line wrap: {rects}"
        for piece in rects[1:]:
            assert re.match(r"^\s*(\|\s*)?(Total|Prompt|Gen|Tokens|[\d.]+\stok/s)", piece), rects
    finally:
        page.set_viewport_size({"width": 1400, "height": 900})


def test_stop_cancels_the_request_on_the_server(stack: Stack, page: Page) -> None:
    """Stop aborts a long answer in vLLM (it never finishes there), the answer says Stopped once (no Chainlit
    "Task manually stopped."), and the request's own log line says cancelled."""

    def ask_and_stop() -> None:
        open_chat(page, stack.ui_url, "Ready")  # a new chat each try: a finished answer would fill the context
        set_max_tokens(page, 3500)  # 3+ s of tokens for the tiny model on an idle CPU, more on a loaded one
        stop_at_first_token(page)
        send(page, "写一篇很长的文章")
        page.wait_for_function("window.__acted === true")
        expect(page.locator("#chat-submit")).to_be_attached(timeout=PAGE_TIMEOUT_MS)  # the turn is over
        page.evaluate("() => { window.__acted = false; }")

    cancelled = cancel_mid_answer(stack, ask_and_stop)
    assert cancelled.line["error"] == errors.cancelled(errors.STOPPED).cause
    page.get_by_text("The request was cancelled on the server").wait_for()
    page.wait_for_timeout(1000)  # Chainlit's own message, if any, would arrive with the cancellation
    body = page.locator("body").inner_text()
    assert body.count("Stopped") == 1 and "Task manually stopped" not in body, body[-1500:]
    screenshot(page, "ui_stopped.png")
    print(f"[stop] vLLM idle {cancelled.idle_after_s:.2f} s after Stop (try {cancelled.tries})")


def test_closing_the_page_cancels_the_answer(stack: Stack, page: Page) -> None:
    """Closing the tab mid-answer ends the request in vLLM within seconds (running count from /metrics drops, the
    request never finishes there), and the request's log line says cancelled because the session disconnected.

    The chat runs in a tab the first page opened, so the tab can close itself the moment the answer shows its first
    text (a script may close a window it opened), without waiting for this test process to notice. The tab is
    brought to the front: Chromium throttles a background tab, which would show the answer only after it ended.
    """
    open_chat(page, stack.ui_url, "Ready")  # signed in: the tab it opens shares the session cookie

    def ask_and_close() -> None:
        with page.context.expect_page() as opened:
            page.evaluate("url => { window.open(url); }", stack.ui_url)
        tab = opened.value
        tab.bring_to_front()
        tab.get_by_text("Status: Ready").wait_for()
        set_max_tokens(tab, 3500)
        tab.evaluate(CLOSE_AT_FIRST_TOKEN_JS)
        try:
            send(tab, "写一篇很长的文章")
        except PlaywrightError:  # the tab may close itself before Playwright's key press has returned
            if not tab.is_closed():
                raise
        if not tab.is_closed():
            tab.wait_for_event("close", timeout=PAGE_TIMEOUT_MS)

    cancelled = cancel_mid_answer(stack, ask_and_close)
    assert cancelled.idle_after_s < 5, f"vLLM kept generating {cancelled.idle_after_s:.1f} s after the page closed"
    assert cancelled.line["error"] == errors.cancelled(errors.DISCONNECTED).cause
    print(f"[close] vLLM idle {cancelled.idle_after_s:.2f} s after the page closed (try {cancelled.tries})")


def test_huge_max_tokens_is_lowered_to_the_ui_limit_before_sending(stack: Stack, page: Page) -> None:
    """max_tokens = 131,072 (a whole large context) is lowered to UI_MAX_TOKENS before the request goes out, and
    the notice is the first thing the answer shows (it opens the streamed message, before any token)."""
    frames = SocketFrames(page)
    before = len(request_log(stack.logs_dir))
    limit = int(stack.env["UI_MAX_TOKENS"])
    open_chat(page, stack.ui_url, "Ready")
    page.locator("#chat-settings-open-modal").click()
    assert "UI_MAX_TOKENS" in page.locator("body").inner_text()  # the setting's description names the limit
    screenshot(page, "ui_settings.png")
    page.locator("#max_tokens").fill("131072")
    page.locator("#confirm").click()
    page.locator("#confirm").wait_for(state="detached")
    send(page, "hi")
    notice = f"max_tokens lowered from 131,072 to {limit:,}"
    page.get_by_text(notice).wait_for()
    first = frames.first("stream_start")
    assert first["output"].startswith(f"> **Note:** {notice}"), first["output"]  # shown before the first token
    screenshot(page, "ui_clamped.png")
    wait_for_timing_lines(page, 1)
    tokens_out = int(TOKENS_RE.findall(page.locator("body").inner_text())[-1][1])
    assert 0 < tokens_out <= limit
    (line,) = ui_lines(stack.logs_dir, before)
    assert line["status"] == "ok" and line["completion_tokens"] == tokens_out


def test_page_load_and_chat_stay_on_this_machine(stack: Stack, page: Page) -> None:
    """Loading the page and chatting fetch nothing from another host (no fonts, CDN stylesheets or scripts)."""
    ui_host = httpx.URL(stack.ui_url).netloc.decode()
    foreign: list[str] = []
    page.on(
        "request",
        lambda request: foreign.append(request.url) if httpx.URL(request.url).netloc.decode() != ui_host else None,
    )
    page.on("websocket", lambda ws: foreign.append(ws.url) if httpx.URL(ws.url).netloc.decode() != ui_host else None)
    open_chat(page, stack.ui_url, "Ready")
    send(page, "你好")
    wait_for_timing_lines(page, 1)
    page.wait_for_load_state("networkidle")
    assert foreign == [], f"requests to other hosts: {foreign}"


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
        [sys.executable, "-m", "ui.chainlit_launch"], cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
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
