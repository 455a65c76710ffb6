"""The tables a human reads, as plain rows: one definition shared by the Markdown and HTML pages (cells written by
:mod:`sidecar.render.cells`; energy and cost rows in :mod:`sidecar.render.energy_rows`)."""

from __future__ import annotations

from collections.abc import Sequence

from core.comparison import Side
from core.conversations import sessions_text
from core.fingerprint import unusable_reason
from core.intervals import Change, Interval, PointComparison, change_text, interval_text
from core.records import CutRequests
from core.report_schema import BenchmarkConfig, Environment, Report
from core.schedule import schedule_text
from core.series_stats import SERIES_METRICS, SeriesReport
from core.serverview import ServerView
from core.serverview_cluster import ClusterView
from core.units import pct
from sidecar.render.cells import Row, fmt
from sidecar.render.energy_rows import energy_headline_rows

COMPARISON_COLUMNS = (
    ("throughput_req_per_sec", "throughput"),
    ("output_tokens_per_sec", "output tok/s"),
    ("e2e_p50_ms", "p50 latency"),
    ("e2e_p99_ms", "p99 latency"),
    ("ttft_p99_ms", "p99 TTFT"),
)
COMPARISON_HEADER = ["vs", "report", *(label for _, label in COMPARISON_COLUMNS), "error rate %"]
"""Column titles of :func:`comparison_rows`."""
OVERHEAD_HEADER = ["server", "figure", "client mean", "server mean", "client added"]
"""Columns of :func:`overhead_rows`."""


def headline_rows(report: Report) -> list[Row]:
    """The run's headline figures."""
    m = report.metrics
    latencies = (m.latency_avg_ms, m.latency_p50_ms, m.latency_p90_ms, m.latency_p99_ms)
    rows = [
        ("Requests ok / total", f"{m.requests_ok} / {m.requests_total}"
         + (f" (+{m.requests_incomplete} cut by the run's end, left out)" if m.requests_incomplete else "")),
        ("Error rate", fmt(m.error_rate_percent, "%", 1)),
        ("Throughput", fmt(m.throughput_req_per_sec, "req/s")),
        ("Output tokens", fmt(m.output_tokens_per_sec, "tok/s", 1)),
        ("Latency avg / p50 / p90 / p99", " / ".join(fmt(v, "ms", 0) for v in latencies)),
        ("TTFT p50 / p99", f"{fmt(m.ttft_p50_ms, 'ms', 0)} / {fmt(m.ttft_p99_ms, 'ms', 0)}"),
        *reasoning_rows(report),  # reasoning streams: the answer's first token beside TTFT
        ("TPOT p50 / p99", f"{fmt(m.tpot.p50_ms, 'ms', 1)} / {fmt(m.tpot.p99_ms, 'ms', 1)}"),
        ("ITL p50 / p99", f"{fmt(m.itl.p50_ms, 'ms', 1)} / {fmt(m.itl.p99_ms, 'ms', 1)}"),
        ("Peak concurrency", str(m.peak_concurrency)),
        ("Measured window", fmt(m.duration_s, "s", 1)
         + (f" (first request sent to last answer; DURATION {report.config.duration_s:g} s plus the drain)"
            if report.config.duration_s and m.duration_s and m.duration_s > report.config.duration_s + 1 else "")),
        ("GPU memory peak", fmt(m.gpu_mem_peak_gb, "GB")),
        ("vLLM RSS peak", fmt(m.vllm_rss_peak_gb, "GB")),
        ("KV cache pool / peak used", kv_text(report)),
    ]
    if m.cut is not None:
        rows.insert(1, ("Cut requests received", cut_text(m.cut)))
    if m.kv_bound:
        rows.append(("KV-bound", m.kv_bound))
    if m.steady is not None and m.steady.found:
        st = m.steady
        rows.append((f"Steady state {fmt(st.start_s, 's', 0)}–{fmt(st.end_s, 's', 0)}",
                     f"{fmt(st.throughput_req_per_sec, 'req/s')}, {fmt(st.output_tokens_per_sec, 'tok/s', 1)}, "
                     f"E2E p50 / p99 {fmt(st.e2e.p50_ms, 'ms', 0)} / {fmt(st.e2e.p99_ms, 'ms', 0)}, TTFT p99 "
                     f"{fmt(st.ttft.p99_ms, 'ms', 0)}, {fmt(st.in_flight_mean, '', 1)} in flight"))  # fmt: skip
    if m.schedule is not None:
        rows.append(("Open-loop load", schedule_text(m.schedule)))
        if m.schedule.fell_behind:
            rows.append(("Fell behind its schedule", m.schedule.reason or "yes"))
    server = report.server
    if server is not None and server.prefix_cache_hit_rate_percent is not None:
        rows.append(("Prefix-cache hit rate", f"{fmt(server.prefix_cache_hit_rate_percent, '%', 1)} "
                     f"({server.prefix_cache_hits:,} of {server.prefix_cache_queries:,} prompt tokens)"))  # fmt: skip
    if report.config.prefix_len_tokens:
        rows.append(("Shared prefixes", f"{report.config.prefix_count} × {report.config.prefix_len_tokens} tokens"))
    if report.config.trace_file:
        c = report.config
        rows.append(("Trace replay", f"{c.trace_rows} {c.trace_format} rows of {c.trace_file} at {c.trace_speed:g}x "
                                     f"(sha256 {(c.trace_sha256 or '')[:12]})"))
    rows += session_rows(report)
    if m.goodput_req_per_sec is not None:
        rows.append(("Goodput", f"{fmt(m.goodput_req_per_sec, 'req/s')} ({fmt(m.goodput_percent, '%', 1)})"))
    return rows + energy_headline_rows(report)


