"""The terminal's one summary printer (pure): a run's ``[RESULT]``/``[ENERGY]``/``[COST]``/``[COMPARE]``/``[REPORT]``
lines (``make benchmark``; energy and cost: docs/energy.md), a series' ``[SWEEP]``/``[REPEAT]``/``[KNEE]`` lines and
an A/B comparison's ``[DIFF]``/``[COMPARE]`` lines (``make compare``)."""

from __future__ import annotations

from pathlib import Path

from core.clientview import ClientView, share_text
from core.comparison import ABComparison, comparison_lines, flag_text, report_notes
from core.conversations import sessions_text, turns_text
from core.energy import NO_ENERGY_GAP
from core.fingerprint import server_down_words, unusable_reason
from core.intervals import PointComparison, change_text, interval_text
from core.reasoning import reasoning_text
from core.records import CutRequests
from core.report_schema import BenchmarkConfig, Report, causes_text
from core.schedule import schedule_text
from core.series_stats import SERIES_METRICS, SeriesReport
from core.serverview import overhead_text, verdict_text
from core.units import pct, usd
from core.units import quantity as _n

COMPARE_LABELS = (("throughput_req_per_sec", "throughput"), ("e2e_p99_ms", "p99 latency"), ("ttft_p99_ms", "p99 TTFT"),
                  ("output_tokens_per_sec", "output tok/s"), ("energy_j_per_output_token", "J/output token"),
                  ("cost_usd_per_1m_output_tokens", "$/1M output tokens"))
"""The changes a run's ``[COMPARE]`` line shows, where both runs have them."""
WHERE_MEASURED = ("energy_j_per_output_token", "cost_usd_per_1m_output_tokens", "cost_usd_per_1m_total_tokens")
"""Series metrics a series' or ``make compare``'s ``[COMPARE]`` line adds where both sides have them."""


def energy_lines(report: Report) -> list[str]:
    """``[ENERGY]`` and ``[COST]`` lines (none for a report from before energy was measured, or unpriced)."""
    m, energy, basis = report.metrics, report.resources.energy, report.cost
    lines = []
    if energy is not None and m.energy_j is None:
        lines.append(f"[ENERGY] n/a: {energy.unavailable_reason}")
    elif energy is not None:
        idle = f"idle {_n(m.idle_power_w, 'W')} before the run" if m.idle_power_w is not None else (
            f"idle n/a: {energy.idle_unavailable_reason}")
        lines.append(f"[ENERGY] {_n(m.energy_j, 'J')} over {_n(energy.window_s, 's')} (mean "
                     f"{_n(m.power_w_mean, 'W')}; {idle}): {_n(m.energy_j_per_output_token, 'J/output token')}, "
                     f"{_n(m.energy_j_per_request, 'J/request')}, {_n(m.output_tokens_per_j, 'output tokens/J')} "
                     f"({energy.method}, every {energy.sample_interval_s:g} s)")
    if basis is not None and basis.price_usd_per_hour is not None:
        if basis.hourly_usd is None:
            lines.append(f"[COST] n/a: {basis.unavailable_reason}")
        else:
            lines.append(f"[COST] {usd(m.cost_usd_per_1m_output_tokens)}/1M output tokens, "
                         f"{usd(m.cost_usd_per_1m_total_tokens)}/1M total tokens ({basis.price_usd_per_hour:g} USD/h "
                         f"per {basis.price_per} x {basis.units})")
    if basis is not None and basis.energy_price_usd_per_kwh is not None and m.energy_j is not None:
        lines.append(f"[COST] energy {usd(m.energy_cost_usd_per_1m_output_tokens)}/1M output tokens, "
                     f"{usd(m.energy_cost_usd_per_1m_total_tokens)}/1M total tokens at "
                     f"{basis.energy_price_usd_per_kwh:g} USD/kWh")
    return lines


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} ms"


def _gb(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} GB"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def memory_text(report: Report) -> str:
    """The seed's ``GPU memory usage: 2.68 GB (KV pool 1.00 GB)``; without a GPU, why and vLLM's RSS peak."""
    m = report.metrics
    if m.gpu_mem_peak_gb is not None:
        pool = f" (KV pool {m.kv_cache_gb:.2f} GB)" if m.kv_cache_gb is not None else ""
        return f"GPU memory usage: {m.gpu_mem_peak_gb:.2f} GB{pool}"
    why = report.resources.gpu_unavailable_reason or "no GPU"
    if m.vllm_rss_peak_gb is not None:
        return f"GPU memory usage: n/a (no GPU: {why}; vLLM RSS peak {m.vllm_rss_peak_gb:.2f} GB)"
    return f"GPU memory usage: n/a (no GPU: {why})"


