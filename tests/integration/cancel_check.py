"""Whether a chat answer cancelled in the browser was dropped by vLLM: the UI's request-log lines, vLLM's running and
finished counters, and :func:`cancel_mid_answer` (try until the cancel lands mid-answer, judge that request alone).
Test helpers, not product code."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import Stack


def request_log(logs_dir: Path) -> list[dict[str, Any]]:
    """Lines of ``requests.jsonl`` (empty when it does not exist yet)."""
    path = logs_dir / "requests.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def ui_lines(logs_dir: Path, since: int) -> list[dict[str, Any]]:
    """UI lines of the request log after the first ``since`` lines."""
    return [line for line in request_log(logs_dir)[since:] if line["source"] == "ui"]


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
    while (metrics := vllm_metrics(stack.engine_url))["running"] > 0:
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
        finished_before = vllm_metrics(stack.engine_url)
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
