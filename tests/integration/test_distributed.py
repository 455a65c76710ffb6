"""Locust's distributed mode (master + worker processes): the same statistics and the same requests as one process.

Both runs go against the mock server; in each, the master's ``LLM e2e`` request entry and its LLM statistics (TTFT,
output tokens, written with ``--llm-stats-file``) must equal what the per-request rows (written by the workers) say,
and Locust's request count must be the number of chat requests (the LLM figures are not counted as requests). And a
benchmark run with WORKERS=2 sends exactly REQUESTS requests — the same prompts and lengths as one process, and in
open loop the same arrival schedule.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.net import free_port
from core.records import RequestRecord
from core.settings import PROJECT_ROOT
from loadgen.orchestrate.locust_run import run_locust as bench_locust
from loadgen.orchestrate.measured_run import read_records
from tests.integration.test_client_timing import (  # noqa: F401 - fixture
    PY,
    mock_url,
    plan_for,
    settings_for,
    start_mock,
)

pytestmark = pytest.mark.integration


def run_locust(url: str, rows: Path, processes: int | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run Locust for 6 s against ``url`` and return the master's request statistics and LLM statistics.

    ``--autostart --autoquit`` rather than ``--headless``: at the end of ``-t`` a headless master quits at once and
    waits only 0.5 s for the workers' last reports (on a loaded machine they come later and are lost); this path
    stops the workers first and quits 5 s later, when their last reports are in. The master port is a free one, not
    Locust's default 5557: workers of another run on this machine (another checkout's tests) would join it. The
    whole process group is killed on a timeout, so no orphaned worker joins a later run.
    """
    master_port = str(free_port())
    argv = [
        PY,
        "-m",
        "locust",
        "-f",
        "loadgen/locust_side/locustfile.py",
        "--host",
        url,
        "--autostart",
        "--autoquit",
        "5",
        "--web-host",
        "127.0.0.1",
        "--web-port",
        str(free_port()),
        "-u",
        "4",
        "-r",
        "4",
        "-t",
        "6s",
        "--records-file",
        str(rows),
        "--llm-stats-file",
        str(rows.with_suffix(".llm.json")),
        "--json",
        "--skip-log",
        "ChatUser",
    ]
    if processes:
        argv[-1:-1] = ["--processes", str(processes), "--master-bind-port", master_port, "--master-port", master_port]
    proc = subprocess.Popen(
        argv,
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "MAX_TOKENS": "5", "LOGS_DIR": str(rows.parent)},
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    decoder, arrays, at = json.JSONDecoder(), [], 0
    while at < len(out):
        if out[at] in "[{":
            value, at = decoder.raw_decode(out, at)
            arrays.append(value)
        else:
            at += 1
    stats = next(a for a in reversed(arrays) if isinstance(a, list) and a)  # the master's aggregate comes last
    return stats, json.loads(rows.with_suffix(".llm.json").read_text(encoding="utf-8"))


def entry(stats: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(e for e in stats if e["method"] == "LLM" and e["name"] == name)


@pytest.mark.parametrize("processes", [None, 2])
def test_aggregated_stats_equal_the_rows(mock_url: str, tmp_path: Path, processes: int | None) -> None:  # noqa: F811
    """The (master's) aggregated e2e request entry and TTFT/output-token statistics equal the rows'; one process or
    two workers alike; one Locust request per chat request; the requests cut by the end of the run are failures
    saying so (and ``cancelled`` lines in requests.jsonl), not lost."""
    rows_path = tmp_path / "rows.jsonl"
    stats, llm = run_locust(mock_url, rows_path, processes)
    every = [RequestRecord.model_validate_json(x) for x in rows_path.read_text().splitlines()]
    rows = [r for r in every if r.error_kind != "incomplete"]
    cut = [r for r in every if r.error_kind == "incomplete"]  # in flight when the run ended: rows, marked so
    log = [json.loads(x) for x in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert len([line for line in log if line["status"] == "cancelled"]) == len(cut)
    e2e = entry(stats, "e2e")
    assert len(rows) > 10 and e2e["num_requests"] == len(rows) + len(cut)
    assert e2e["num_failures"] == len(cut) == llm["requests_cut"]  # 4 users: up to 4 in flight at the end
    expected_ms = sum(r.e2e_ms or 0 for r in rows) + sum(r.e2e_ms or 0 for r in cut)
    assert e2e["total_response_time"] == pytest.approx(expected_ms, abs=5.0 * len(cut) + 1e-6)
    assert [e["name"] for e in stats] == ["e2e"]  # TTFT, TPOT and tok/s are not counted as requests
    ttft = llm["entries"]["ttft"]
    assert ttft["count"] == len(rows)
    assert ttft["total"] == pytest.approx(sum(r.ttft_ms or 0 for r in rows), rel=1e-9)
    assert llm["output_tokens"] == sum(r.output_tokens or 0 for r in rows) == 5 * len(rows)
    assert llm["entries"]["itl"]["count"] == sum(len(r.itl_ms) for r in rows)
    median_ms = statistics.median(r.e2e_ms or 0 for r in rows)
    assert 400 + 4 * 50 <= median_ms <= 1000  # the mock's pacing: TTFT 400 ms, then 4 chunks 50 ms apart


@pytest.fixture(scope="module")
def fast_mock() -> Iterator[str]:
    """A quick mock (10 tokens, TTFT 5 ms, ITL 2 ms) in two processes."""
    proc, url = start_mock("--tokens", "10", "--ttft-ms", "5", "--itl-ms", "2", "--processes", "2")
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("mode", ["closed", "open"])
def test_workers_send_exactly_the_planned_requests(fast_mock: str, tmp_path: Path, mode: str) -> None:
    """REQUESTS=25 gives exactly 25 measured rows with one process and with WORKERS=2, carrying the same prompts and
    sampled lengths; in open loop the two workers together send the one seeded arrival schedule."""
    extra = {"mode": "open_loop", "rate_req_per_sec": 40.0, "burstiness": 1.0} if mode == "open" else {}
    runs: dict[int, list[RequestRecord]] = {}
    for workers in (1, 2):
        folder = tmp_path / f"w{workers}"
        folder.mkdir()
        rows_path = folder / "run.requests.jsonl"
        rows_path.touch()
        plan = plan_for(fast_mock, folder, requests=25, concurrency=4, workers=workers, output_len_mean=6.0,
                        output_len_p95=9.0, max_tokens=10, **extra)
        outcome = bench_locust(settings_for(fast_mock, folder), plan, rows_path)
        rows, bad = read_records(rows_path)
        assert outcome.code == 0 and bad == 0, (folder / "run.locust.log").read_text()[-3000:]
        assert len(rows) == 25 and all(r.phase == "measured" and r.ok for r in rows), [r.error for r in rows]
        assert len(outcome.processes) == workers and sum(p.requests for p in outcome.processes) == 25
        runs[workers] = rows
    def items(rows: list[RequestRecord]) -> list[tuple[str | None, str | None, int | None]]:
        return sorted((r.task, r.input_bucket, r.max_tokens) for r in rows)
    assert items(runs[1]) == items(runs[2])
    assert len({r.max_tokens for r in runs[1]}) > 1  # lengths were sampled, so the comparison means something
    if mode == "open":
        gaps = {w: [b - a for a, b in zip(sorted(r.scheduled_at or 0 for r in rows), sorted(r.scheduled_at or 0 for r in rows)[1:], strict=False)]
                for w, rows in runs.items()}
        assert gaps[1] == pytest.approx(gaps[2], abs=1e-6)