def load_line(plan: BenchmarkConfig) -> str:
    """The seed's ``[INFO] Running load test: 50 concurrent users, 200 total requests`` (or the duration / rate)."""
    if plan.rate_req_per_sec is not None:
        shape = f"open loop at {plan.rate_req_per_sec:g} req/s"
        if plan.session_turns > 1:
            shape = f"open loop at {plan.rate_req_per_sec:g} conversations/s of up to {plan.session_turns} turns"
        if plan.rate_end_req_per_sec is not None:
            shape += f" ramping to {plan.rate_end_req_per_sec:g} req/s"
        if plan.max_in_flight is not None:
            shape += f", at most {plan.max_in_flight} in flight"
    else:
        shape = f"{plan.concurrency} concurrent users"
        if plan.session_turns > 1:
            shape += f" in {plan.session_turns}-turn conversations"
    if plan.session_turns > 1 and plan.think_time is not None:
        shape += f", think time {plan.think_time.text}"
    amount = f"{plan.requests} total requests" if plan.duration_s is None else f"for {plan.duration_s:g} s"
    workers = f" ({plan.workers} Locust worker processes)" if plan.workers > 1 else ""
    return f"[INFO] Running load test: {shape}, {amount}{workers}"


def format_summary(report: Report, report_path: str) -> list[str]:
    """The lines after the run: the seed's two ``[RESULT]`` lines first (scripts grep them), then ours, ``[REPORT]``,
    ``Benchmark completed. Report generated. Report path: …`` and ``Key insight: …``."""
    m = report.metrics
    lines = [
        f"[RESULT] Avg latency: {_ms(m.latency_avg_ms)} | P90: {_ms(m.latency_p90_ms)} | P99: {_ms(m.latency_p99_ms)}",
        f"[RESULT] Throughput: {m.throughput_req_per_sec:.2f} req/s | {memory_text(report)}",
        f"[RESULT] Requests: {m.requests_ok}/{m.requests_total} ok | errors "
        + ("n/a" if m.error_rate_percent is None else f"{m.error_rate_percent:.1f}%")
        + (f": {causes_text(report.errors)}" if report.errors.by_kind else "")
        + (f" | {m.requests_incomplete} incomplete (in flight at the end, left out)" if m.requests_incomplete else ""),
        f"[RESULT] Latency P50: {_ms(m.latency_p50_ms)} | TTFT P50: {_ms(m.ttft_p50_ms)} P99: {_ms(m.ttft_p99_ms)}"
        f" | TPOT P50: {_ms(m.tpot.p50_ms)} P99: {_ms(m.tpot.p99_ms)} | ITL P50: {_ms(m.itl.p50_ms)}"
        f" P99: {_ms(m.itl.p99_ms)}",
        f"[RESULT] Tokens: {m.output_tokens_per_sec:.1f} output tok/s | {m.total_tokens_per_sec:.1f} total tok/s | "
        f"output tokens mean {_num(m.output_lengths.actual_mean)} (asked {_num(m.output_lengths.requested_mean)})"
        f" | peak concurrency {m.peak_concurrency}",
    ]
    if m.cut is not None:
        lines.append(cut_line(m.cut))
    kv = report.resources.kv_cache
    if kv is not None and kv.samples:
        preempted = report.server.preemptions if report.server is not None else None
        tokens = f" ({kv.pool_tokens:,} tokens)" if kv.pool_tokens else ""
        bound = f" — KV-bound: {m.kv_bound}" if m.kv_bound else " — not KV-bound"
        switched = " (the pool of the engine the run began on: vLLM was switched)" if report.engine_switch else ""
        lines.append(f"[RESULT] KV cache {_gb(kv.pool_gb)}{tokens}: peak {_num(kv.usage_peak_percent)}% used, up to "
                     f"{_num(kv.requests_running_peak)} running / {_num(kv.requests_waiting_peak)} waiting, "
                     f"{_num(preempted)} preemptions{bound}{switched}")
    elif kv is not None and kv.unavailable_reason:
        lines.append(f"[RESULT] KV cache n/a ({kv.unavailable_reason})")
    if m.kv_bound:
        lines.append(f"[WARN] KV-bound run ({m.kv_bound}): raise KV_CACHE_GB or lower CONCURRENCY to measure compute.")
    if m.schedule is not None:
        lines.append(f"[LOAD] Open loop: {schedule_text(m.schedule)}")
        if m.schedule.fell_behind:
            lines.append(f"[WARN] Behind schedule: {m.schedule.reason}. The server saw less load than RATE asked for.")
    if m.goodput_req_per_sec is not None:
        slo = ",".join(f"{k}<={v:g}" for k, v in m.slo.items())
        lines.append(f"[RESULT] Goodput: {m.goodput_req_per_sec:.2f} req/s ({m.goodput_percent:.1f}% within {slo})")
    lines += energy_lines(report)
    if m.reasoning is not None:  # reasoning streams: the answer's first token beside TTFT (any token)
        lines.append(f"[RESULT] Reasoning: {reasoning_text(m.reasoning, m.requests_ok)}")
    if m.sessions is not None:
        lines.append(f"[RESULT] Sessions: {sessions_text(m.sessions)}")
    lines += [f"[TURN] {line}" for line in turns_text(m.turns)]
    if missing := m.output_lengths.usage_missing:
        sources = ", ".join(f"{n} by {source}" for source, n in m.output_token_sources.items() if source != "usage")
        lines.append(f"[WARN] {missing} request(s) carried no usage block: tokens counted {sources}")
    lines += [f"[WARN] {gap}" for gap in report.gaps if not gap.startswith(NO_ENERGY_GAP)]  # [ENERGY] n/a says it
    if (server := report.server) is not None:
        client_ttft = {a.name: a for a in server.agreements}["ttft_mean_ms"].client
        lines.append(f"[SERVER] vLLM /metrics: {server.requests_succeeded} requests, {server.generation_tokens} "
                     f"generated tokens, TTFT mean {_ms(server.ttft.mean_ms)} (client {_ms(client_ttft)}) — client "
                     f"and server {verdict_text(server)}")  # fmt: skip
        lines += [f"[SERVER] {overhead_text(o)}" for o in server.client_overhead]
        if server.prefix_cache_hit_rate_percent is not None:
            lines.append(f"[SERVER] Prefix cache: {server.prefix_cache_hit_rate_percent:.1f}% hit rate "
                         f"({server.prefix_cache_hits:,} of {server.prefix_cache_queries:,} prompt tokens)")
    if report.cluster is not None:  # engines behind vLLM's router
        per = ", ".join(f"{r.name} {r.requests_succeeded if r.requests_succeeded is not None else '?'}"
                        + ("" if r.state == "up" else " DOWN") for r in report.cluster.replicas)  # fmt: skip
        imbalance = report.cluster.imbalance_percent
        lines.append(f"[REPLICAS] requests per replica: {per}; imbalance "
                     f"{'n/a' if imbalance is None else f'{imbalance:.0f}%'} (policy {report.cluster.router_policy})")
    for host in report.resources.hosts:  # PEER_SIDECARS: GPU memory per host (a missing one is in the gaps above)
        if host.unavailable_reason is None:
            gpus = ", ".join(f"GPU {g.index} {_gb(g.mem_used_peak_gb)}" for g in host.gpus) or "no GPU read"
            lines.append(f"[HOSTS] {host.host}: GPU memory peak {_gb(host.gpu_mem_peak_gb)} ({gpus})")
    if report.client is not None:
        lines += client_lines(report.client)
    if (profile := report.profile) is not None:
        lines.append(f"[PROFILE] {len(profile.files)} trace file(s) in reports/{profile.dir}/ — open with "
                     f"{profile.open_with}")
    if report.environment.synthetic:
        lines.append(f"[WARN] Synthetic model served ({report.environment.synthetic_reason})")
    lines += compare_lines(report)
    lines.append(report_line(report, report_path))
    files = (("Markdown", report.markdown_file), ("HTML", report.html_file), ("CSV", report.csv_file))
    lines += files_lines(report_path, files)
    if report.interrupted or report.server_down:  # a script grepping "Benchmark completed" must not take it for one
        why = "interrupted" if report.interrupted else f"ended early: {server_down_words(report.server_down or '')}"
        lines.append(f"Benchmark {why}. Partial report generated. Report path: {report_path}")
    else:
        lines.append(f"Benchmark completed. Report generated. Report path: {report_path}")
    lines.append(f"Key insight: {m.key_insight}")
    return lines


