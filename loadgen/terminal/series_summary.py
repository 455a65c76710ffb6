"""Terminal lines of a series report and of an A/B comparison (pure): ``[SWEEP]``/``[REPEAT]``, ``[KNEE]``,
``[COMPARE]`` and ``[REPORT]``."""

from __future__ import annotations

from pathlib import Path

from core.abcompare import ABComparison
from core.intervals import Interval, change_text
from core.series import SERIES_METRICS, SeriesReport

TABLE_METRICS = ("throughput_req_per_sec", "output_tokens_per_sec", "ttft_p99_ms", "itl_p99_ms", "e2e_p99_ms")
COMPARE_METRICS = ("throughput_req_per_sec", "output_tokens_per_sec", "ttft_p99_ms", "e2e_p99_ms")


def interval_text(iv: Interval | None, digits: int = 2) -> str:
    """``1.52 ± 0.08`` (95 % interval half width), or the plain mean for one run; ``n/a`` when missing."""
    if iv is None:
        return "n/a"
    mean = f"{iv.mean:.{digits}f}"
    return mean if iv.half_width is None else f"{mean} ± {iv.half_width:.{digits}f}"


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
        if comparison.refused:
            lines.append(f"[COMPARE] {name}: not compared: {comparison.refused}")
            continue
        for paired in comparison.points:
            parts = [f"{SERIES_METRICS[m][0]} {change_text(paired.changes[m])}" for m in COMPARE_METRICS]
            lines.append(f"[COMPARE] {name} {paired.label}: " + "; ".join(parts) + f" ({comparison.against})")
        lines += [f"[COMPARE] {name}: {note}" for note in comparison.notes]
    lines += [f"[NOTE] {note}" for note in series.notes]
    folder = Path(path).parent
    lines.append(f"[REPORT] Series saved to {path}")
    files = [f"{label}: {folder / name}" for label, name in (("Markdown", series.markdown_file),
                                                             ("HTML", series.html_file)) if name]
    if files:
        lines.append("[REPORT] " + " | ".join(files))
    return lines


def compare_lines(comparison: ABComparison, path: str) -> list[str]:
    """What differs (model and vLLM flags first), then each paired point's changes, then the files."""
    a, b = comparison.a, comparison.b
    lines = [f"[COMPARE] A = {a.ref} ({a.id}), B = {b.ref} ({b.id})"]
    if comparison.differences:
        lines += [f"[DIFF] {d.group}: {d.field}: {d.a} -> {d.b}" for d in comparison.differences]
    else:
        lines.append("[DIFF] no configuration field differs")
    for point in comparison.points:
        parts = [f"{SERIES_METRICS[m][0]} {change_text(point.changes[m])}" for m in COMPARE_METRICS]
        hits = point.changes.get("prefix_cache_hit_rate_percent")
        if hits is not None and hits.a_mean is not None and hits.b_mean is not None:  # a rate from ~0: both values
            parts.append(f"prefix-cache hit rate {hits.a_mean:.1f}% -> {hits.b_mean:.1f}%")
        lines.append(f"[COMPARE] {point.against_label} -> {point.label}: " + "; ".join(parts))
    lines += [f"[NOTE] {note}" for note in comparison.notes]
    folder = Path(path).parent
    lines.append(f"[REPORT] Comparison saved to {path}")
    if comparison.html_file:
        lines.append(f"[REPORT] HTML: {folder / comparison.html_file}")
    return lines
