"""The plots as PNG bytes (matplotlib without pyplot: thread-safe, imported on first use); each returns None when
there is nothing to draw."""

from __future__ import annotations

import io
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from core.records import RequestRecord, effective_e2e_ms, effective_ttft_ms
from core.report_schema import ResourcePoint
from core.series_stats import SeriesPoint
from core.stats import WindowStats
from core.steady import SteadyState

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

SIZE_IN = (8.0, 3.6)
DPI = 100


def _new_figure(width_in: float = SIZE_IN[0], height_in: float = SIZE_IN[1]) -> Figure:
    from matplotlib.figure import Figure  # deferred: ~0.5 s of import, paid only when a report is drawn

    return Figure(figsize=(width_in, height_in))


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def latency_cdf_png(records: Sequence[RequestRecord]) -> bytes | None:
    """Empirical CDFs of E2E latency and TTFT (ms) of the successful measured requests."""
    ok = [r for r in records if r.ok and r.phase == "measured"]
    series = {
        "E2E latency": [v for r in ok if (v := effective_e2e_ms(r)) is not None],
        "TTFT": [v for r in ok if (v := effective_ttft_ms(r)) is not None],
    }
    if not any(series.values()):
        return None
    fig = _new_figure()
    ax = fig.add_subplot()
    for label, values in series.items():
        if values:
            xs = np.sort(np.asarray(values, dtype=float))
            ys = np.arange(1, xs.size + 1) / xs.size
            ax.step(xs, ys, where="post", label=f"{label} (n={xs.size})")
    for q in (0.5, 0.99):
        ax.axhline(q, color="grey", linewidth=0.6, linestyle=":")
    ax.set(xlabel="ms", ylabel="fraction of requests", ylim=(0, 1.02), title="Latency CDF")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    return _png(fig)


def throughput_png(windows: Sequence[WindowStats], steady: SteadyState | None = None) -> bytes | None:
    """Requests/s and output tokens/s per time slice; a found ``steady`` window shaded with its req/s dashed."""
    if not windows:
        return None
    mids = [(w.start_s + w.end_s) / 2 for w in windows]
    fig = _new_figure()
    ax = fig.add_subplot()
    if steady is not None and steady.found and steady.start_s is not None and steady.end_s is not None:
        ax.axvspan(steady.start_s, steady.end_s, color="tab:green", alpha=0.12,
                   label=f"steady state {steady.start_s:.0f}–{steady.end_s:.0f} s")  # fmt: skip
        if steady.throughput_req_per_sec is not None:
            ax.hlines(steady.throughput_req_per_sec, steady.start_s, steady.end_s, colors="tab:green",
                      linestyles="dashed", label=f"steady {steady.throughput_req_per_sec:.2f} req/s")  # fmt: skip
    ax.plot(mids, [w.throughput_req_per_sec for w in windows], marker="o", color="tab:blue", label="req/s")
    ax.set(xlabel="seconds since the window start", ylim=(0, None), title="Throughput over time")
    ax.set_ylabel("requests / s", color="tab:blue")
    tokens = ax.twinx()
    tokens.plot(mids, [w.output_tokens_per_sec for w in windows], marker=".", color="tab:orange", label="output tok/s")
    tokens.set_ylabel("output tokens / s", color="tab:orange")
    tokens.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if steady is not None and steady.found:
        ax.legend(loc="lower center", fontsize="small")
    return _png(fig)