def side_text(group: str, value: str | None) -> str:
    """One side of a ``[DIFF]`` line: a vLLM flag one side did not pass is vLLM's default, another field unknown."""
    if value is not None:
        return value
    return flag_text(None) if group == "vLLM flags" else "unset"


def cut_line(cut: CutRequests) -> str:
    """``[RESULT] Cut by the run's end: 32 (the end of the run 32) after up to 61 s in flight; 20 had a first token
    (TTFT P50 41,000 ms P99 …), 1,204 chunks received``."""
    causes = ", ".join(f"{cause} {n}" for cause, n in cut.by_cause.items())
    waited = f" after up to {cut.in_flight.max_ms / 1000.0:.0f} s in flight" if cut.in_flight.max_ms is not None else ""
    first = "none had a first token"
    if cut.with_first_token:
        first = f"{cut.with_first_token} had a first token (TTFT P50 {_ms(cut.ttft.p50_ms)} P99 {_ms(cut.ttft.p99_ms)})"
    chunks = f"{cut.content_chunks:,} chunks received"
    return f"[RESULT] Cut by the run's end: {cut.requests} ({causes}){waited}; {first}, {chunks}"


def report_line(report: Report, report_path: str) -> str:
    """The seed's ``[REPORT] Baseline saved to <path>``, or for a run that cannot be a reference
    (:func:`core.fingerprint.unusable_reason`) ``[REPORT] Report saved to <path> (not a baseline: <why>)``."""
    why = unusable_reason(report)
    if why is None:
        return f"[REPORT] Baseline saved to {report_path}"
    return f"[REPORT] Report saved to {report_path} (not a baseline: {why.removeprefix(report.report_id + ' ')})"


