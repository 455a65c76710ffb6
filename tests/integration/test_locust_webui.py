"""Locust's web UI against the mock server: LLM figures in their own tabs, in their units, without inflating the
request count; requests in flight when the test is stopped are shown as cut (failures saying so, logged
``cancelled``), not lost."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import sync_playwright

from core.net import free_port
from core.settings import PROJECT_ROOT
from tests.integration.chat_page import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, require_browser
from tests.integration.test_client_timing import PY, mock_url  # noqa: F401 - fixture

pytestmark = pytest.mark.integration


@pytest.fixture
def locust_web(mock_url: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:  # noqa: F811
    """Locust's web UI (the project's locustfile) aimed at the mock server; its logs and rows go to ``tmp_path``."""
    port = free_port()
    env = {**os.environ, "LOGS_DIR": str(tmp_path), "MAX_TOKENS": "20"}
    log = (tmp_path / "locust.log").open("w")
    argv = [PY, "-m", "locust", "-f", "loadgen/locust_side/locustfile.py", "--host", mock_url, "--web-host", "127.0.0.1"]
    argv += ["--web-port", str(port), "--records-file", str(tmp_path / "rows.jsonl"), "ChatUser"]
    proc = subprocess.Popen(argv, cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "locust.log").read_text()
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        yield url, tmp_path
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def stats(url: str) -> dict[str, Any]:
    """What the web UI polls: ``/stats/requests`` (with the LLM tabs' rows in ``extended_stats``)."""
    data: dict[str, Any] = httpx.get(f"{url}/stats/requests", timeout=10).json()
    return data


def test_llm_tabs_in_their_units_and_requests_counted_once(locust_web: tuple[str, Path]) -> None:
    """While a test runs, Locust counts each chat request once (``LLM e2e`` = Aggregated); TTFT, TPOT, ITL and
    tok/s are in the LLM tabs with their units, shown by the web UI; stopping mid-request shows the cut ones."""
    require_browser()
    url, folder = locust_web
    httpx.post(f"{url}/swarm", data={"user_count": 3, "spawn_rate": 3}, timeout=10).raise_for_status()
    deadline = time.monotonic() + 60
    while (
        done := len((folder / "rows.jsonl").read_text().splitlines()) if (folder / "rows.jsonl").exists() else 0
    ) < 6:
        assert time.monotonic() < deadline, "no requests finished"
        time.sleep(0.3)

    running = stats(url)
    names = {(e["method"], e["name"]): e for e in running["stats"]}
    assert set(names) == {("LLM", "e2e"), ("", "Aggregated")}, names
    assert names[("", "Aggregated")]["num_requests"] == names[("LLM", "e2e")]["num_requests"] >= done
    latency = {row["name"].split(" ")[0]: row for row in running["extended_stats"][0]["data"]}
    assert latency["TTFT"]["unit"] == "ms" and 390 <= latency["TTFT"]["median"] <= 1000  # the mock waits 400 ms
    assert latency["ITL"]["unit"] == "ms" and 45 <= latency["ITL"]["median"] <= 150  # ... and 50 ms per chunk
    assert latency["Decode"]["unit"] == "tok/s" and latency["Output"]["median"] == 20

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 700})
            page.goto(url)
            page.get_by_role("tab", name="LLM latency").click()
            page.get_by_text("TTFT (time to first token)").wait_for()
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "locust_llm_latency.png"))
            page.get_by_role("tab", name="LLM throughput").click()
            page.get_by_text("Output tok/s since the test started").wait_for()
            page.screenshot(path=str(ARTIFACTS / "locust_llm_throughput.png"))
        finally:
            browser.close()

    # 3 closed-loop users, 1.4 s answers: just after an answer ends its user's next request is surely in flight
    finished = len((folder / "rows.jsonl").read_text().splitlines())
    while len((folder / "rows.jsonl").read_text().splitlines()) == finished:
        assert time.monotonic() < deadline + 60, "requests stopped finishing"
        time.sleep(0.05)
    time.sleep(0.3)
    httpx.post(f"{url}/stop", timeout=30).raise_for_status()
    time.sleep(1)
    stopped = stats(url)
    e2e = next(e for e in stopped["stats"] if e["name"] == "e2e")
    llm = httpx.get(f"{url}/llm-stats", timeout=10).json()
    rows = (folder / "rows.jsonl").read_text().splitlines()
    cut_lines = [
        line
        for line in map(json.loads, (folder / "requests.jsonl").read_text().splitlines())
        if line["status"] == "cancelled"
    ]
    assert e2e["num_failures"] == llm["requests_cut"] == len(cut_lines) >= 1
    incomplete = [row for row in map(json.loads, rows) if row["error_kind"] == "incomplete"]
    assert len(incomplete) == llm["requests_cut"]  # a cut request is also a row, saved as incomplete
    assert e2e["num_requests"] == len(rows)  # every request Locust counted is a row: none lost, none twice
    (error,) = stopped["errors"]
    assert "cut by the test stop" in error["error"] and error["occurrences"] == llm["requests_cut"]
    assert all(line["error"].startswith("incomplete: cancelled by the end of the run") for line in cut_lines)
