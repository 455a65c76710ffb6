"""Server cross-check against recorded vLLM 0.32 /metrics scrapes and client rows of the same run."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.records import RequestRecord
from core.serverview import cross_check, histogram_quantile, parse_exposition

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "metrics"


def load() -> tuple[dict, dict, list[RequestRecord]]:
    before = parse_exposition((FIXTURES / "vllm_0.32_before.txt").read_text())
    after = parse_exposition((FIXTURES / "vllm_0.32_after.txt").read_text())
    rows = [
        RequestRecord.model_validate_json(line) for line in (FIXTURES / "client_rows.jsonl").read_text().splitlines()
    ]
    return before, after, rows


def test_recorded_run_agrees_with_server() -> None:
    """The recorded 6-request run: counts match exactly, mean TTFT/E2E within tolerance."""
    before, after, rows = load()
    view = cross_check(before, after, rows)
    assert view.requests_succeeded == 6 and view.generation_tokens == sum(r.output_tokens or 0 for r in rows)
    assert view.disagreements == [] and all(a.agrees for a in view.agreements)
    assert view.ttft.count == 6 and view.ttft.mean_ms is not None


def test_missing_request_is_flagged() -> None:
    """Dropping one client row makes request and token counts disagree, with a readable line."""
    before, after, rows = load()
    view = cross_check(before, after, rows[:-1])
    assert any(line.startswith("requests_succeeded") for line in view.disagreements)


def test_histogram_quantile_interpolates_like_prometheus() -> None:
    """Linear interpolation inside the bucket holding the rank; +Inf returns the last finite bound."""
    buckets = [(0.1, 10.0), (0.5, 30.0), (1.0, 40.0), (float("inf"), 40.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.3)
    assert histogram_quantile(0.25, buckets) == pytest.approx(0.1 + 0.4 * 0 / 20 + 0.4 * (10 - 10) / 20)
    assert histogram_quantile(0.99, [(1.0, 1.0), (float("inf"), 2.0)]) == 1.0
    assert histogram_quantile(0.5, []) is None


def test_garbage_exposition_is_rejected() -> None:
    """Text that is not a Prometheus exposition raises ValueError."""
    with pytest.raises(ValueError):
        parse_exposition("this is { not metrics")
