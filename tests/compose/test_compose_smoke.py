"""The compose stack, started for real (``make compose-test``): every container healthy, a chat answer through the UI
container in a real browser, ``make benchmark-compose`` writing its report into ./reports, the sidecar's /startup
and /resources. Screenshots land in ``test-artifacts/``."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from playwright.sync_api import Page, sync_playwright

from tests.compose.conftest import PROJECT_ROOT, ComposeStack
from tests.integration.chat_page import (
    CHROMIUM,
    CHROMIUM_ARGS,
    require_browser,
    screenshot,
    send,
    wait_for_timing_lines,
)

FOREIGN_NS = "another pid namespace"  # sidecar.sampling.sampler.FOREIGN_NAMESPACE, as the sidecar words it
SERVED_MODEL = "ernie-tiny-synthetic"  # MODEL=synthetic:tiny, as scripts/compose_stack.sh test sets it
SERVICES = ("vllm", "ui", "sidecar", "locust-master", "locust-worker")


def request_log_lines(logs_dir: Path) -> list[dict[str, Any]]:
    """Lines of requests.jsonl in ``logs_dir`` (./logs, which the containers append to through the bind mount)."""
    path = logs_dir / "requests.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture
def page() -> Iterator[Page]:
    """A tab of Debian's headless Chromium (Playwright drives it; no browser download)."""
    require_browser()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900}, locale="en-US")
            context.set_default_timeout(90_000)
            yield context.new_page()
        finally:
            browser.close()


def test_every_container_runs_and_the_checked_ones_are_healthy(stack: ComposeStack) -> None:
    """`compose ps`: all five services run in the test project; those with a healthcheck report healthy."""
    result = stack.compose("ps", "--format", "json")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    states = {row["Service"]: (row["State"], row.get("Health", "")) for row in rows}
    assert sorted(states) == sorted(SERVICES), states
    assert all(project == stack.project for project in (row["Project"] for row in rows))
    for service, (state, health) in states.items():
        assert state == "running", (service, state)
        assert health == ("" if service == "locust-worker" else "healthy"), (service, health)


def test_chat_answer_through_the_ui_container(stack: ComposeStack, page: Page) -> None:
    """A question typed into the UI container's page streams back an answer with its timing line; the UI found vLLM
    by service name, and its request log line reached ./logs through the bind mount."""
    before = len(request_log_lines(stack.logs_dir))
    page.goto(stack.url("UI_PORT"))
    if "UI_PASSWORD" in stack.env_file:  # make compose-test sets one: the UI container got it, vLLM's did not
        page.locator("#email").fill(stack.env_file.get("UI_USERNAME", "admin"))
        page.locator("#password").fill(stack.env_file["UI_PASSWORD"])
        page.get_by_role("button", name="Sign In").click()
    page.get_by_text("Status: Ready").wait_for()
    header = page.locator("body").inner_text()
    assert f"Model: {SERVED_MODEL}" in header and f"Endpoint: http://vllm:{stack.ports['VLLM_PORT']}" in header
    send(page, "你好，请用一句话介绍你自己")
    ((total_ms, prompt_ms, gen_ms),) = wait_for_timing_lines(page, 1, timeout_s=180)
    assert total_ms >= prompt_ms > 0 and gen_ms >= 0
    screenshot(page, "compose_chat.png")
    ui_lines = [line for line in request_log_lines(stack.logs_dir)[before:] if line["source"] == "ui"]
    assert ui_lines and ui_lines[-1]["status"] == "ok" and ui_lines[-1]["model"] == SERVED_MODEL, ui_lines
    assert ui_lines[-1]["completion_tokens"] > 0


def test_benchmark_compose_writes_a_report_into_reports(stack: ComposeStack) -> None:
    """`make benchmark-compose` runs the benchmark in the Locust container; the sidecar container writes a
    schema-valid report, owned by the user who ran it, into ./reports."""
    knobs = ["REQUESTS=8", "CONCURRENCY=2", "WARMUP=1", "MAX_TOKENS=16"]
    run = subprocess.run(
        ["make", "benchmark-compose", *knobs], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "[RESULT] Requests: 8/8 ok" in run.stdout, run.stdout[-3000:]
    match = re.search(r"^\[REPORT\] Baseline saved to (\S+)$", run.stdout, re.M)
    assert match, run.stdout[-3000:]
    path = stack.reports_dir / Path(match[1]).name  # the container's /app/reports is ./reports
    report = json.loads(path.read_text(encoding="utf-8"))
    schema = json.loads((stack.reports_dir / "schema.json").read_text(encoding="utf-8"))
    jsonschema.validate(report, schema)
    metrics = report["metrics"]
    assert metrics["requests_ok"] == 8 and metrics["requests_failed"] == 0
    assert metrics["output_tokens_per_sec"] > 0
    # No shared pid namespace: vLLM's process memory is reported as unavailable, with the reason, never guessed.
    assert metrics["vllm_rss_peak_gb"] is None and FOREIGN_NS in report["resources"]["cpu_unavailable_reason"]
    assert report["environment"]["served_model_name"] == SERVED_MODEL and report["environment"]["synthetic"] is True
    assert report["config"]["concurrency"] == 2 and report["config"]["max_tokens"] == 16
    for sibling in (path.with_suffix(".md"), path.with_suffix(".html"), stack.reports_dir / report["requests_file"]):
        assert sibling.exists(), sibling
    assert path.stat().st_uid == os.getuid()  # APP_UID: the containers write as the user who started them


def test_sidecar_startup_and_resources_see_the_vllm_container(stack: ComposeStack) -> None:
    """The sidecar container parses vLLM's start-up from the shared log (ready, written and rotated by the launcher
    itself); vLLM's processes live in another pid namespace, so the sidecar reports their memory as unavailable and
    says why instead of sampling whatever has that pid in its own namespace."""
    startup = httpx.get(f"{stack.url('SIDECAR_PORT')}/startup", timeout=10).json()
    assert startup["phase"] == "ready", startup
    assert startup["vllm_version"] and startup["startup_s"] and startup["startup_s"] > 0, startup
    resources = httpx.get(f"{stack.url('SIDECAR_PORT')}/resources", timeout=10).json()
    assert resources["vllm_rss_gb"] is None and FOREIGN_NS in resources["cpu_unavailable_reason"], resources
    assert resources["gpu_mem_used_gb"] is None and resources["gpu_unavailable_reason"], resources  # CPU overlay