def client_lines(client: ClientView) -> list[str]:
    """``[CLIENT]`` (the load processes' CPU and event-loop lag, how much it could move TTFT/ITL) and, for a
    client-limited run, the ``[WARN]`` saying why."""
    lines = []
    if client.processes:
        cores = "/".join(f"{p.cpu_cores:.2f}" for p in client.processes)
        worst = max(client.lag_impact, key=lambda i: i.share_pct, default=None)
        moved = "" if worst is None else (f"; could move {worst.figure.removesuffix('_ms').replace('_', ' ')} by "
                                          f"{share_text(worst.share_pct)} (limit {client.lag_limit_pct:g}%)")
        lag = "no lag samples"
        if client.lag_p50_ms is not None and client.lag_p99_ms is not None:
            lag = f"event-loop lag p50 {client.lag_p50_ms:.2f} ms, p99 {client.lag_p99_ms:.2f} ms"
        lines.append(f"[CLIENT] {len(client.processes)} load process(es), CPU {cores} cores; {lag}{moved}")
    if client.client_limited:
        lines.append(f"[WARN] Client-limited run: {client.reason}. The numbers measure the load generator.")
    return lines


def files_lines(json_path: str, named: tuple[tuple[str, str | None], ...]) -> list[str]:
    """``[REPORT] Markdown: reports/x.md | HTML: reports/x.html`` for the ``named`` (label, file name or None) files
    written beside ``json_path``; none when none was."""
    folder = Path(json_path).parent
    files = [f"{label}: {folder / name}" for label, name in named if name]
    return ["[REPORT] " + " | ".join(files)] if files else []


def moved_text(name: str, previous: str | None, new: str) -> str | None:
    """``[BASELINE] v1 moved: was <old id>, now <new id>``; None for a new name or the same id."""
    if previous is None or previous == new:
        return None
    return f"[BASELINE] {name} moved: was {previous}, now {new}"


def compare_lines(report: Report) -> list[str]:
    """``[COMPARE] vs_v0.2.1: +12% throughput, -3.0% p99 latency (benchmark_report_…)`` each, then the notes; a run
    that cannot be a reference (:func:`core.fingerprint.unusable_reason`: interrupted, ended early, …) says so after
    its changes, which are then not like for like."""
    lines = []
    for name, comparison in report.comparison.items():
        if not comparison.points:
            continue
        present = [(comparison.points[0].changes.get(key), label) for key, label in COMPARE_LABELS]
        parts = [f"{pct(c.change_pct)} {label}" for c, label in present if c and c.change_pct is not None]
        lines.append(f"[COMPARE] {name}: {', '.join(parts) or 'no comparable figure'} ({comparison.against})")
    why = unusable_reason(report) if lines else None
    unlike = [f"[COMPARE] not like for like: {why}, so these changes are partly its own"] if why else []
    return lines + unlike + [f"[COMPARE] {note}" for note in report_notes(report)]


