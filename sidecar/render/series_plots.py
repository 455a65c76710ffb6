"""Plots of series (PNG bytes, matplotlib Agg as :mod:`sidecar.render.plots`): latency against throughput and
goodput against load, one curve per series (so an A/B comparison overlays two), error bars for 95 % intervals and
the knee marked. Each function returns None when there is nothing to draw."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.series import SeriesPoint
from sidecar.render.plots import _new_figure, _png

COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red")
LATENCIES = (("ttft", "TTFT"), ("itl", "ITL"), ("e2e", "E2E latency"))
X_AXES = (("throughput_req_per_sec", "throughput, req/s"), ("output_tokens_per_sec", "output tokens/s"))


@dataclass(frozen=True)
class Curve:
    """One series to draw: its name in the legend, its points (load order) and the knee's index (or None)."""

    name: str
    points: Sequence[SeriesPoint]
    knee: int | None = None


def _xy(points: Sequence[SeriesPoint], x: str, y: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Means of ``x`` and ``y`` and the half widths of ``y`` (0 without an interval); NaN where missing."""
    xs, ys, errs = [], [], []
    for p in points:
        ix, iy = p.metrics.get(x), p.metrics.get(y)
        xs.append(np.nan if ix is None else ix.mean)
        ys.append(np.nan if iy is None else iy.mean)
        errs.append(0.0 if iy is None or iy.half_width is None else iy.half_width)
    return np.asarray(xs), np.asarray(ys), np.asarray(errs)


def latency_curves_png(curves: Sequence[Curve]) -> bytes | None:
    """TTFT, ITL and E2E p50 (solid) and p99 (dashed), ms, against request throughput (top row) and output tokens/s
    (bottom row); error bars are 95 % intervals over runs; the knee is a star."""
    if not any(len(c.points) for c in curves):
        return None
    fig = _new_figure(11.0, 6.4)
    axes = fig.subplots(2, 3)
    for row, (x_name, x_label) in enumerate(X_AXES):
        for col, (metric, title) in enumerate(LATENCIES):
            ax = axes[row][col]
            for k, curve in enumerate(curves):
                colour = COLOURS[k % len(COLOURS)]
                for pct, style in (("p50", "-"), ("p99", "--")):
                    xs, ys, errs = _xy(curve.points, x_name, f"{metric}_{pct}_ms")
                    if np.all(np.isnan(ys)):
                        continue
                    ax.errorbar(xs, ys, yerr=errs, fmt=style, marker="o", markersize=3, color=colour, capsize=2,
                                label=f"{curve.name} {pct}" if len(curves) > 1 else pct)
                    if curve.knee is not None and not np.isnan(ys[curve.knee]):
                        ax.plot([xs[curve.knee]], [ys[curve.knee]], marker="*", markersize=12, color=colour,
                                markeredgecolor="black", linestyle="none")
            ax.set_xlabel(x_label)
            ax.set_ylabel(f"{title}, ms")
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            if row == 0:
                ax.set_title(title)
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.suptitle("Latency against load (star: knee, highest load meeting the SLO)")
    return _png(fig)


def goodput_png(curves: Sequence[Curve]) -> bytes | None:
    """Goodput (requests/s meeting every SLO bound) and the share of requests within the SLO against request
    throughput; the knee is a star. None when no point has an SLO figure."""
    if not any(p.metrics.get("goodput_req_per_sec") for c in curves for p in c.points):
        return None
    fig = _new_figure(9.0, 3.8)
    rate_ax, share_ax = fig.subplots(1, 2)
    for k, curve in enumerate(curves):
        colour = COLOURS[k % len(COLOURS)]
        for ax, metric in ((rate_ax, "goodput_req_per_sec"), (share_ax, "goodput_percent")):
            xs, ys, errs = _xy(curve.points, "throughput_req_per_sec", metric)
            ax.errorbar(xs, ys, yerr=errs, marker="o", color=colour, capsize=2, label=curve.name)
            if curve.knee is not None and not np.isnan(ys[curve.knee]):
                ax.plot([xs[curve.knee]], [ys[curve.knee]], marker="*", markersize=14, color=colour,
                        markeredgecolor="black", linestyle="none")
    rate_ax.set_ylabel("goodput, req/s")
    share_ax.set_ylabel("requests within the SLO, %")
    share_ax.set_ylim(0, 105)
    for ax in (rate_ax, share_ax):
        ax.set_xlabel("throughput, req/s")
        ax.grid(alpha=0.3)
    rate_ax.set_ylim(bottom=0)
    if len(curves) > 1:
        rate_ax.legend(fontsize=8)
    fig.suptitle("Goodput against load")
    return _png(fig)