def cut_text(cut: CutRequests) -> str:
    """``20 of 32 a first token (TTFT p50 / p99 41000 ms / 58000 ms), 1,204 chunks; in flight up to 61000 ms``."""
    return (
        f"{cut.with_first_token} of {cut.requests} a first token (TTFT p50 / p99 {fmt(cut.ttft.p50_ms, 'ms', 0)} / "
        f"{fmt(cut.ttft.p99_ms, 'ms', 0)}), {cut.content_chunks:,} chunks; in flight up to "
        f"{fmt(cut.in_flight.max_ms, 'ms', 0)}"
    )


def error_rate_change(change: Change | None) -> str:
    """``0.0 → 2.5 (+2.5 pp)``: the error rate's two values and change in points (``(=)``: none); else ``n/a``."""
    if change is None or change.a_mean is None or change.b_mean is None:
        return "n/a"
    change_pp = change.b_mean - change.a_mean
    moved = "(=)" if round(change_pp, 1) == 0 else f"({change_pp:+.1f} pp)"
    return f"{change.a_mean:.1f} → {change.b_mean:.1f} {moved}"


def comparison_rows(report: Report) -> list[list[str]]:
    """One row per comparison that compared (its one point): name, the other report, percent changes, then the
    error rate's two values."""
    return [[name, c.against or "",
             *(pct(change.change_pct if (change := c.points[0].changes.get(key)) else None)
               for key, _ in COMPARISON_COLUMNS),
             error_rate_change(c.points[0].changes.get("error_rate_percent"))]
            for name, c in report.comparison.items() if c.points]  # fmt: skip


def kv_text(report: Report) -> str:
    """``1.00 GB (58,240 tokens), peak 37% used, ≤ 8 running / 0 waiting`` or why it is unknown."""
    kv = report.resources.kv_cache
    if kv is None:
        return "n/a"
    if not kv.samples:
        return f"n/a ({kv.unavailable_reason})" if kv.unavailable_reason else "n/a"
    tokens = f" ({kv.pool_tokens:,} tokens)" if kv.pool_tokens else ""
    return (
        f"{fmt(kv.pool_gb, 'GB')}{tokens}, peak {fmt(kv.usage_peak_percent, '%', 0)} used, "
        f"≤ {fmt(kv.requests_running_peak)} running / {fmt(kv.requests_waiting_peak)} waiting"
    )


