"""The chat UI driven in headless Chromium (Debian's, via Playwright) for the browser tests: launch arguments, the
CJK-font check, Chainlit's socket frames, sign-in, the composer, chat settings, the timing lines under answers and the
page-side Stop at the first token. Test helpers, not product code."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, WebSocket, expect

from core.settings import PROJECT_ROOT
from tests.integration.conftest import SECRETS, UI_USERNAME

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


def screenshot(page: Page, name: str) -> Path:
    """Save a full-page screenshot as a test artifact."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=True)
    return path


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
