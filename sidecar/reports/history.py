"""``make history``: each workload's runs over time (:mod:`core.gate`) as a table and ``<reports>/history.html``.

``python -m sidecar.reports.history [REPORTS_DIR]``. Exit codes: 0 written, 2 no report in the folder.
"""

from __future__ import annotations

import argparse
import base64
import html
import sys
from collections.abc import Sequence
from pathlib import Path

from core.atomicfile import atomic_write
from core.gate import Timeline, history_table, timelines
from core.pipes import guard_stdout
from core.report_schema import Report
from core.settings import Settings, get_settings
from sidecar.render.plots import _new_figure, _png
from sidecar.reports.store import BaselineStore, ReportStore

PANELS = (  # attribute, title, unit
    ("throughput_req_per_sec", "throughput", "req/s"),
    ("e2e_p99_ms", "E2E p99", "ms"),
    ("ttft_p99_ms", "TTFT p99", "ms"),
    ("error_rate_percent", "error rate", "%"),
    ("gpu_mem_peak_gb", "GPU memory peak", "GiB"),
)
WHERE_MEASURED = (  # panels only for a workload where some run has the figure (docs/energy.md)
    ("energy_j_per_output_token", "energy / output token", "J"),
    ("cost_usd_per_1m_output_tokens", "cost / 1M output tokens", "USD"),
)


def panels_of(timeline: Timeline) -> tuple[tuple[str, str, str], ...]:
    """The plot's panels: :data:`PANELS`, then those of :data:`WHERE_MEASURED` some run of ``timeline`` has."""
    extra = tuple(p for p in WHERE_MEASURED if any(getattr(run, p[0]) is not None for run in timeline.points))
    return PANELS + extra


def timeline_png(timeline: Timeline) -> bytes:
    """One workload's runs in order, a panel per figure: baselines green stars, gate failures red crosses."""
    panels = panels_of(timeline)
    fig = _new_figure(8.0, 1.9 * len(panels))
    xs = list(range(len(timeline.points)))
    axes = fig.subplots(len(panels), 1, sharex=True)
    for ax, (attr, title, unit) in zip(axes, panels, strict=True):
        ys = [getattr(p, attr) for p in timeline.points]
        known = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
        if known:
            ax.plot([x for x, _ in known], [y for _, y in known], marker="o", color="tab:blue")
        for x, p, y in zip(xs, timeline.points, ys, strict=True):
            if y is None:
                continue
            if p.baselines:
                ax.plot([x], [y], marker="*", markersize=14, color="tab:green", linestyle="none")
                ax.annotate(", ".join(p.baselines), (x, y), textcoords="offset points", xytext=(0, 8),
                            ha="center", fontsize="small", color="tab:green")  # fmt: skip
            if p.gate_failures:
                ax.plot([x], [y], marker="X", markersize=11, color="tab:red", linestyle="none")
        ax.set_ylabel(f"{title}\n({unit})", fontsize="small")
        ax.grid(alpha=0.3)
    axes[-1].set_xticks(xs, [p.timestamp[:16].replace("T", "\n") for p in timeline.points], fontsize="x-small")
    axes[0].set_title(f"{timeline.label} ({timeline.fingerprint})", fontsize="small")
    return _png(fig)


def _num(value: float | None, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def history_html(lines_of: Sequence[Timeline]) -> str:
    """The history page: per workload its plot and a table of its runs (baselines and gate failures named)."""
    parts = ["<!doctype html><meta charset='utf-8'><title>Performance history</title><h1>Performance history</h1>",
             "<p>Green star: a named baseline. Red cross: the run fails the gate against a baseline.</p>"]  # fmt: skip
    for t in lines_of:
        data = base64.b64encode(timeline_png(t)).decode("ascii")
        parts.append(f"<h2>{html.escape(t.label)} <small>({html.escape(t.fingerprint)})</small></h2>")
        parts.append(f'<img alt="timeline {html.escape(t.fingerprint)}" src="data:image/png;base64,{data}">')
        rows = "".join(
            f"<tr><td>{html.escape(p.report_id)}</td><td>{p.throughput_req_per_sec:.2f}</td>"
            f"<td>{_num(p.e2e_p99_ms, 0)}</td><td>{_num(p.error_rate_percent, 1)}</td>"
            f"<td>{_num(p.energy_j_per_output_token, 3)}</td><td>{_num(p.cost_usd_per_1m_output_tokens, 2)}</td>"
            f"<td>{html.escape(', '.join(p.baselines))}</td><td>{html.escape(', '.join(p.flags))}</td>"
            f"<td>{html.escape('; '.join(p.gate_failures))}</td></tr>"
            for p in t.points
        )
        parts.append("<table><tr><th>report</th><th>req/s</th><th>E2E p99 ms</th><th>error %</th>"
                     "<th>J/output token</th><th>USD/1M output tokens</th><th>baselines</th>"
                     f"<th>run</th><th>gate failures</th></tr>{rows}</table>")  # fmt: skip
    return "\n".join(parts) + "\n"


def history_page(reports: Sequence[Report], baselines: dict[str, str], settings: Settings) -> str:
    """The history page of ``reports`` (``GET /history``), or a line saying there is nothing yet."""
    lines_of = timelines(reports, baselines, settings.gate_threshold_pct, settings.gate_error_rate_pp)
    if not lines_of:
        return "<!doctype html><p>No report with a workload fingerprint yet: run <code>make benchmark</code>.</p>\n"
    return history_html(lines_of)


def main(argv: list[str] | None = None) -> int:
    """Print the history table of a reports folder and write its ``history.html``; returns the exit code."""
    guard_stdout()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reports_dir", nargs="?", type=Path, help="a reports folder (default REPORTS_DIR)")
    args = parser.parse_args(argv)
    settings = get_settings()
    root = args.reports_dir or settings.reports_dir
    lines_of = timelines(
        ReportStore(root).list(), BaselineStore(root).all(), settings.gate_threshold_pct, settings.gate_error_rate_pp
    )
    if not lines_of:
        print(f"[ERROR] no report with a workload fingerprint in {root}: run `make benchmark` first", file=sys.stderr)
        return 2
    for line in history_table(lines_of):
        print(line)
    out = root / "history.html"
    atomic_write(out, history_html(lines_of).encode("utf-8"))
    print(f"[REPORT] History: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
