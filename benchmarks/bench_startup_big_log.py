"""``GET /startup`` and a report build on a 2 GB ``vllm.log``, against reading the whole log as before.

Run from the repository root: ``.venvs/app/bin/python benchmarks/bench_startup_big_log.py [--gb 2] [--runs 5]``.
It writes a ``--gb`` GiB log (a cold start, serving lines, a restart recorded in ``engine_state.json``, more serving)
and times: ``read_startup`` (``/startup``, ``make status`` and reports use it) and ``GET /startup`` through the sidecar
app in-process, median of ``--runs``; ``POST /reports`` over that log and with no log, median of 3; ``startup_phase``
reading the whole file, once. Target: ``GET /startup`` <= 50 ms with the same phase and timings as the whole read.
Exits 1 on a miss. Needs ``--gb`` GiB free in the temp folder.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path

import benchkit  # noqa: F401  (puts the repository on the import path)

from core.enginestate import EngineState, log_position, write_engine_state
from core.logfiles import ReadStats
from core.settings import Settings
from engine.vllmlog.startup import read_startup, startup_phase

TARGET_MS = 50.0
START = (
    "[INFO] Starting vLLM: python -m vllm.entrypoints.openai.api_server --model m\n"
    "(APIServer pid=1) INFO 11-29 21:55:01 [utils.py:253] vLLM API server version 0.32.0\n"
    "(EngineCore pid=2) INFO 11-29 21:55:03 [default_loader.py:1] Loading weights took {load} seconds\n"
    "(EngineCore pid=2) INFO 11-29 21:55:10 [kv_cache_utils.py:1] GPU KV cache size: 10,000 tokens\n"
    "(EngineCore pid=2) INFO 11-29 21:55:20 [core.py:1] init engine (profile, create kv cache, warmup model) took "
    "{init} seconds\n"
    "(APIServer pid=1) INFO 11-29 21:55:30 [api_server.py:1] Starting vLLM server on http://127.0.0.1:8100\n"
)
ACCESS = '(APIServer pid=1) INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
STATS = (
    "(APIServer pid=1) INFO 11-29 22:10:00 [loggers.py:1] Engine 000: Avg prompt throughput: 1200.5 tokens/s, "
    "Avg generation throughput: 850.2 tokens/s, Running: 12 reqs, Waiting: 0 reqs, GPU KV cache usage: 31.4%, "
    "Prefix cache hit rate: 12.0%\n"
)


def write_log(path: Path, gib: float) -> EngineState:
    """The log described in the module docstring; returns the engine state of its second (latest) launch."""
    block = ((ACCESS * 40 + STATS) * 256).encode()
    half = int(gib * (1 << 30) / 2)
    with path.open("wb") as fh:
        fh.write(START.format(load="1.50", init="17.00").encode())
        for _ in range(half // len(block)):
            fh.write(block)
    position = log_position(path)
    with path.open("ab") as fh:
        fh.write(START.format(load="4.25", init="9.00").encode())
        for _ in range(half // len(block)):
            fh.write(block)
    return EngineState(requested="m", source="local", model_arg="m", served_name="m", log_start=position)


def median_ms(fn: Callable[[], object], runs: int) -> float:
    """The median wall time of ``runs`` calls of ``fn``, ms."""
    return statistics.median(timeit.repeat(fn, number=1, repeat=runs)) * 1000.0


def main(argv: list[str] | None = None) -> int:
    """Generate, time, print the figures and PASS/FAIL."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=2.0, help="size of the generated log, GiB")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)

    from fastapi.testclient import TestClient

    from sidecar.server import create_app
    from tests.fakes import FakeNvml
    from tests.unit.sidecar.test_sidecar_app import body, make_service

    def client_for(settings: Settings) -> TestClient:
        return TestClient(create_app(settings, make_service(settings, FakeNvml())), base_url="http://127.0.0.1:8200")

    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        logs = Path(tmp) / "logs"
        logs.mkdir()
        log = logs / "vllm.log"
        t0 = time.perf_counter()
        state = write_log(log, args.gb)
        write_engine_state(logs / "engine_state.json", state)
        print(f"[BENCH] {log.stat().st_size / (1 << 30):.2f} GiB log written in {time.perf_counter() - t0:.0f} s")

        stats = ReadStats()
        bounded = read_startup(log, state, stats)
        bounded_ms = median_ms(lambda: read_startup(log, state), args.runs)

        settings = Settings(  # type: ignore[call-arg]
            _env_file=None, logs_dir=logs, reports_dir=Path(tmp) / "reports", run_dir=Path(tmp) / "run",
            vllm_base_url="http://vllm.invalid:8100", sidecar_token="bench",
        )  # fmt: skip
        auth = {"Authorization": "Bearer bench"}
        with client_for(settings) as client:
            assert client.get("/startup").json()["phase"] == "ready"
            endpoint_ms = median_ms(lambda: client.get("/startup"), args.runs)
            report_ms = median_ms(lambda: client.post("/reports", json=body(runs_dir=logs / "runs"), headers=auth), 3)
        bare = settings.model_copy(update={"logs_dir": Path(tmp) / "no-logs"})
        with client_for(bare) as client:
            rows = bare.logs_dir / "runs"
            no_log_ms = median_ms(lambda: client.post("/reports", json=body(runs_dir=rows), headers=auth), 3)

        t0 = time.perf_counter()
        full = startup_phase(log)
        full_ms = (time.perf_counter() - t0) * 1000.0

    same = (bounded.phase, bounded.load_s, bounded.engine_init_s, bounded.kv_cache_line) == (
        full.phase, full.load_s, full.engine_init_s, full.kv_cache_line,
    )  # fmt: skip
    print(f"[BENCH] read_startup (bounded): {bounded_ms:.1f} ms median, {stats.bytes_read / (1 << 20):.1f} MiB read")
    print(f"[BENCH] GET /startup: {endpoint_ms:.1f} ms median (target <= {TARGET_MS:.0f} ms)")
    print(f"[BENCH] POST /reports over the log: {report_ms:.0f} ms median; without a log {no_log_ms:.0f} ms")
    print(f"[BENCH] whole-file startup_phase (before): {full_ms / 1000:.1f} s = {full_ms / bounded_ms:.0f}x bounded")
    print(f"[BENCH] same phase and timings as the whole read: {same} ({bounded.phase}, load {bounded.load_s} s)")
    ok = endpoint_ms <= TARGET_MS and same
    print("[BENCH] PASS" if ok else "[BENCH] FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
