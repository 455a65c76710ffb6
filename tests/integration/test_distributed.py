"""Locust's distributed mode (master + worker processes) aggregates the same LLM statistics as one process.

Both runs go against the mock server; in each, the master's aggregated ``LLM e2e``/``LLM ttft`` entries must equal
what the per-request rows (written by the workers) say, and the two runs must agree with each other.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
from pathlib import Path
from typing import Any

import pytest

from core.records import RequestRecord
from core.settings import PROJECT_ROOT
from tests.integration.test_client_timing import PY, mock_url  # noqa: F401 - fixture

pytestmark = pytest.mark.integration


def run_locust(url: str, rows: Path, processes: int | None) -> list[dict[str, Any]]:
    argv = [
        PY,
        "-m",
        "locust",
        "-f",
        "loadtest/locustfile.py",
        "--host",
        url,
        "--headless",
        "-u",
        "4",
        "-r",
        "4",
        "-t",
        "6s",
        "--records-file",
        str(rows),
        "--json",
        "--skip-log",
        "ChatUser",
    ]
    if processes:
        argv[-1:-1] = ["--processes", str(processes)]
    out = subprocess.run(
        argv, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "MAX_TOKENS": "5"}
    ).stdout
    decoder, arrays, at = json.JSONDecoder(), [], 0
    while at < len(out):
        if out[at] in "[{":
            value, at = decoder.raw_decode(out, at)
            arrays.append(value)
        else:
            at += 1
    return next(a for a in reversed(arrays) if a)  # the master's (non-empty) aggregate comes last


def entry(stats: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(e for e in stats if e["method"] == "LLM" and e["name"] == name)


@pytest.mark.parametrize("processes", [None, 2])
def test_aggregated_stats_equal_the_rows(mock_url: str, tmp_path: Path, processes: int | None) -> None:  # noqa: F811
    """The (master's) aggregated e2e/ttft counts and means equal the rows'; one process or two workers alike."""
    rows_path = tmp_path / "rows.jsonl"
    stats = run_locust(mock_url, rows_path, processes)
    every = [RequestRecord.model_validate_json(x) for x in rows_path.read_text().splitlines()]
    rows = [r for r in every if r.error_kind != "incomplete"]  # cut by the run's end: rows, but no Locust entry
    e2e, ttft = entry(stats, "e2e"), entry(stats, "ttft")
    assert e2e["num_requests"] == len(rows) > 10 and e2e["num_failures"] == 0
    assert e2e["total_response_time"] == pytest.approx(sum(r.e2e_ms or 0 for r in rows), rel=1e-9)
    assert ttft["num_requests"] == len(rows)
    assert ttft["total_response_time"] == pytest.approx(sum(r.ttft_ms or 0 for r in rows), rel=1e-9)
    median_ms = statistics.median(r.e2e_ms or 0 for r in rows)
    assert 400 + 4 * 50 <= median_ms <= 1000  # the mock's pacing: TTFT 400 ms, then 4 chunks 50 ms apart