def environment_rows(e: Environment, gpu_reason: str | None = None) -> list[Row]:
    """Hardware and software a run or a series ran on (``gpu_reason``: why no GPU was sampled)."""
    gpu = f"{e.gpu_count} x {e.gpu_model}" if e.gpu_model else f"none ({gpu_reason or 'no GPU'})"
    if e.gpu_indices:
        gpu += f" (NVML {', '.join(map(str, e.gpu_indices))})"
    engine = f"engine: CUDA runtime {fmt(e.engine_cuda_runtime)}, torch {fmt(e.engine_torch_version)}"
    return [
        ("GPU", gpu),
        ("Driver / CUDA", f"{fmt(e.driver_version)} / {fmt(e.cuda_version)} (driver's maximum); {engine}"),
        ("vLLM", f"{fmt(e.vllm_version)} (fingerprint {fmt(e.vllm_fingerprint)}, commit {fmt(e.vllm_commit)})"),
        ("vLLM command line", " ".join(e.vllm_args) or "n/a"),
        ("Model", f"{fmt(e.served_model_name)} from {fmt(e.model_path)} (revision {fmt(e.model_revision)})"),
        ("Synthetic model", fmt(e.synthetic) + (f": {e.synthetic_reason}" if e.synthetic_reason else "")),
        ("CPU", f"{fmt(e.cpu_model)}, {fmt(e.cpu_cores)} cores, {fmt(e.ram_total_gb, 'GB RAM', 1)}"),
        ("Python", f"{fmt(e.python_version)} (sidecar), {fmt(e.engine_python_version)} (engine)"),
        ("Project", f"{fmt(e.project_version)} at {fmt(e.project_git_commit)}"),
        *startup_rows(e),
    ]


def startup_rows(e: Environment) -> list[Row]:
    """vLLM's starts from its log (none when the log showed none)."""
    s = e.startup
    if s is None:
        return []
    warm = ", ".join(fmt(value, "s", 1) for value in s.warm_starts_s) or "none"
    return [
        ("vLLM start-up", f"{s.phase}: {s.detail}"),
        ("Cold start / warm restarts", f"{fmt(s.cold_start_s, 's', 1)} / {warm}"),
        ("Model load / engine init", f"{fmt(s.model_load_s, 's')} / {fmt(s.engine_init_s, 's')}"),
        ("KV cache", fmt(s.kv_cache_line)),
    ]


def config_rows(config: BenchmarkConfig) -> list[Row]:
    """The knobs of a run, or of the plan every point of a series started from: every one that is set."""
    shown = {"think_time": config.think_time.text} if config.think_time is not None else {}  # as THINK_TIME says it
    return [(key, fmt(shown.get(key, value))) for key, value in config.model_dump().items()
            if value not in (None, {}, [])]  # fmt: skip


def resources_rows(report: Report) -> list[Row]:
    """Resource peaks and means over the window, per GPU where NVML exists."""
    r = report.resources
    gpu_why = f" - {r.gpu_unavailable_reason}" if r.gpu_unavailable_reason else ""
    cpu_why = f" - {r.cpu_unavailable_reason}" if r.cpu_unavailable_reason else ""
    rows = [
        ("Samples (interval)", f"{len(r.timeline)} points ({fmt(r.sample_interval_s, 's')})"),
        ("GPU memory peak (sum)", fmt(r.gpu_mem_peak_gb, "GB") + gpu_why),
        ("vLLM RSS peak", fmt(r.vllm_rss_peak_gb, "GB") + cpu_why),
        ("vLLM CPU peak / mean", f"{fmt(r.vllm_cpu_percent_peak, '%', 0)} / {fmt(r.vllm_cpu_percent_mean, '%', 0)}"),
        ("Host memory used peak", fmt(r.host_mem_used_peak_gb, "GB")),
    ]
    rows += [(f"GPU {g.index} {g.name or ''}".rstrip(),
              f"mem {fmt(g.mem_used_peak_gb, 'GB')} / {fmt(g.mem_total_gb, 'GB')}, util peak "
              f"{fmt(g.util_percent_peak, '%', 0)} mean {fmt(g.util_percent_mean, '%', 0)}, power peak "
              f"{fmt(g.power_w_peak, 'W', 0)} mean {fmt(g.power_w_mean, 'W', 0)}") for g in r.gpus]  # fmt: skip
    return rows + host_rows(report)


