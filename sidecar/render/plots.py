"""The report's plots as PNG bytes (matplotlib, Agg, no pyplot global state: safe from worker threads).

Each function returns None when there is nothing to draw, so the HTML says "no data" instead of an empty chart.
matplotlib is imported on first use, so the sidecar starts without paying for it.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from core.records import RequestRecord
from core.report_schema import ResourcePoint
from core.stats import WindowStats, effective_e2e_ms, effective_ttft_ms
from core.steady import SteadyState

if TYPE_CHECKING:
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
    ax.set_xlabel("ms")
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.02)
    ax.set_title("Latency CDF")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    return _png(fig)


def throughput_png(windows: Sequence[WindowStats], steady: SteadyState | None = None) -> bytes | None:
    """Requests per second and output tokens per second in each time slice of the measured window; with a found
    ``steady`` state its window is shaded and its request throughput drawn as a dashed line across it."""
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
    ax.set_xlabel("seconds since the window start")
    ax.set_ylabel("requests / s", color="tab:blue")
    ax.set_ylim(bottom=0)
    tokens = ax.twinx()
    tokens.plot(mids, [w.output_tokens_per_sec for w in windows], marker=".", color="tab:orange", label="output tok/s")
    tokens.set_ylabel("output tokens / s", color="tab:orange")
    tokens.set_ylim(bottom=0)
    ax.set_title("Throughput over time")
    ax.grid(alpha=0.3)
    if steady is not None and steady.found:
        ax.legend(loc="lower center", fontsize="small")
    return _png(fig)


def resources_png(timeline: Sequence[ResourcePoint]) -> bytes | None:
    """GPU memory (summed), vLLM RSS and host memory in use (GB) over the window; vLLM CPU % and its KV cache usage
    (% of the pool) below."""
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
    ax.set_ylabel("GB")
    ax.set_ylim(bottom=0)
    ax.set_title("Memory over time")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    if has_cpu:
        cpu_ax = fig.add_subplot(2, 1, 2, sharex=ax)
        cpu_ax.plot(ts, [np.nan if v is None else v for v in cpu], color="tab:red", label="vLLM CPU %")
        kv = [p.kv_cache_usage_percent for p in timeline]
        if any(v is not None for v in kv):
            cpu_ax.plot(ts, [np.nan if v is None else v for v in kv], color="tab:purple", label="KV cache used %")
            cpu_ax.legend(loc="lower right")
        cpu_ax.set_ylabel("%")
        cpu_ax.set_ylim(bottom=0)
        cpu_ax.grid(alpha=0.3)
    (fig.axes[-1]).set_xlabel("seconds since the window start")
    return _png(fig)
