"""``make calibrate``: the load generator's own ceiling, with one and with N worker processes, and the latency it adds.

``python -m loadgen.selftest.calibrate`` runs *our* client (``make benchmark``'s Locust file and request function)
against the bundled mock server (several processes: not the limit) on a free port:

1. **chunk ceiling**: mock with no delays (128 tokens, ``--tokens-per-chunk`` K per event), 32 users for 12 s:
   content chunks per CPU-second of the Locust process tree, with 1 worker and with ``--workers N``;
2. **request ceiling**: the same with 1-token answers: completed requests per CPU-second;
3. **added latency**: mock paced at 200 ms TTFT and 20 ms ITL, 4 users for 8 s: median TTFT and ITL minus the
   configured ones (an upper bound: the mock's own scheduling is included).

CPU (psutil, every 0.1 s) counts over the measured window only. The result goes to ``logs/calibration.json``; a
benchmark at ≥ 80 % of the per-core ceiling times its workers is flagged client-limited.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from core.clientview import Calibration, CalibrationRun, save_calibration
from core.logfiles import log_tail
from core.records import RequestRecord
from core.settings import PROJECT_ROOT, get_settings
from loadgen.childprocs import CpuSample, CpuSampler, ProcessError, cpu_in_window, mock_server, stop_process
from loadgen.orchestrate.locust_launch import locust_argv
from loadgen.plan import usable_cores

LOCUST_EXIT_GRACE_S = 90.0  # start-up on a busy machine plus shutdown after --run-time
UNSATURATED_CORES = 0.5  # below this, the client was not the bottleneck and the per-core figure is an estimate


class CalibrationError(RuntimeError):
    """A calibration run could not be made; the message says why and where the log is."""


def run_our_client(base_url: str, workdir: Path, *, users: int, run_time_s: float, max_tokens: int,
                   server_pid: int | None = None, name: str = "locust",
                   workers: int = 1) -> tuple[list[RequestRecord], list[CpuSample], list[CpuSample]]:
    """One headless closed-loop Locust run of our client (``workers`` processes, fixed ``max_tokens``, no ramp-up or
    warmup, its request log in a scratch folder) for ``run_time_s``.

    Returns:
        ``(rows, Locust tree CPU samples, server CPU samples)`` — the last is empty without ``server_pid``.

    Raises:
        CalibrationError: Locust failed to start or hung.
    """
    from loadgen.orchestrate.measured_run import read_records

    settings = get_settings().model_copy(update={"vllm_base_url": base_url, "concurrency": users, "ramp_up_s": 0.0})
    records_path = workdir / f"{name}.requests.jsonl"
    log_path = workdir / f"{name}.log"
    records_path.write_text("")
    argv = locust_argv(settings, headless=True, users=users, run_time_s=run_time_s, records_file=records_path,
                       workers=workers)
    env = {**os.environ, "LOGS_DIR": str(Path(tempfile.gettempdir()) / "llm-serve-calibrate-logs"),
           "VLLM_BASE_URL": base_url, "CONCURRENCY": str(users), "MAX_TOKENS": str(max_tokens), "OUTPUT_LEN": "fixed",
           "IGNORE_EOS": "false", "RATE": "", "RAMP_UP_S": "0", "WARMUP": "0"}  # fmt: skip
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    client = CpuSampler(proc.pid)
    server = CpuSampler(server_pid) if server_pid else None
    try:
        with client, server or nullcontext():
            proc.wait(timeout=run_time_s + LOCUST_EXIT_GRACE_S)
    except subprocess.TimeoutExpired:
        raise CalibrationError(f"Locust did not finish; log:\n{log_tail(log_path)}") from None
    finally:
        stop_process(proc)
    if proc.returncode not in (0, 1):  # 1 = some request failed; the rows say which
        raise CalibrationError(f"Locust exited with {proc.returncode}; log:\n{log_tail(log_path)}")
    records, _ = read_records(records_path)
    if not any(r.ok for r in records):
        errors = {r.error for r in records if r.error}
        raise CalibrationError(f"no request succeeded ({sorted(errors)[:3]}); Locust log:\n{log_tail(log_path)}")
    return records, client.samples, server.samples if server is not None else []


# --------------------------------------------------------------------------------------------- calibrate


@dataclass(frozen=True)
class CalibrateOptions:
    """Shapes of the runs."""

    users: int = 32
    run_time_s: float = 12.0
    chunk_tokens: int = 128
    tokens_per_chunk: int = 1
    workers: int = 2
    mock_processes: int = 2
    latency_users: int = 4
    latency_run_time_s: float = 8.0
    latency_tokens: int = 20
    ttft_ms: float = 200.0
    itl_ms: float = 20.0


def calibrate(options: CalibrateOptions, workdir: Path) -> tuple[Calibration, dict[str, ClientRun]]:
    """The ceiling runs (1 and N workers) and the latency run: the calibration and each run's figures.

    Raises:
        CalibrationError: a run failed (the message has the log tail).
    """
    runs: dict[str, ClientRun] = {}
    keyed = get_settings().vllm_client_key is not None  # the mock then refuses requests without it, as vLLM does
    stored: list[CalibrationRun] = []
    counts = sorted({1, options.workers})
    for kind, tokens in (("chunk_ceiling", options.chunk_tokens), ("request_ceiling", 1)):
        for workers in counts:
            name = f"{kind}_w{workers}"
            print(f"[CALIBRATE] {name}: mock {tokens} token(s) ({options.tokens_per_chunk} per event), no delays, "
                  f"{options.mock_processes} mock process(es); {options.users} users on {workers} worker(s), "
                  f"{options.run_time_s:g} s", flush=True)  # fmt: skip
            with mock_server(workdir / f"mock_{name}.log", tokens=tokens, ttft_ms=0, itl_ms=0,
                             tokens_per_chunk=options.tokens_per_chunk, processes=options.mock_processes,
                             require_api_key=keyed) as mock:
                rows, client, server = run_our_client(mock.url, workdir, users=options.users,
                                                      run_time_s=options.run_time_s, max_tokens=tokens,
                                                      server_pid=mock.pid, name=name, workers=workers)
            runs[name] = summarize_records(rows, client, server)
            stored.append(calibration_run(name, workers, runs[name]))
    print(f"[CALIBRATE] added_latency: mock TTFT {options.ttft_ms:g} ms, ITL {options.itl_ms:g} ms, "
          f"{options.latency_tokens} tokens, {options.latency_users} users, {options.latency_run_time_s:g} s",
          flush=True)  # fmt: skip
    with mock_server(workdir / "mock_latency.log", tokens=options.latency_tokens, ttft_ms=options.ttft_ms,
                     itl_ms=options.itl_ms, require_api_key=keyed) as mock:
        rows, client, server = run_our_client(mock.url, workdir, users=options.latency_users,
                                              run_time_s=options.latency_run_time_s, max_tokens=options.latency_tokens,
                                              server_pid=mock.pid, name="added_latency")
    runs["added_latency"] = summarize_records(rows, client, server)
    added_ttft_ms, added_itl_ms = added_latency_ms(rows, options.ttft_ms, options.itl_ms)
    calibration = Calibration(chunks_per_sec_per_core=runs["chunk_ceiling_w1"].chunks_per_sec_per_core,
                              requests_per_sec_per_core=runs["request_ceiling_w1"].requests_per_sec_per_core,
                              added_ttft_ms=added_ttft_ms, added_itl_ms=added_itl_ms,
                              measured_at=datetime.now().astimezone().isoformat(timespec="seconds"),
                              tokens_per_chunk=options.tokens_per_chunk, runs=stored)
    return calibration, runs


def main(argv: list[str] | None = None) -> int:
    """Calibrate and write ``logs/calibration.json``; 0 on success, 1 when a run failed."""
    defaults = CalibrateOptions()
    cores = usable_cores()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=defaults.users, help="concurrent users of the ceiling runs")
    parser.add_argument("--run-time-s", type=float, default=defaults.run_time_s, help="length of each ceiling run")
    parser.add_argument("--chunk-tokens", type=int, default=defaults.chunk_tokens, help="tokens per mock answer")
    parser.add_argument("--tokens-per-chunk", type=int, default=1, help="tokens per event (vLLM-like chunking)")
    parser.add_argument("--workers", type=int, default=cores, help="worker processes of the scale-out runs")
    parser.add_argument("--mock-processes", type=int, default=cores, help="mock server processes")
    parser.add_argument("--output", type=Path, default=None, help="default: LOGS_DIR/calibration.json")
    parser.add_argument("--keep-logs", action="store_true", help="keep the temporary run folder and print its path")
    args = parser.parse_args(argv)
    options = CalibrateOptions(users=args.users, run_time_s=args.run_time_s, chunk_tokens=args.chunk_tokens,
                               tokens_per_chunk=args.tokens_per_chunk, workers=max(1, args.workers),
                               mock_processes=max(1, args.mock_processes))
    output = args.output or get_settings().logs_dir / "calibration.json"
    workdir = Path(tempfile.mkdtemp(prefix="calibrate_"))
    print(f"[CALIBRATE] {cores} usable core(s), load average {os.getloadavg()[0]:.1f}; work folder {workdir}")
    try:
        calibration, runs = calibrate(options, workdir)
    except (CalibrationError, ProcessError, ValueError) as exc:
        print(f"[ERROR] calibration failed: {exc}\n[ERROR] run files kept in {workdir}", file=sys.stderr)
        return 1
    for line in calibration_table(runs) + scaling_lines(runs, options.workers):
        print(f"[CALIBRATE] {line}")
    ceiling = runs["chunk_ceiling_w1"]
    if ceiling.client_cores < UNSATURATED_CORES:
        print(f"[WARN] the client used only {ceiling.client_cores:.2f} core(s) in the 1-worker ceiling run (mock "
              f"{ceiling.server_cores or 0:.2f}): something else (other processes, the mock) took the CPU, so the "
              "per-core ceiling is taken below saturation. Rerun on a quieter machine.")  # fmt: skip
    print(f"[CALIBRATE] ceiling {calibration.chunks_per_sec_per_core:.0f} chunks/s and "
          f"{calibration.requests_per_sec_per_core:.1f} req/s per client core; added latency "
          f"TTFT {calibration.added_ttft_ms:+.1f} ms, ITL {calibration.added_itl_ms:+.2f} ms")  # fmt: skip
    save_calibration(output, calibration)
    print(f"[CALIBRATE] saved to {output}")
    if args.keep_logs:
        print(f"[CALIBRATE] run files in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0



def per_core_rate(count: float, cpu_s: float) -> float:
    """Events per CPU-second, i.e. events/s one fully used core sustains.

    Raises:
        ValueError: ``cpu_s`` is not positive (nothing was measured).
    """
    if cpu_s <= 0:
        raise ValueError(f"no CPU time measured ({cpu_s} s); the run was too short or the process not sampled")
    return count / cpu_s


@dataclass(frozen=True)
class ClientRun:
    """One client run: what it streamed in its measured window and the CPU it (and the server) used there."""

    requests_ok: int
    requests_failed: int
    chunks: int
    window_s: float
    client_cpu_s: float
    server_cpu_s: float | None = None

    def _per_window(self, value: float) -> float:
        return value / self.window_s if self.window_s > 0 else 0.0

    @property
    def chunks_per_sec(self) -> float:
        """Content chunks per wall-clock second."""
        return self._per_window(self.chunks)

    @property
    def requests_per_sec(self) -> float:
        """Completed requests per wall-clock second."""
        return self._per_window(self.requests_ok)

    @property
    def client_cores(self) -> float:
        """Mean cores the client used over the window."""
        return self._per_window(self.client_cpu_s)

    @property
    def server_cores(self) -> float | None:
        """Mean cores the (mock) server used over the window, when it was sampled."""
        return None if self.server_cpu_s is None or self.window_s <= 0 else self._per_window(self.server_cpu_s)

    @property
    def chunks_per_sec_per_core(self) -> float:
        """Content chunks per client CPU-second."""
        return per_core_rate(self.chunks, self.client_cpu_s)

    @property
    def requests_per_sec_per_core(self) -> float:
        """Completed requests per client CPU-second."""
        return per_core_rate(self.requests_ok, self.client_cpu_s)


def summarize_records(records: Sequence[RequestRecord], client_samples: Sequence[CpuSample],
                      server_samples: Sequence[CpuSample] | None = None) -> ClientRun:
    """A :class:`ClientRun` from our rows: window = first send to last end of the measured rows (pure).

    Raises:
        ValueError: no successful measured row, or no CPU samples.
    """
    measured = [r for r in records if r.phase == "measured"]
    ok = [r for r in measured if r.ok]
    if not ok:
        raise ValueError("no successful request was recorded")
    start = min(r.started_at for r in measured)
    end = max(r.ended_at for r in measured)
    return ClientRun(requests_ok=len(ok), requests_failed=len(measured) - len(ok),
                     chunks=sum(r.content_chunks for r in ok), window_s=end - start,
                     client_cpu_s=cpu_in_window(client_samples, start, end),
                     server_cpu_s=cpu_in_window(server_samples, start, end) if server_samples else None)


def added_latency_ms(records: Sequence[RequestRecord], ttft_ms: float, itl_ms: float) -> tuple[float, float]:
    """``(added TTFT, added ITL)``: medians of the successful rows' TTFT and inter-chunk gaps minus the configured ones.

    Raises:
        ValueError: no successful row with a TTFT, or no inter-chunk gap (responses of a single chunk).
    """
    ok = [r for r in records if r.ok and r.phase == "measured"]
    ttfts = [r.ttft_ms for r in ok if r.ttft_ms is not None]
    gaps = [gap for r in ok for gap in r.itl_ms]
    if not ttfts or not gaps:
        raise ValueError("the latency run recorded no TTFT or no inter-chunk gap")
    return statistics.median(ttfts) - ttft_ms, statistics.median(gaps) - itl_ms


def calibration_table(rows: Mapping[str, ClientRun]) -> list[str]:
    """Aligned text lines describing each run (pure)."""
    lines = [f"{'run':<20}{'ok':>7}{'failed':>7}{'chunks':>9}{'window_s':>10}{'cpu_s':>8}{'client_cores':>13}"
             f"{'mock_cores':>11}{'chunks/s':>10}{'req/s':>8}{'chunks/s/core':>14}{'req/s/core':>11}"]
    for name, run in rows.items():
        mock = "n/a" if run.server_cores is None else f"{run.server_cores:.2f}"
        lines.append(f"{name:<20}{run.requests_ok:>7}{run.requests_failed:>7}{run.chunks:>9}{run.window_s:>10.1f}"
                     f"{run.client_cpu_s:>8.1f}{run.client_cores:>13.2f}{mock:>11}{run.chunks_per_sec:>10.0f}"
                     f"{run.requests_per_sec:>8.0f}{run.chunks_per_sec_per_core:>14.0f}"
                     f"{run.requests_per_sec_per_core:>11.1f}")
    return lines


def calibration_run(name: str, workers: int, run: ClientRun) -> CalibrationRun:
    """One run as stored in ``logs/calibration.json`` (pure): its figures of the same names, the server's cores."""
    figures = {key: getattr(run, key) for key in CalibrationRun.model_fields.keys() - {"name", "workers", "mock_cores"}}
    return CalibrationRun(name=name, workers=workers, mock_cores=run.server_cores, **figures)


def scaling_lines(runs: Mapping[str, ClientRun], workers: int) -> list[str]:
    """``N workers: X× the chunks/s of 1`` for each ceiling (pure); nothing when N is 1."""
    if workers <= 1:
        return []
    lines = []
    for kind, rate in (("chunk_ceiling", "chunks_per_sec"), ("request_ceiling", "requests_per_sec")):
        one, many = runs.get(f"{kind}_w1"), runs.get(f"{kind}_w{workers}")
        if one and many and getattr(one, rate) > 0:
            ratio = getattr(many, rate) / getattr(one, rate)
            lines.append(f"{kind}: {workers} workers stream {ratio:.2f}x the {rate.replace('_per_sec', '')}/s of 1 "
                         f"(client cores {one.client_cores:.2f} -> {many.client_cores:.2f}, mock cores "
                         f"{one.server_cores or 0:.2f} -> {many.server_cores or 0:.2f})")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