def host_rows(report: Report) -> list[Row]:
    """GPU memory per host and GPU (PEER_SIDECARS; a peer that gave nothing, with why)."""
    rows: list[Row] = []
    for h in report.resources.hosts:
        if h.unavailable_reason:
            rows.append((f"Host {h.host}", f"not reported: {h.unavailable_reason}"))
            continue
        why = f" - {h.gpu_unavailable_reason}" if h.gpu_unavailable_reason else ""
        rows.append((f"Host {h.host}", f"GPU memory peak (sum) {fmt(h.gpu_mem_peak_gb, 'GB')}{why}"))
        rows += [
            (f"Host {h.host} GPU {g.index} {g.name or ''}".rstrip(),
             f"mem {fmt(g.mem_used_peak_gb, 'GB')} / {fmt(g.mem_total_gb, 'GB')}")
            for g in h.gpus
        ]  # fmt: skip
    return rows


def error_rows(report: Report) -> list[Row]:
    """Failures by cause with one example message each."""
    return [(kind, f"{count} (e.g. {(report.errors.examples.get(kind) or [''])[0][:200]})")
            for kind, count in report.errors.by_kind.items()]  # fmt: skip


def outcome_notes(report: Report) -> list[str]:
    """How the run ended when not as planned and what it leaves out (interrupted, server down, rows kept locally,
    client-limited, :func:`core.fingerprint.unusable_reason`)."""
    notes = []
    if report.interrupted:
        notes.append("Interrupted (Ctrl-C, SIGTERM or SIGHUP): the report of the requests so far.")
    if report.server_down:
        notes.append(f"{report.server_down}; the run was ended early, the failures are counted.")
    if report.rows_omitted:
        notes.append(report.rows_omitted[:1].upper() + report.rows_omitted[1:] + ".")
    if report.client is not None and report.client.client_limited:  # as the terminal's [WARN] says it
        notes.append(f"Client-limited run: {report.client.reason}. The figures may measure the load generator "
                     "(see the client and the /metrics cross-check below).")  # fmt: skip
    why = unusable_reason(report)
    if why:
        notes.append(f"Not a baseline: {why.removeprefix(report.report_id + ' ')}.")
    return notes


def overhead_rows(server: ServerView) -> list[list[str]]:
    """Client mean, the server's own mean and what the client added, per server and figure (TTFT, ITL, E2E)."""
    return [[o.server_url or "vLLM", f.name.upper() + (" (flagged)" if f.name in o.flagged else ""),
             fmt(f.client_mean_ms, "ms", 1), fmt(f.server_mean_ms, "ms", 1),
             "n/a" if f.added_ms is None else f"{f.added_ms:+.1f} ms ({pct(f.added_percent)})"]
            for o in server.client_overhead for f in o.figures]  # fmt: skip


def steady_caption(report: Report) -> str:
    """What the throughput plot's shading means: the steady-state window and its method, or why there is none."""
    st = report.metrics.steady
    if st is None:
        return "No steady-state figures in this report (written before they existed)."
    if not st.found:
        return f"No steady state found ({st.reason}): the figures are the whole run's."
    return f"Shaded: the steady-state window, {st.start_s:.1f}–{st.end_s:.1f} s ({st.method})."


