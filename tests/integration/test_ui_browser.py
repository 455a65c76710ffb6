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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, WebSocket, expect, sync_playwright
from playwright.sync_api import Error as PlaywrightError

from core.settings import PROJECT_ROOT
from tests.integration.conftest import SECRETS, UI_USERNAME, Stack
from ui import errors

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
TIMING_RE = re.compile(r"Total:\s(\d+)ms \| Prompt:\s(\d+)ms \| Gen:\s(\d+)ms")  # \s: the fields' spaces are U+00A0
TOKENS_RE = re.compile(r"Tokens:\s(\d+)\sin,\s(\d+)\sout")
LEGEND = "Prompt = time to first token"
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
    """Chainlit's socket.io events received by the page (to see tokens arrive as a stream), with their payloads."""

    def __init__(self, page: Page) -> None:
        self.events: list[str] = []
        self.payloads: list[tuple[str, Any]] = []
        page.on("websocket", self._attach)

    def _attach(self, ws: WebSocket) -> None:
        ws.on("framereceived", self._frame)

    def _frame(self, payload: str | bytes) -> None:
        text = payload if isinstance(payload, str) else payload.decode("utf-8", "replace")
        if match := re.match(r'^42\["([a-z_]+)"', text):
            self.events.append(match.group(1))
            self.payloads.append((match.group(1), json.loads(text[2:])[1]))

    def count(self, event: str) -> int:
        return self.events.count(event)

    def first(self, event: str) -> Any:
        """The payload of the first ``event`` received."""
        return next(payload for name, payload in self.payloads if name == event)

    def wait_for(self, page: Page, event: str, timeout_s: float = 180) -> None:
        """Wait until ``event`` has been received (the page's event loop runs meanwhile, delivering frames)."""
        deadline = time.monotonic() + timeout_s
        while event not in self.events:
            assert time.monotonic() < deadline, f"no {event} within {timeout_s:.0f} s; events: {self.events[-20:]}"
            page.wait_for_timeout(10)


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
    """Open the UI and sign in on Chainlit's login page (the test stack sets UI_PASSWORD); a page whose context is
    already signed in (a repeated try in the same tab) opens the chat directly, with no login form to fill."""
    page.goto(url)
    form, chat = page.locator("#email"), page.locator("#chat-input")
    expect(form.or_(chat)).to_be_visible(timeout=PAGE_TIMEOUT_MS)
    if not form.is_visible():
        return
    form.fill(UI_USERNAME)
    page.locator("#password").fill(SECRETS["UI_PASSWORD"])
    page.get_by_role("button", name="Sign In").click()


def open_chat(page: Page, url: str, status: str) -> None:
    """Open the UI, sign in and wait until the header shows ``Status: <status>``."""
    log_in(page, url)
    page.get_by_text(f"Status: {status}").wait_for()


def send(page: Page, text: str) -> None:
    """Type ``text`` into the composer and send it once the composer takes messages: the send button exists and is
    enabled only while no task runs (Enter pressed during a settings update is silently ignored). Enter, not a
    click: a click's checks wait for the page to settle, which the streamed answer keeps from happening."""
    composer = page.locator("#chat-input")
    composer.fill(text)
    expect(page.locator("#chat-submit")).to_be_enabled(timeout=PAGE_TIMEOUT_MS)
    composer.press("Enter")


def set_max_tokens(page: Page, value: int) -> None:
    """Set max_tokens in the chat settings and wait until the dialog is gone (its overlay would eat clicks)."""
    page.locator("#chat-settings-open-modal").click()
    page.locator("#max_tokens").fill(str(value))
    page.locator("#confirm").click()
    page.locator("#confirm").wait_for(state="detached")