TABLE_METRICS = ("throughput_req_per_sec", "output_tokens_per_sec", "ttft_p99_ms", "itl_p99_ms", "e2e_p99_ms")
COMPARE_METRICS = ("throughput_req_per_sec", "output_tokens_per_sec", "ttft_p99_ms", "e2e_p99_ms")
AB_METRICS = ("ttft_p50_ms", "itl_p50_ms", "itl_p99_ms", "tpot_p50_ms", "e2e_p50_ms", "error_rate_percent")
"""What `make compare` adds to a point's line: a flag such as --max-num-seqs moves the medians and ITL most."""


def change_parts(point: PointComparison, hits: bool = False) -> str:
    """``throughput +12% [+8%, +16%] better; …`` of one compared point; ``hits`` (`make compare`): also
    :data:`AB_METRICS` and the prefix-cache hit rate's two values."""
    shown = COMPARE_METRICS + (AB_METRICS if hits else ()) + WHERE_MEASURED
    parts = [f"{SERIES_METRICS[m][0]} {change_text(c, SERIES_METRICS[m][2])}" for m in shown
             if (c := point.changes.get(m)) is not None and (m in COMPARE_METRICS or c.change_pct is not None)]
    rate = point.changes.get("prefix_cache_hit_rate_percent")
    if hits and rate is not None and rate.a_mean is not None and rate.b_mean is not None:
        parts.append(f"prefix-cache hit rate {rate.a_mean:.1f}% -> {rate.b_mean:.1f}%")
    return "; ".join(parts)


def series_lines(series: SeriesReport, path: str) -> list[str]:
    """One line per point (means ± 95 % half widths), the knee, the comparisons and where the files are."""
    tag = "[SWEEP]" if series.sweep else "[REPEAT]"
    header = "  ".join(f"{SERIES_METRICS[m][0]} ({SERIES_METRICS[m][1]})" for m in TABLE_METRICS)
    lines = [f"{tag} {len(series.points)} point(s) x {series.repeat} run(s); mean ± 95% CI half width: {header}"]
    for point in series.points:
        cells = [interval_text(point.metrics.get(m), 2 if m == "throughput_req_per_sec" else 0) for m in TABLE_METRICS]
        slo = "" if point.meets_slo is None else ("  meets SLO" if point.meets_slo else "  misses SLO")
        lines.append(f"{tag} {point.label} ({len(point.report_ids)} run(s)): " + " | ".join(cells) + slo)
    if series.sweep or series.slo:
        lines.append(f"[KNEE] {series.knee.line}")
        lines += [f"[KNEE] note: {note}" for note in series.knee.notes]
    for name, comparison in series.comparison.items():
        lines += [f"[COMPARE] {name} {p.label}: {change_parts(p)} ({comparison.against})" for p in comparison.points]
        lines += [f"[COMPARE] {line}" for line in comparison_lines(name, comparison)]
    lines += [f"[NOTE] {note}" for note in series.notes]
    lines.append(f"[REPORT] Series saved to {path}")
    return lines + files_lines(path, (("Markdown", series.markdown_file), ("HTML", series.html_file)))


def ab_compare_lines(comparison: ABComparison, path: str) -> list[str]:
    """What differs (model and vLLM flags first), then each paired point's changes, then the files."""
    a, b = comparison.a, comparison.b
    lines = [f"[COMPARE] A = {a.ref} ({a.id}), B = {b.ref} ({b.id})"]
    if comparison.differences:
        lines += [f"[DIFF] {d.group}: {d.field}: {side_text(d.group, d.a)} -> {side_text(d.group, d.b)}"
                  for d in comparison.differences]  # fmt: skip
    else:
        lines.append("[DIFF] no configuration field differs")
    lines += [f"[COMPARE] {p.against_label} -> {p.label}: {change_parts(p, hits=True)}" for p in comparison.points]
    lines += [f"[NOTE] {note}" for note in comparison.notes]
    lines.append(f"[REPORT] Comparison saved to {path}")
    return lines + files_lines(path, (("HTML", comparison.html_file),))
