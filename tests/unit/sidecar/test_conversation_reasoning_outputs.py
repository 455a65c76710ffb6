"""Reasoning and conversation figures in every output (terminal, Markdown, HTML, CSV, goodput), and a run with
neither reading exactly as before."""

from __future__ import annotations

import csv
import io

import pytest

from core.distributions import parse_think_time
from core.parsing import parse_slo
from core.records import RequestRecord
from core.report_schema import Report
from core.series_stats import report_values
from core.stats import run_metrics
from loadgen.terminal.summary import format_summary
from sidecar.render.page_sections import report_sections
from sidecar.render.pages import ROW_COLUMNS, rows_csv, summary_csv, write_html, write_markdown
from sidecar.reports.builder import build_metrics
from tests.unit.sidecar.test_sidecar_store import report


def reasoning_rows() -> list[RequestRecord]:
    """Ten rows: six reasoned (first reasoning token at 20 ms, answer at 220 ms), four did not (TTFT 30 ms)."""
    rows = []
    for i in range(10):
        extra: dict[str, object] = {}
        if i < 6:
            extra = {"reasoning_ttft_ms": 20.0, "answer_ttft_ms": 220.0, "reasoning_tokens": 30, "answer_tokens": 10,
                     "reasoning_tokens_source": "usage"}  # fmt: skip
        rows.append(RequestRecord(request_id=f"r{i}", started_at=float(i), ok=True, e2e_ms=400.0,
                                  ttft_ms=20.0 if i < 6 else 30.0, output_tokens=40, prompt_tokens=9, **extra))  # type: ignore[arg-type]
    return rows


def conversation_rows() -> list[RequestRecord]:
    """Two sessions of three turns: prompts grow, later turns find their history cached, 1 s think time."""
    rows = []
    for s in range(2):
        t0 = 100.0 * s
        for turn in (1, 2, 3):
            rows.append(RequestRecord(
                request_id=f"s{s}-{turn}", started_at=t0 + 2.0 * (turn - 1), ok=True, e2e_ms=500.0,
                ttft_ms=50.0 / turn, itl_ms=[10.0, 12.0], output_tokens=20, prompt_tokens=100 * turn,
                cached_tokens=0 if turn == 1 else 100 * (turn - 1), session_id=f"s{s}", turn=turn,
                think_time_s=None if turn == 1 else 1.0))  # fmt: skip
    return rows


def as_report(rows: list[RequestRecord], **config: object) -> Report:
    base = report()
    metrics = build_metrics(run_metrics(rows, slo=parse_slo("answer_ttft_ms<=100")), base.resources)
    return base.model_copy(update={"metrics": metrics, "config": base.config.model_copy(update=config)})


def test_reasoning_figures_sit_beside_ttft_in_every_output() -> None:
    """TTFT stays the first token of any kind (20/30 ms); the answer TTFT (220 ms for reasoning rows, TTFT for the
    others) is in the metrics, the terminal, Markdown, HTML, both CSVs and a series point's figures (sweeps, make
    compare); goodput can bound it."""
    rows = reasoning_rows()
    r = as_report(rows)
    m = r.metrics
    assert m.ttft.p50_ms == 20.0 and m.reasoning is not None
    assert m.reasoning.requests == 6 and m.reasoning.answer_ttft.p50_ms == 220.0 and m.reasoning.think.p50_ms == 200.0
    assert (m.reasoning.reasoning_tokens_mean, m.reasoning.answer_tokens_mean) == (30.0, 10.0)
    assert m.goodput_percent == pytest.approx(40.0)  # only the four rows without reasoning answer within 100 ms
    terminal = "\n".join(format_summary(r, "reports/x.json"))
    assert "[RESULT] Reasoning: 6 of 10 requests reasoned | answer TTFT P50 220 ms" in terminal
    assert "| Answer TTFT p50 / p99 | 220 ms / 220 ms (first answer token; TTFT counts reasoning) |" in \
        write_markdown(report_sections(r, []))
    assert "Answer TTFT p50 / p99" in write_html(report_sections(r, rows))
    table = list(csv.DictReader(io.StringIO(rows_csv(rows))))
    assert table[0]["answer_ttft_ms"] == "220.0" and table[9]["answer_ttft_ms"] == ""
    assert list(table[0])[list(table[0]).index("ttft_ms") + 1] == "reasoning_ttft_ms"
    assert next(csv.DictReader(io.StringIO(summary_csv(r))))["answer_ttft_p50_ms"] == "220.0"
    assert report_values(r)["answer_ttft_p50_ms"] == 220.0  # sweeps, series and make compare
    assert report_values(report())["answer_ttft_p50_ms"] is None