# A series and an A/B comparison: the same view rows over load points
POINT_METRICS = (
    "throughput_req_per_sec", "output_tokens_per_sec", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms",
    "e2e_p50_ms", "e2e_p99_ms", "goodput_percent"
)  # fmt: skip
POINT_IF_MEASURED = ("energy_j_per_output_token", "cost_usd_per_1m_output_tokens", "cost_usd_per_1m_total_tokens",
                     "energy_cost_usd_per_1m_output_tokens")  # fmt: skip
"""Columns of the point table where some point has the figure (energy measured, a price set: docs/energy.md)."""


def cell(iv: Interval | None) -> str:
    """``1.52 ± 0.08`` (95 % half width), a single run's value, ``0.0123`` below 0.1, or ``n/a``."""
    if iv is None:
        return "n/a"
    if 0 < abs(iv.mean) < 0.1:
        return f"{iv.mean:.3g}" + ("" if iv.half_width is None else f" ± {iv.half_width:.2g}")
    digits = 2 if abs(iv.mean) < 10 else 0
    return interval_text(iv, digits)


def point_table(series: SeriesReport) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the load points: label, runs, means ± half widths, SLO verdict."""
    shown = [*POINT_METRICS, *(m for m in POINT_IF_MEASURED if any(m in p.metrics for p in series.points))]
    header = ["point", "runs", *(f"{SERIES_METRICS[m][0]} ({SERIES_METRICS[m][1]})" for m in shown), "SLO"]
    rows = []
    for p in series.points:
        slo = "n/a" if p.meets_slo is None else ("meets" if p.meets_slo else "misses")
        rows.append([p.label, str(len(p.report_ids)), *(cell(p.metrics.get(m)) for m in shown), slo])
    return header, rows


def change_table(points: Sequence[PointComparison]) -> tuple[list[str], list[list[str]]]:
    """One row per paired point and metric: reference, this, the change with its interval and the verdict."""
    header = ["point", "against", "metric", "change [95% CI]"]
    rows = [
        [p.label, p.against_label, SERIES_METRICS[m][0], change_text(change, SERIES_METRICS[m][2])]
        for p in points
        for m, change in p.changes.items()
        if change.change_pct is not None
    ]
    return header, rows


def side_line(side: Side) -> str:
    """``A = <id> (series, 3 point(s) x 2 run(s), <model>)``: one side of an A/B comparison."""
    e = side.environment
    shape = f"{len(side.points)} point(s) x {side.repeat} run(s)"
    return f"{side.ref} = {side.id} ({side.kind}, {shape}, {e.served_model_name})"


# A report with engines behind vLLM's router (report.cluster): one row per replica
REPLICA_HEADER = ["replica", "state", "requests", "share", "failed", "TTFT ms (server)", "E2E ms (server)", "agrees",
                  "client adds TTFT ms", "KV pool tokens", "KV peak %", "preemptions"]  # fmt: skip
"""Columns of :func:`replica_rows`."""


def replica_rows(cluster: ClusterView) -> list[list[str]]:
    """One row per engine: state, counts, share, server means, agreement, client TTFT overhead, KV pool, peak use."""
    rows = []
    for r in cluster.replicas:
        state = r.state if r.state == "up" else f"DOWN ({r.down_reason}" + (
            f"; polls failed from {r.down_after_s:g} s)" if r.down_after_s is not None else ")")
        added = next((f.added_ms for f in (r.client_overhead.figures if r.client_overhead else []) if f.name == "ttft"),
                     None)  # fmt: skip
        agrees = "-" if r.agrees is None else ("yes" if r.agrees else "NO")
        rows.append([f"{r.name} ({r.url})", state, fmt(r.requests_succeeded, digits=0),
                     fmt(r.share_percent, "%", 1), fmt(r.requests_failed, digits=0), fmt(r.ttft_mean_ms, digits=1),
                     fmt(r.e2e_mean_ms, digits=1), agrees, fmt(added, digits=1), fmt(r.kv_pool_tokens, digits=0),
                     fmt(r.kv_peak_usage_percent, digits=3), fmt(r.preemptions, digits=0)])  # fmt: skip
    return rows


def cluster_lines(cluster: ClusterView) -> list[str]:
    """The lines above the table: router policy and version, the imbalance, the replicas down, the summed note."""
    lines = [f"vllm-router {cluster.router_version or '(version unknown)'}, policy {cluster.router_policy or '?'}; "
             f"{len(cluster.replicas)} replicas; imbalance {fmt(cluster.imbalance_percent, '%', 1)} "
             "(busiest replica over an even share)"]  # fmt: skip
    if cluster.down:
        lines.append(f"DOWN at the end of the run: {', '.join(cluster.down)}")
    if cluster.note:
        lines.append(cluster.note)
    return lines


# Reasoning streams and multi-turn conversations (none when a run had neither)
TURN_HEADER = ["turn", "requests", "prompt tokens", "TTFT p50 / p99 ms", "ITL p50 / p99 ms", "E2E p50 / p99 ms",
               "cached tokens", "prefix-cache hit"]  # fmt: skip
"""Columns of :func:`turn_rows`."""


def reasoning_rows(report: Report) -> list[Row]:
    """Answer and reasoning TTFT, thinking time and the token split; none without reasoning."""
    m = report.metrics
    r = m.reasoning
    if r is None:
        return []
    sources = ", ".join(f"{n} {'from usage' if s == 'usage' else 'counted by chunks'}"
                        for s, n in r.tokens_source.items())  # fmt: skip
    return [
        ("Answer TTFT p50 / p99", f"{fmt(r.answer_ttft.p50_ms, 'ms', 0)} / {fmt(r.answer_ttft.p99_ms, 'ms', 0)} "
                                  "(first answer token; TTFT counts reasoning)"),
        ("Reasoning TTFT p50 / thinking p50", f"{fmt(r.reasoning_ttft.p50_ms, 'ms', 0)} / "
                                              f"{fmt(r.think.p50_ms, 'ms', 0)}"),
        ("Reasoning / answer tokens per request", f"{fmt(r.reasoning_tokens_mean, '', 1)} / "
                                                  f"{fmt(r.answer_tokens_mean, '', 1)} ({r.requests} of "
                                                  f"{m.requests_ok} requests reasoned; {sources})"),
    ]  # fmt: skip


def session_rows(report: Report) -> list[Row]:
    """The conversations' line and knobs; none without sessions."""
    m, c = report.metrics, report.config
    if m.sessions is None:
        return []
    rows = [("Sessions", sessions_text(m.sessions))]
    rows.append(("Follow-up turns", {"dataset": "the dataset's real follow-up turns",
                                     "drawn": "drawn from other workload prompts"}.get(c.session_followups or "",
                                                                                        "n/a")))  # fmt: skip
    rows.append(("Think time", c.think_time.text if c.think_time else "none"))
    server = report.server
    if server is not None and server.prefix_cache_hit_rate_percent is not None:
        rows.append(("Prefix-cache hit rate (vLLM counters)", fmt(server.prefix_cache_hit_rate_percent, "%", 1)))
    return rows


def turn_rows(report: Report) -> list[list[str]]:
    """One row per turn index (empty without sessions)."""
    rows = []
    for t in report.metrics.turns:
        itl = f"{fmt(t.itl.p50_ms, '', 1)} / {fmt(t.itl.p99_ms, '', 1)}" if t.itl else "n/a"
        e2e = f"{fmt(t.e2e.p50_ms, '', 0)} / {fmt(t.e2e.p99_ms, '', 0)}" if t.e2e else "n/a"
        rows.append([str(t.turn), str(t.requests), fmt(t.prompt_tokens_mean, "", 0),
                     f"{fmt(t.ttft.p50_ms, '', 0)} / {fmt(t.ttft.p99_ms, '', 0)}", itl, e2e,
                     fmt(t.cached_tokens_mean, "", 0), fmt(t.cache_hit_percent, "%", 0)])  # fmt: skip
    return rows