AT_FIRST_TOKEN_JS = """() => {
    const answers = () => document.querySelectorAll('[data-step-type="assistant_message"]');
    const before = answers().length;
    const observer = new MutationObserver(() => {
        const all = answers();
        if (all.length > before && all[all.length - 1].innerText.trim()) {
            observer.disconnect();
            ACTION;
            window.__acted = true;
        }
    });
    observer.observe(document.body, {childList: true, subtree: true, characterData: true});
}"""
# Stop is pressed if it is still there (a page lagging behind a finished answer no longer shows it).
STOP_AT_FIRST_TOKEN_JS = AT_FIRST_TOKEN_JS.replace("ACTION", 'document.getElementById("stop-button")?.click()')
CLOSE_AT_FIRST_TOKEN_JS = AT_FIRST_TOKEN_JS.replace("ACTION", "window.close()")


def stop_at_first_token(page: Page) -> None:
    """Arm the page to press Stop the moment the next answer shows its first text, as a reader would.

    The click comes from the page's own event loop, so it neither waits for this test process (on a loaded 2-core
    machine the harness can lag seconds behind the page) nor for a renderer busy with a long streaming answer
    (the tiny model streams a whole answer in a few seconds).
    """
    page.evaluate(STOP_AT_FIRST_TOKEN_JS)


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


def seconds_until_idle(stack: Stack, timeout_s: float = 60) -> tuple[float, dict[str, float]]:
    """Seconds until vLLM runs nothing, and its counters then."""
    started = time.monotonic()
    while (metrics := vllm_metrics(stack.vllm_url))["running"] > 0:
        assert time.monotonic() - started < timeout_s, f"vLLM still generates {timeout_s:.0f} s later"
        time.sleep(0.02)
    return time.monotonic() - started, metrics


def assert_never_finished(before: dict[str, float], after: dict[str, float]) -> None:
    """The request was dropped by vLLM: no request ran to its end (stop) or to max_tokens (length) meanwhile.

    Valid because the test waited for an idle server first and sent only this one request: the counters are
    server-wide, so they speak for this request alone.
    """
    assert after["finished_stop"] == before["finished_stop"], "the request ran to its end"
    assert after["finished_length"] == before["finished_length"], "the request ran to max_tokens"


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


CANCEL_TRIES = 8  # 10 fresh runs beside another CI run needed at most 4 (Stop) and 5 (close) tries


@dataclass(frozen=True)
class Cancelled:
    """How one answer was cancelled mid-way: its request-log line, how long vLLM took to drop it, which try it was."""

    line: dict[str, Any]
    idle_after_s: float
    tries: int


def cancel_mid_answer(stack: Stack, attempt: Callable[[], None]) -> Cancelled:
    """Run ``attempt`` (send a long question and cancel the answer at its first token) until the cancel reaches the
    UI while the answer runs, and judge that request alone: vLLM must drop it (it never finishes there), soon.

    Each try starts on an idle vLLM, so its server-wide finished counters can only move for this request. A try
    whose answer ran to its end before the cancel reached the UI server (its log line says ``ok``: the tiny model
    streams a whole answer in ~3 s, a loaded machine's browser can lag that much) proves nothing either way and is
    repeated, up to :data:`CANCEL_TRIES` times.
    """
    for tries in range(1, CANCEL_TRIES + 1):
        before = len(request_log(stack.logs_dir))
        stack.wait_until_idle()
        finished_before = vllm_metrics(stack.vllm_url)
        attempt()
        idle_after_s, metrics = seconds_until_idle(stack)
        deadline = time.monotonic() + 30
        while not (lines := ui_lines(stack.logs_dir, before)) and time.monotonic() < deadline:
            time.sleep(0.1)
        (line,) = lines
        if line["status"] == "ok":
            continue
        assert line["status"] == "cancelled", line
        assert_never_finished(finished_before, metrics)
        return Cancelled(line, idle_after_s, tries)
    pytest.fail(
        f"in {CANCEL_TRIES} tries every answer ran to its end before the cancel reached the UI: the machine is too "
        "loaded to act within a ~3 s answer, or the cancel does not reach the running answer (see ui.log)"
    )


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
        [sys.executable, "-m", "ui.server"], cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
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
