"""Server cross-check against recorded vLLM 0.32 /metrics scrapes and client rows of the same run."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.records import RequestRecord
from core.serverview import client_overhead, cross_check, overhead_text, verdict_text
from core.serverview_samples import histogram_quantile, parse_exposition

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "metrics"


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


def cut_last(rows: list[RequestRecord], received: int, max_tokens: int | None) -> list[RequestRecord]:
    """The rows with the last request cut mid-stream by Ctrl-C after ``received`` tokens (as the driver writes it)."""
    last = rows[-1].model_copy(
        update={"ok": False, "error_kind": "incomplete", "error": "interrupted", "output_tokens": received,
                "prompt_tokens": None, "max_tokens": max_tokens}
    )
    return [*rows[:-1], last]


def test_request_cut_mid_stream_is_explained_not_a_disagreement() -> None:
    """A Ctrl-C'd run: the server counted the cut request's tokens (and even its success); the client did not. The
    difference lies within what one cut request can add, so client and server agree and the difference is named."""
    before, after, rows = load()
    full = rows[-1].output_tokens or 0
    view = cross_check(before, after, cut_last(rows, received=2, max_tokens=full + 10))
    assert view.disagreements == [], view.disagreements
    assert view.requests_cut == 1
    assert any(line.startswith("generation_tokens: server") and "1 request(s) cut mid-stream" in line
               for line in view.explained), view.explained
    tokens = next(a for a in view.agreements if a.name == "generation_tokens")
    assert tokens.agrees and tokens.server is not None and tokens.client is not None
    assert tokens.server - tokens.client == full and "cut request" in tokens.tolerance
    assert verdict_text(view).startswith("agree (1 request(s) cut mid-stream")


def test_cut_requests_do_not_hide_a_real_difference() -> None:
    """More extra tokens than the cut requests could have generated (their max_tokens) is still a disagreement, and
    a client count above the server's is one with or without cut requests."""
    before, after, rows = load()
    full = rows[-1].output_tokens or 0
    view = cross_check(before, after, cut_last(rows, received=2, max_tokens=full // 2))
    assert any(line.startswith("generation_tokens") for line in view.disagreements)
    extra = [rows[i].model_copy(update={"request_id": f"extra{i}"}) for i in (0, 1)]
    view = cross_check(before, after, [*extra, *cut_last(rows, received=2, max_tokens=None)])
    assert any(line.startswith("requests_succeeded") for line in view.disagreements)


def test_histogram_quantile_interpolates_like_prometheus() -> None:
    """Linear interpolation inside the bucket holding the rank; +Inf returns the last finite bound."""
    buckets = [(0.1, 10.0), (0.5, 30.0), (1.0, 40.0), (float("inf"), 40.0)]

    def value(q: float, of: list[tuple[float, float]]) -> float | None:
        found = histogram_quantile(q, of)
        return None if found is None else found[0]

    assert value(0.5, buckets) == pytest.approx(0.3)
    assert value(0.25, buckets) == pytest.approx(0.1 + 0.4 * 0 / 20 + 0.4 * (10 - 10) / 20)
    assert value(0.99, [(1.0, 1.0), (float("inf"), 2.0)]) == 1.0
    assert histogram_quantile(0.5, []) is None


def test_each_server_percentile_comes_with_the_bucket_it_lies_in() -> None:
    """vLLM's E2E buckets step from 60 to 120 s: 50 requests that all took 61-82 s give an interpolated p90 of 114 s,
    beyond every request (a fresh user read p90 99 s against a client maximum of 82 s). The view carries the bucket,
    [60 s, 120 s], where the true p90 lies; the last bucket's upper bound is open (null)."""
    from core.serverview_samples import latency_view

    def scrape(done: float) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
        name = "vllm:e2e_request_latency_seconds"
        return {f"{name}_bucket": {(("le", "60.0"),): 0.0, (("le", "120.0"),): done, (("le", "+Inf"),): done},
                f"{name}_count": {(): done}, f"{name}_sum": {(): 70.0 * done}}  # fmt: skip

    view = latency_view(scrape(0.0), scrape(50.0), "vllm:e2e_request_latency_seconds")
    assert view.p90_ms == pytest.approx(114_000.0) and view.p90_bucket_ms == (60_000.0, 120_000.0)
    assert view.mean_ms == pytest.approx(70_000.0)
    last = latency_view(scrape(0.0), {**scrape(50.0), "vllm:e2e_request_latency_seconds_bucket": {
        (("le", "60.0"),): 0.0, (("le", "120.0"),): 0.0, (("le", "+Inf"),): 50.0}}, "vllm:e2e_request_latency_seconds")
    assert last.p99_bucket_ms == (120_000.0, None)


def test_garbage_exposition_is_rejected() -> None:
    """Text that is not a Prometheus exposition raises ValueError."""
    with pytest.raises(ValueError):
        parse_exposition("this is { not metrics")


def test_client_overhead_is_client_mean_minus_server_mean() -> None:
    """The recorded run: TTFT, ITL and E2E added by the client are its means minus the server's _sum/_count deltas,
    ITL pooled over every gap of every row as the server's histogram pools every token."""
    before, after, rows = load()
    (overhead,) = cross_check(before, after, rows, server_url="http://vllm:8100").client_overhead
    figures = {f.name: f for f in overhead.figures}
    assert list(figures) == ["ttft", "itl", "e2e"] and overhead.server_url == "http://vllm:8100"
    server_ttft_ms = (32.71913480758667 - 30.92149305343628) / 6 * 1000
    client_ttft_ms = sum(r.ttft_ms or 0 for r in rows) / len(rows)
    assert figures["ttft"].server_mean_ms == pytest.approx(server_ttft_ms)
    assert figures["ttft"].added_ms == pytest.approx(client_ttft_ms - server_ttft_ms)
    gaps = [g for r in rows for g in r.itl_ms]
    server_itl_ms = (1186.823798199 - 1178.1510260500004) / 90 * 1000
    added_itl_ms = sum(gaps) / len(gaps) - server_itl_ms
    assert figures["itl"].added_ms == pytest.approx(added_itl_ms)
    assert figures["itl"].added_percent == pytest.approx(added_itl_ms / server_itl_ms * 100)
    assert overhead.missing is None and "over the server's own (http://vllm:8100)" in overhead_text(overhead)


def test_client_overhead_flags_a_share_above_the_limit() -> None:
    """Rows whose TTFT is 200 ms later than recorded are flagged at a 10 % limit; the limit is stated in the text."""
    before, after, rows = load()
    late = [r.model_copy(update={"ttft_ms": (r.ttft_ms or 0) + 200}) for r in rows]
    assert client_overhead(before, after, rows, max_added_pct=10).flagged == []
    overhead = client_overhead(before, after, late, max_added_pct=10)
    assert overhead.flagged == ["ttft"]
    assert "CLIENT OVERHEAD: adds more than 10% to TTFT" in overhead_text(overhead)
    assert client_overhead(before, after, late, max_added_pct=1000).flagged == []


def test_another_clients_requests_are_named_not_blamed_on_the_client() -> None:
    """The server answered 2 more requests in the window than the run sent (a probe beside it): the cross-check says
    another client used the server, and the client overhead is not judged over figures that hold them (it flagged
    "CLIENT OVERHEAD" for an E2E mean the other requests moved)."""
    before, after, rows = load()
    view = cross_check(before, after, rows[:-2])
    assert any("answered 2 request(s) this run did not send: another client used it" in d for d in view.disagreements)
    (overhead,) = view.client_overhead
    assert overhead.flagged == [] and "2 request(s) of another client" in overhead_text(overhead)
    assert not any("another client" in d for d in cross_check(before, after, rows).disagreements)


def test_client_overhead_says_why_without_vllm_histograms() -> None:
    """A server whose /metrics has no vLLM latency histograms: nothing compared, and the text says why."""
    _, _, rows = load()
    other = parse_exposition("# TYPE up gauge\nup 1\n")
    overhead = client_overhead(other, other, rows)
    assert overhead.figures == [] and overhead.missing is not None
    assert "vllm:time_to_first_token_seconds" in overhead_text(overhead) and "not measured" in overhead_text(overhead)


def test_every_report_form_states_the_client_overhead() -> None:
    """The terminal line, the Markdown and the HTML all carry what the client added over the server's own clock."""
    from loadgen.terminal.summary import format_summary
    from sidecar.render.page_sections import report_sections
    from sidecar.render.pages import write_html, write_markdown
    from tests.unit.sidecar.test_sidecar_store import report

    before, after, rows = load()
    server = cross_check(before, after, rows, server_url="http://vllm:8100")
    r = report().model_copy(update={"server": server})
    text = overhead_text(server.client_overhead[0])
    assert text.startswith("TTFT +") and ", ITL " in text and ", E2E " in text
    assert f"[SERVER] {text}" in format_summary(r, "/tmp/r.json")
    md = write_markdown(report_sections(r, []))
    assert f"Client overhead: {text}" in md and "| http://vllm:8100 | ITL |" in md
    page = write_html(report_sections(r, rows))
    assert "Client overhead: TTFT +" in page and "<td>E2E</td>" in page


def test_client_lag_counts_toward_the_latency_tolerance() -> None:
    """Client TTFTs 100 ms later than the recorded ones: beyond max(30%, 75 ms) alone, within it plus the client's
    own mean event-loop lag of 40 ms (on the client's clock only, and named in the tolerance); not within 20 ms."""
    before, after, rows = load()
    late = [r.model_copy(update={"ttft_ms": (r.ttft_ms or 0.0) + 100.0}) for r in rows]
    ttft = {a.name: a for a in cross_check(before, after, late).agreements}["ttft_mean_ms"]
    assert ttft.agrees is False and ttft.tolerance == "max(30%, 75 ms)"
    lagged = {a.name: a for a in cross_check(before, after, late, client_lag_ms=40.0).agreements}
    assert lagged["ttft_mean_ms"].agrees and lagged["ttft_mean_ms"].tolerance == "max(30%, 75 ms) + client lag 40.0 ms"
    assert lagged["e2e_mean_ms"].tolerance == "max(15%, 100 ms) + client lag 40.0 ms"
    short = cross_check(before, after, late, client_lag_ms=20.0)
    assert any(line.startswith("ttft_mean_ms") for line in short.disagreements)


def test_a_request_cut_after_its_first_tokens_counts_in_the_ttft_and_itl_means() -> None:
    """vLLM's TTFT and ITL histograms hold a request cut mid-stream (it had its first token and gaps); the client's
    TTFT and ITL means take its row too, so both sides average the same requests: the cut run's figures equal the
    whole run's. E2E stays over the finished requests, as vLLM's histogram does."""
    before, after, rows = load()
    full = rows[-1].output_tokens or 0
    cut = cut_last(rows, received=2, max_tokens=full + 10)
    whole = {f.name: f for f in client_overhead(before, after, rows).figures}
    after_cut = {f.name: f for f in client_overhead(before, after, cut).figures}
    assert after_cut["ttft"].client_mean_ms == pytest.approx(whole["ttft"].client_mean_ms)
    assert after_cut["itl"].client_mean_ms == pytest.approx(whole["itl"].client_mean_ms)
    finished = [r.e2e_ms or 0 for r in rows[:-1]]
    assert after_cut["e2e"].client_mean_ms == pytest.approx(sum(finished) / len(finished))
    ttft = next(a for a in cross_check(before, after, cut).agreements if a.name == "ttft_mean_ms")
    assert ttft.client == pytest.approx(sum(r.ttft_ms or 0 for r in rows) / len(rows))
