"""Plain-text rendering of the analyzer's JSON-ready reports (the same dicts ``--json`` prints)."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

WIDTH_MESSAGE = 110
ENGINE_FIGURES = (
    ("generation_tokens_per_s", "generation throughput (tokens/s)"),
    ("busy_generation_tokens_per_s", "  while requests ran (tokens/s)"),
    ("prompt_tokens_per_s", "prompt throughput (tokens/s)"),
    ("running_reqs", "running requests"),
    ("waiting_reqs", "waiting requests"),
    ("kv_cache_usage_pct", "KV cache usage (%)"),
    ("prefix_cache_hit_rate_pct", "prefix cache hit rate (%)"),
)


def _n(value: float | None, digits: int = 1) -> str:
    """A number with thousands separators (``-`` for None)."""
    if value is None:
        return "-"
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.{digits}f}"


def _time(iso: str | None) -> str:
    return iso[:19].replace("T", " ") if iso else "-"


def _cut(text: str | None, width: int = WIDTH_MESSAGE) -> str:
    text = (text or "").replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def _files(source: dict[str, Any]) -> str:
    files = source.get("files") or []
    if not files:
        return "(no file)"
    logs = {os.path.basename(f).split(".log")[0] + ".log" for f in files}  # vllm.log.1 is vllm.log's: one engine
    others = sorted(logs - {os.path.basename(files[-1]).split(".log")[0] + ".log"})
    rotated = len(files) - len(logs)
    extra = "".join((f" (+ {', '.join(others)})" if others else "", f" (+{rotated} rotated)" if rotated else ""))
    notes = []
    if source.get("overlong_lines"):
        notes.append(f"{source['overlong_lines']} over-long lines cut")
    if source.get("partial_lines_skipped"):
        notes.append("last line still being written, skipped")
    if source.get("shrunk_files"):
        notes.append(f"{len(source['shrunk_files'])} files shrank while being read (truncated): partly read")
    if source.get("skipped_older_than_since"):
        notes.append(f"{len(source['skipped_older_than_since'])} files older than --since skipped")
    return files[-1] + extra + (f" [{'; '.join(notes)}]" if notes else "")


def _since(report: dict[str, Any]) -> str:
    return f" since {_time(report['since'])}" if report.get("since") else ""


def render_errors(report: dict[str, Any], tracebacks: bool = False) -> list[str]:
    """``--errors`` as text: one row per group, most severe and frequent first."""
    levels = ", ".join(f"{level} {_n(count)}" for level, count in report["by_level"].items()) or "none"
    out = [
        f"Problems in {_files(report['log'])}{_since(report)}: {_n(report['events'])} events in "
        f"{_n(report['groups_total'])} groups ({levels})"
    ]
    if not report["groups"]:
        return [*out, "  no WARNING/ERROR lines or tracebacks"]
    out.append(f"  {'COUNT':>7}  {'LEVEL':<8} {'LAST SEEN':<20} {'SOURCE':<24} MESSAGE")
    marked = False
    for group in report["groups"]:
        before = bool(group.get("last_seen_from_line_before")) and group["last_seen"] is not None
        marked |= before
        out.append(
            f"  {_n(group['count']):>7}  {group['level']:<8} {_time(group['last_seen']) + ('*' if before else ''):<20} "
            f"{_cut(group['source'] or group['process'] or '-', 24):<24} {_cut(group['message'])}"
        )
        if group["exception"] and group["exception"] != group["message"]:
            out.append(f"  {'':>7}  {'':<8} {'':<19}  {'':<24} -> {_cut(group['exception'])}")
        if tracebacks and group["traceback"]:
            out += [f"      | {line}" for line in group["traceback"]]
    if report["groups_total"] > len(report["groups"]):
        out.append(f"  ... {report['groups_total'] - len(report['groups'])} more groups (--limit N shows more)")
    if marked:
        out.append("  * the line has no time stamp: the time of the nearest stamped line before it")
    return out


def render_slow(report: dict[str, Any]) -> list[str]:
    """``--slow`` as text: the slowest finished requests over the threshold; unfinished ones counted by cause."""
    source = report["requests_log"]
    out = [
        f"Finished requests slower than {_n(report['threshold_ms'])} ms in {_files(source)}{_since(report)}: "
        f"{_n(report['slow'])} of {_n(report['finished'])} finished"
        + (f" ({_n(source['bad_lines'])} bad lines skipped)" if source["bad_lines"] else "")
    ]
    if report["not_finished"]:
        causes = ", ".join(f"{cause} {_n(n)}" for cause, n in report["not_finished_by_cause"].items())
        out.append(
            f"  Left out: {_n(report['not_finished'])} request(s) that did not finish ({causes}); their causes: "
            "--errors (vLLM's log) and --stats (requests by outcome)"
        )
    if not report["slowest"]:
        return out
    shown = len(report["slowest"])
    if report["slow"] > shown:
        out[0] += f"; the slowest {_n(shown)} shown"
    out.append(
        f"  {'TOTAL_MS':>10} {'TTFT_MS':>9} {'IN/OUT TOK':>11}  {'SOURCE':<8} {'ENDED':<19}  REQUEST"
    )
    for rec in report["slowest"]:  # all finished (status ok): no status or error column
        tokens = f"{_n(rec['prompt_tokens'])}/{_n(rec['completion_tokens'])}"
        out.append(
            f"  {_n(rec['total_ms']):>10} {_n(rec['ttft_ms']):>9} {tokens:>11}  "
            f"{_cut(rec['source'], 8):<8} {_time(rec['ts']):<19}  {rec['request_id']} {rec['model'] or ''}"
        )
    if report["slow"] > shown:
        out.append(f"  ... {_n(report['slow'] - shown)} more slow requests (--limit N shows more)")
    out.append("  IN/OUT TOK: prompt tokens / completion tokens")
    return out


def _pcts(name: str, values: dict[str, float] | None) -> str:
    if not values:
        return f"    {name:<9} -"
    parts = "  ".join(f"{key} {_n(values[key])}" for key in ("p50", "p90", "p95", "p99", "max"))
    return f"    {name:<9} {parts}  (percentiles ±{_n(values.get('percentile_error_pct'))}%)"


def render_stats(report: dict[str, Any]) -> list[str]:
    """``--stats`` as text: requests, engine figures, log health."""
    out = [f"Stats{_since(report)}"]
    req = report["requests"]
    if req is None:
        out.append(f"  Requests: {report['requests_missing']}")
    else:
        source = req["requests_log"]
        rate = f"{req['error_rate'] * 100:.2f}%" if req["error_rate"] is not None else "-"
        by_source = ", ".join(f"{name} {_n(count)}" for name, count in req["by_source"].items())
        out += [
            f"  Requests ({_files(source)}): {_n(req['requests'])} (ok {_n(req['ok'])}, errors {_n(req['errors'])}, "
            f"cancelled {_n(req['cancelled'])}, error rate {rate}){' - ' + by_source if by_source else ''}",
            f"    window    {_time(req['window_start'])} -> {_time(req['window_end'])} ({_n(req['window_s'])} s)",
            _pcts("total_ms", req["total_ms"]),
            _pcts("ttft_ms", req["ttft_ms"]),
            f"    tokens    prompt {_n(req['prompt_tokens'])} ({_n(req['prompt_tokens_per_s'])}/s), completion "
            f"{_n(req['completion_tokens'])} ({_n(req['completion_tokens_per_s'])}/s)",
        ]
        out += [f"    error     {_n(e['count'])}x {_cut(e['error'], 90)}" for e in req["top_errors"]]
        if source["bad_lines"]:
            out.append(f"    skipped   {_n(source['bad_lines'])} bad lines, e.g. {_cut(source['bad_examples'][0], 90)}")
    engine = report["engine"]
    if engine is None:
        out.append(f"  Engine: {report['log_missing']}")
    else:
        out.append(
            f"  Engine periodic stats: {_n(engine['samples'])} samples, {_time(engine['first'])} -> "
            f"{_time(engine['last'])}"
        )
        out += [
            f"    {label:<34} mean {_n(f['mean'])}  max {_n(f['max'])}  last {_n(f['last'])}"
            for key, label in ENGINE_FIGURES
            if (f := engine.get(key))
        ]
        log = report["log"]
        http = log["http"]
        levels = ", ".join(f"{k} {_n(v)}" for k, v in log["warnings_and_errors"]["by_level"].items()) or "none"
        out.append(
            f"  Log ({_files(log['log'])}): {_n(log['lines'])} lines; problems: {levels}; HTTP: "
            f"{_n(http['inference_requests'])} POST /v1/..., {_n(http['status_4xx'])} 4xx, {_n(http['status_5xx'])} 5xx"
        )
        out += [f"    {_n(g['count']):>7}x {g['level']:<8} {_cut(g['message'], 90)}" for g in log["top_problems"]]
    return out


def render(reports: dict[str, Any], tracebacks: bool = False) -> str:
    """All reports as text, separated by blank lines, ending with a newline."""
    renderers = {"errors": lambda r: render_errors(r, tracebacks), "slow": render_slow, "stats": render_stats}
    return "\n\n".join("\n".join(renderers[name](report)) for name, report in reports.items()) + "\n"