def resources_png(timeline: Sequence[ResourcePoint]) -> bytes | None:
    """GPU memory (summed), vLLM RSS and host memory (GB) over time; vLLM CPU % and KV cache use (%) below."""
    if not timeline:
        return None
    ts = [p.t_s for p in timeline]
    memory = {
        "GPU memory used": [p.gpu_mem_used_gb for p in timeline],
        "vLLM RSS": [p.vllm_rss_gb for p in timeline],
        "host memory used": [p.host_mem_used_gb for p in timeline],
    }
    cpu = [p.vllm_cpu_percent for p in timeline]
    has_cpu = any(v is not None for v in cpu)
    fig = _new_figure(SIZE_IN[0], SIZE_IN[1] * (1.6 if has_cpu else 1.0))
    ax = fig.add_subplot(2 if has_cpu else 1, 1, 1)
    for label, values in memory.items():
        if any(v is not None for v in values):
            ax.plot(ts, [np.nan if v is None else v for v in values], label=label)
    ax.set(ylabel="GB", ylim=(0, None), title="Memory over time")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    if has_cpu:
        cpu_ax = fig.add_subplot(2, 1, 2, sharex=ax)
        cpu_ax.plot(ts, [np.nan if v is None else v for v in cpu], color="tab:red", label="vLLM CPU %")
        kv = [p.kv_cache_usage_percent for p in timeline]
        if any(v is not None for v in kv):
            cpu_ax.plot(ts, [np.nan if v is None else v for v in kv], color="tab:purple", label="KV cache used %")
            cpu_ax.legend(loc="lower right")
        cpu_ax.set(ylabel="%", ylim=(0, None))
        cpu_ax.grid(alpha=0.3)
    (fig.axes[-1]).set_xlabel("seconds since the window start")
    return _png(fig)


# A series: curves over load points
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


def _star(ax: Axes, xs: np.ndarray, ys: np.ndarray, knee: int | None, colour: str, size: int) -> None:
    """The knee's point as a star (nothing without a knee or a value there)."""
    if knee is not None and not np.isnan(ys[knee]):
        ax.plot([xs[knee]], [ys[knee]], marker="*", markersize=size, color=colour, markeredgecolor="black",
                linestyle="none")


def latency_curves_png(curves: Sequence[Curve]) -> bytes | None:
    """TTFT, ITL and E2E p50/p99 (ms) against req/s and output tok/s; 95 % error bars, the knee a star."""
    if not any(len(c.points) for c in curves):
        return None
    fig = _new_figure(11.0, 6.4)
    axes = fig.subplots(2, 3)
    for row, (x_name, x_label) in enumerate(X_AXES):
        for col, (metric, title) in enumerate(LATENCIES):
            ax = axes[row][col]
            for curve, colour in zip(curves, itertools.cycle(COLOURS)):
                for pct, style in (("p50", "-"), ("p99", "--")):
                    xs, ys, errs = _xy(curve.points, x_name, f"{metric}_{pct}_ms")
                    if np.all(np.isnan(ys)):
                        continue
                    ax.errorbar(xs, ys, yerr=errs, fmt=style, marker="o", markersize=3, color=colour, capsize=2,
                                label=f"{curve.name} {pct}" if len(curves) > 1 else pct)
                    _star(ax, xs, ys, curve.knee, colour, 12)
            ax.set(xlabel=x_label, ylabel=f"{title}, ms", ylim=(0, None), title=title if row == 0 else "")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.suptitle("Latency against load (star: knee, highest load meeting the SLO)")
    return _png(fig)


def goodput_png(curves: Sequence[Curve]) -> bytes | None:
    """Goodput (req/s) and the share within the SLO against req/s, the knee a star; None without SLO figures."""
    if not any(p.metrics.get("goodput_req_per_sec") for c in curves for p in c.points):
        return None
    fig = _new_figure(9.0, 3.8)
    rate_ax, share_ax = fig.subplots(1, 2)
    for curve, colour in zip(curves, itertools.cycle(COLOURS)):
        for ax, metric in ((rate_ax, "goodput_req_per_sec"), (share_ax, "goodput_percent")):
            xs, ys, errs = _xy(curve.points, "throughput_req_per_sec", metric)
            ax.errorbar(xs, ys, yerr=errs, marker="o", color=colour, capsize=2, label=curve.name)
            _star(ax, xs, ys, curve.knee, colour, 14)
    rate_ax.set(ylabel="goodput, req/s", ylim=(0, None))
    share_ax.set(ylabel="requests within the SLO, %", ylim=(0, 105))
    for ax in (rate_ax, share_ax):
        ax.set_xlabel("throughput, req/s")
        ax.grid(alpha=0.3)
    if len(curves) > 1:
        rate_ax.legend(fontsize=8)
    fig.suptitle("Goodput against load")
    return _png(fig)