def test_a_run_without_reasoning_or_sessions_reads_as_before() -> None:
    """No reasoning and no conversation: no new metric, line, row or column anywhere."""
    r = report()
    assert r.metrics.reasoning is None and r.metrics.sessions is None and r.metrics.turns == []
    terminal = "\n".join(format_summary(r, "reports/x.json"))
    assert "Reasoning" not in terminal and "[TURN]" not in terminal and "Sessions" not in terminal
    text = write_markdown(report_sections(r, []))
    assert "Answer TTFT" not in text and "Conversations" not in text and "Sessions" not in text
    rows = [RequestRecord(request_id="a", started_at=0.0, ok=True, ttft_ms=1.0, e2e_ms=2.0)]
    assert next(csv.reader(io.StringIO(rows_csv(rows)))) == list(ROW_COLUMNS)
    assert "answer_ttft_p50_ms" not in summary_csv(r) and "sessions" not in summary_csv(r)


def test_conversations_give_per_turn_and_per_session_figures_in_every_output() -> None:
    """Per turn: TTFT, ITL, E2E, prompt tokens and the prefix-cache hit from usage (turn 3: 200 of 300 tokens);
    per session: the total time (first send → last end: 4.5 s); in the terminal, Markdown, HTML and CSV."""
    rows = conversation_rows()
    r = as_report(rows, session_turns=3, session_followups="dataset", think_time=parse_think_time("exponential:1s"))
    m = r.metrics
    assert [(t.turn, t.prompt_tokens_mean, t.cache_hit_percent) for t in m.turns] == [
        (1, 100.0, 0.0), (2, 200.0, 50.0), (3, 300.0, pytest.approx(200 / 3))]
    assert m.turns[1].itl is not None and m.turns[1].itl.p50_ms == 11.0 and m.turns[2].e2e.p50_ms == 500.0  # type: ignore[union-attr]
    assert m.sessions is not None and m.sessions.sessions == 2 and m.sessions.turns_mean == 3.0
    assert m.sessions.total.p50_ms == pytest.approx(4500.0) and m.sessions.think_time_mean_s == 1.0
    assert m.sessions.cache_hit_percent == pytest.approx(100 * 600 / 1200)
    terminal = format_summary(r, "reports/x.json")
    assert "[RESULT] Sessions: 2 sessions, 3.0 turns each, 0 ended by a failure; total time P50 4.5 s" in \
        "\n".join(terminal)
    assert any(line.startswith("[TURN] turn 3: 2 requests, 300 prompt tokens") for line in terminal)
    text = write_markdown(report_sections(r, []))
    assert "## Conversations: per turn" in text and "| 3 | 2 | 300 | 17 / 17 | 11.0 / 12.0 | 500 / 500 | 200 | 67 % |" \
        in text
    assert "| Follow-up turns | the dataset's real follow-up turns |" in text and "| think_time | exponential:1s |" in text
    assert "Conversations: per turn" in write_html(report_sections(r, rows))
    header = next(csv.reader(io.StringIO(rows_csv(rows))))
    assert header[-4:] == ["session_id", "turn", "think_time_s", "cached_tokens"]
    assert next(csv.DictReader(io.StringIO(summary_csv(r))))["sessions"] == "2"
