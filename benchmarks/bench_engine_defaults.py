"""Engine defaults side by side: vLLM CPU build's own core binding against the stack's, with start-up times.

Run from the repository root (no stack needed; it starts its own on free ports)::

    make bench-engine [REPEATS=3] [VARIANTS=vllm-defaults,stack-defaults,all-cores]
    .venvs/app/bin/python benchmarks/bench_engine_defaults.py --repeats 2 --variants stack-defaults,one-process

Each round, each variant (order rotating) gets a fresh vLLM from the project's launcher with the variant's
environment (:data:`VARIANTS`; docs/benchmarks.md says what each changes), then one ``python -m
loadgen.command.benchmark`` run at a fixed load (:func:`benchkit.run_fixed_load`: ``--concurrency`` 8, ``--requests``
48 + 8 warm-up, ``--prompt-chars``-character prompts, ``--output-tokens`` 64). Per run: output tok/s, TTFT and TPOT
medians, the start-up wall time with vLLM's own phases, the compile cache's outcome and the load average before and
after; at the end the medians per variant and their ratio to ``vllm-defaults``.

Target (issue 14): the stack's default ≥ 1.5 × vLLM's output tok/s. Exits 0 when met, 1 when missed, 2 when a run
failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchkit import REPO, BenchError, fmt_or_na, median_known, run_fixed_load, serving, work_folder
from vllm_peer import sharegpt_prompts

from core.net import free_port
from core.settings import get_settings
from engine.vllmlog.startup import start_breakdown, startup_phase

TARGET_RATIO = 1.5
SHIPPED = "stack-defaults"
BASELINE = "vllm-defaults"
IOMP = REPO / ".venvs" / "engine" / "lib" / "libiomp5.so"
VARIANTS: dict[str, dict[str, str]] = {
    BASELINE: {"VLLM_CPU_NUM_OF_RESERVED_CPU": "", "VLLM_USE_AOT_COMPILE": "1"},
    "stack-defaults": {"VLLM_CPU_NUM_OF_RESERVED_CPU": ""},
    "all-cores": {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"},
    "all-cores-passive": {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "OMP_WAIT_POLICY": "PASSIVE"},
    "all-cores-iomp": {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "LD_PRELOAD": str(IOMP)},
    "eager": {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_EXTRA_ARGS": "--enforce-eager"},
    "no-compile": {"VLLM_CPU_NUM_OF_RESERVED_CPU": "", "VLLM_EXTRA_ARGS": "-O0"},
    "one-process": {"VLLM_CPU_NUM_OF_RESERVED_CPU": "", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
}


DEFAULT_VARIANTS = f"{BASELINE},{SHIPPED},all-cores"


@dataclass(frozen=True)
class RunResult:
    """One variant in one round."""

    variant: str
    round: int
    startup_wall_s: float
    startup_log_s: float | None
    weights_s: float | None
    engine_init_s: float | None
    output_tokens_per_sec: float
    ttft_p50_ms: float | None
    tpot_p50_ms: float | None
    requests_ok: int
    load_before: float
    load_after: float
    report: str
    phases: dict[str, float]
    compile_cache: str


def medians(results: Sequence[RunResult], variant: str) -> dict[str, float | None]:
    """Median of each figure over the runs of ``variant`` (pure)."""
    runs = [r for r in results if r.variant == variant]
    names = ("output_tokens_per_sec", "ttft_p50_ms", "tpot_p50_ms", "startup_wall_s", "engine_init_s")
    return {name: median_known([getattr(r, name) for r in runs]) for name in names}


def compile_cache(lines: Sequence[bytes]) -> str:
    """What vLLM's compile cache did in one start (pure): its AOT artifact loaded, failed to load (then it compiles
    again), was first written, or AOT was off (torch.compile's own caches, which log nothing) or nothing compiled."""
    text = b"\n".join(lines)
    if b"Directly load AOT compilation" in text:
        return "aot-hit"
    if b"due to a load failure" in text:
        return "aot-load-failed"
    if b"saved AOT compiled function" in text:
        return "aot-written"
    return "no-aot" if b"Warming up model" in text else "no-compile"


def round_order(variants: Sequence[str], index: int) -> list[str]:
    """The variants rotated by ``index``, so each runs first once every len(variants) rounds (pure)."""
    k = index % len(variants)
    return [*variants[k:], *variants[:k]]


class PrivateStack:
    """A sidecar and, per run, a vLLM on free ports with private logs and reports."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        vllm_port, sidecar_port = free_port(), free_port()
        self.vllm_url, self.sidecar_url = f"http://127.0.0.1:{vllm_port}", f"http://127.0.0.1:{sidecar_port}"
        self.env = {
            **os.environ,
            "MODEL": get_settings().model or "synthetic:ernie-4.5-0.3b",
            "VLLM_PORT": str(vllm_port),
            "SIDECAR_PORT": str(sidecar_port),
            "LOGS_DIR": str(workdir / "logs"),
            "REPORTS_DIR": str(workdir / "reports"),
            "RUN_DIR": str(workdir / "run"),
            "PYTHONUNBUFFERED": "1",
        }
        self.launched_s = 0.0
        self.log_offset = 0
        (workdir / "logs").mkdir(parents=True, exist_ok=True)

    def sidecar(self) -> AbstractContextManager[subprocess.Popen[bytes]]:
        """The sidecar for the block, entered once it answers ``/health``."""
        log = self.workdir / "logs" / "sidecar.log"
        return serving([sys.executable, "-m", "sidecar.server"], log, f"{self.sidecar_url}/health", 120, self.env,
                       get_settings().vllm_headers)  # fmt: skip

    @contextmanager
    def vllm(self, variant_env: Mapping[str, str], timeout_s: float) -> Iterator[float]:
        """vLLM through the launcher with ``variant_env`` for the block, entered once it answers; yields the seconds
        from launch to answering.

        Raises:
            BenchError: it exited first, or did not answer within ``timeout_s``.
        """
        log = self.workdir / "logs" / "vllm.log"
        self.launched_s = time.time()
        self.log_offset = log.stat().st_size if log.exists() else 0
        started = time.monotonic()
        with serving([sys.executable, "-m", "engine.launcher"], log, f"{self.vllm_url}/v1/models", timeout_s,
                     {**self.env, **variant_env}, get_settings().vllm_headers):  # fmt: skip
            yield time.monotonic() - started


def run_benchmark(stack: PrivateStack, dataset: Path, tag: str, args: argparse.Namespace) -> dict[str, Any]:
    """One ``python -m loadgen.command.benchmark``; its report JSON.

    Raises:
        BenchError: the run failed or wrote no report.
    """
    log = stack.workdir / f"bench_{tag}.log"
    before = set((stack.workdir / "reports").glob("benchmark_report_*.json"))

    def new_reports() -> list[Path]:
        return sorted(set((stack.workdir / "reports").glob("benchmark_report_*.json")) - before)

    run_fixed_load(stack.env, log, args, vllm_url=stack.vllm_url, sidecar_url=stack.sidecar_url, dataset=dataset,
                   done=lambda: bool(new_reports()))  # fmt: skip
    new = new_reports()
    report: dict[str, Any] = json.loads(new[-1].read_text())
    report["_path"] = str(new[-1])
    return report


def one_run(stack: PrivateStack, variant: str, index: int, dataset: Path, args: argparse.Namespace) -> RunResult:
    """Start vLLM as ``variant``, benchmark it, stop it."""
    load_before = os.getloadavg()[0]
    with stack.vllm(VARIANTS[variant], args.startup_timeout_s) as startup_wall_s:
        log = stack.workdir / "logs" / "vllm.log"
        phase = startup_phase(log)
        with log.open("rb") as f:
            f.seek(stack.log_offset)
            start_lines = f.read().splitlines()
        phases = start_breakdown(start_lines, stack.launched_s)
        report = run_benchmark(stack, dataset, f"{variant}_{index}", args)
    time.sleep(2)  # the port and shared memory of the stopped engine are released
    m = report["metrics"]
    ttft, tpot = m["ttft"]["p50_ms"], m["tpot"]["p50_ms"]
    return RunResult(
        variant=variant,
        round=index,
        startup_wall_s=round(startup_wall_s, 1),
        startup_log_s=phase.startup_s,
        weights_s=phase.load_s,
        engine_init_s=phase.engine_init_s,
        output_tokens_per_sec=round(float(m["output_tokens_per_sec"]), 2),
        ttft_p50_ms=None if ttft is None else round(ttft, 1),
        tpot_p50_ms=None if tpot is None else round(tpot, 1),
        requests_ok=int(m["requests_ok"]),
        load_before=round(load_before, 2),
        load_after=round(os.getloadavg()[0], 2),
        report=str(report["_path"]),
        phases=phases,
        compile_cache=compile_cache(start_lines),
    )


def run_line(r: RunResult) -> str:
    """One printed line per run."""
    return (
        f"{r.variant:15s} round {r.round + 1}: {r.output_tokens_per_sec:6.1f} tok/s"
        f" | TTFT p50 {fmt_or_na(r.ttft_p50_ms, '.0f')} ms"
        f" | TPOT p50 {fmt_or_na(r.tpot_p50_ms)} ms | start {r.startup_wall_s:.0f} s"
        f" (engine init {fmt_or_na(r.engine_init_s)} s)"
        f" | {r.requests_ok} ok | load {r.load_before:.1f} -> {r.load_after:.1f}"
        + f"\n    compile cache: {r.compile_cache}; start phases (s): "
        + ", ".join(f"{k} {v:g}" for k, v in r.phases.items())
    )


def summary_lines(results: Sequence[RunResult], variants: Sequence[str]) -> tuple[list[str], bool | None]:
    """Median table and the verdict on :data:`TARGET_RATIO` (None when either side is missing)."""
    base = medians(results, BASELINE)["output_tokens_per_sec"] if BASELINE in variants else None
    lines = ["| variant | output tok/s | ÷ vLLM defaults | TTFT p50 ms | TPOT p50 ms | start s | engine init s |"]
    lines.append("|---|---|---|---|---|---|---|")
    for variant in variants:
        m = medians(results, variant)
        tok = m["output_tokens_per_sec"]
        ratio = tok / base if tok is not None and base else None
        lines.append(
            f"| {variant} | {fmt_or_na(tok)} | {fmt_or_na(ratio, '.2f')} | {fmt_or_na(m['ttft_p50_ms'], '.0f')} | "
            f"{fmt_or_na(m['tpot_p50_ms'])} | {fmt_or_na(m['startup_wall_s'], '.0f')} | "
            f"{fmt_or_na(m['engine_init_s'])} |"
        )
    shipped = medians(results, SHIPPED)["output_tokens_per_sec"] if SHIPPED in variants else None
    if shipped is None or not base:
        return lines, None
    ratio = shipped / base
    lines.append(
        f"[ENGINE] {SHIPPED} ÷ {BASELINE}: {ratio:.2f} (target ≥ {TARGET_RATIO}: "
        f"{'met' if ratio >= TARGET_RATIO else 'MISSED'})"
    )
    return lines, ratio >= TARGET_RATIO


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and judge; 0 met, 1 missed, 2 a run failed."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--variants", default=DEFAULT_VARIANTS, help=f"comma-separated, of {', '.join(VARIANTS)} (default: %(default)s)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--requests", type=int, default=48)
    parser.add_argument("--warmup", type=int, default=8)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--prompt-chars", type=int, default=120)
    parser.add_argument("--startup-timeout-s", type=float, default=900.0)
    parser.add_argument("--timeout-s", type=float, default=900.0, help="per benchmark run")
    parser.add_argument("--out", type=Path, default=None, help="write every run as JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, reports)")
    args = parser.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants or args.repeats < 1:
        parser.error(
            f"unknown variant(s) {unknown}; choose from {', '.join(VARIANTS)}" if unknown else "nothing to run"
        )

    results: list[RunResult] = []
    with work_folder("engine_defaults_", args.keep, BenchError) as workdir:
        dataset = workdir / "prompts.sharegpt.json"
        prompts = sharegpt_prompts(args.requests + args.warmup, args.prompt_chars)
        dataset.write_text(json.dumps(prompts, ensure_ascii=False))
        print(
            f"[ENGINE] {len(variants)} variant(s) × {args.repeats} round(s): concurrency {args.concurrency}, "
            f"{args.requests} requests (+{args.warmup} warmup), {args.output_tokens} output tokens, "
            f"{args.prompt_chars}-character prompts; {os.cpu_count()} cores; work folder {workdir}",
            flush=True,
        )
        stack = PrivateStack(workdir)
        try:
            with stack.sidecar():
                for index in range(args.repeats):
                    for variant in round_order(variants, index):
                        result = one_run(stack, variant, index, dataset, args)
                        results.append(result)
                        print(f"[ENGINE] {run_line(result)}", flush=True)
        finally:
            if args.out is not None:
                args.out.write_text(json.dumps([asdict(r) for r in results], indent=1))
    lines, met = summary_lines(results, variants)
    print("\n".join(lines))
    return 0 if met in (True, None) else 1


if __name__ == "__main__":
    raise SystemExit(main())
