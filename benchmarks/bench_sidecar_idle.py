"""The sidecar's own CPU between runs: its sampler scrapes vLLM's ``/metrics`` every ``ENGINE_METRICS_INTERVAL_S``.

``python benchmarks/bench_sidecar_idle.py`` serves a recorded vLLM 0.32 exposition (62 kB,
``tests/fixtures/metrics/vllm_0.32_after.txt``) on a local port and measures, in one run: the CPU per scrape of a new
``httpx`` client per scrape (the sampler before 2026-12-07) against the sampler's reader with its kept connection
(:class:`sidecar.sampling.enginemetrics.EngineMetricsReader`, parsing included), in alternating rounds of
``--scrapes``; and a real ``python -m sidecar.server``'s CPU over ``--idle-s`` seconds, in percent of one core.
Figures: docs/measured.md. Exit 1 when a scrape fails.
"""

from __future__ import annotations

import argparse
import http.server
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

import httpx
import psutil
from benchkit import REPO

from core.net import free_port, wait_for_http
from sidecar.sampling.enginemetrics import EngineMetricsReader

EXPOSITION = (REPO / "tests" / "fixtures" / "metrics" / "vllm_0.32_after.txt").read_bytes()


class _Metrics(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(EXPOSITION)))
        self.end_headers()
        self.wfile.write(EXPOSITION)

    def log_message(self, *args: object) -> None:
        pass


def cpu_ms_per_scrape(scrape: Callable[[], None], n: int) -> float:
    """Process CPU per call of ``scrape``, ms (mean over ``n`` calls)."""
    start = time.process_time()
    for _ in range(n):
        scrape()
    return (time.process_time() - start) / n * 1000


def sidecar_idle_percent(metrics_url: str, idle_s: float) -> float:
    """CPU of a real sidecar over ``idle_s`` seconds after it answers /health, percent of one core."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "VLLM_BASE_URL": metrics_url, "SIDECAR_PORT": str(port), "LOGS_DIR": f"{tmp}/logs",
               "REPORTS_DIR": f"{tmp}/reports"}  # fmt: skip
        proc = subprocess.Popen([sys.executable, "-m", "sidecar.server"], cwd=REPO, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            ok, why = wait_for_http(f"http://127.0.0.1:{port}/health", 60, interval_s=0.5)
            if not ok:
                raise SystemExit(f"the sidecar did not start: {why}")
            time.sleep(3)  # its first scrapes and imports done
            process = psutil.Process(proc.pid)

            def cpu_s() -> float:
                return sum(process.cpu_times()[:2])  # user + system

            before, t0 = cpu_s(), time.monotonic()
            time.sleep(idle_s)
            return 100 * (cpu_s() - before) / (time.monotonic() - t0)
        finally:
            proc.terminate()
            proc.wait(10)


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print it."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scrapes", type=int, default=50, help="scrapes per round (default 50)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument("--idle-s", type=float, default=60.0, help="how long the real sidecar is watched (s)")
    args = parser.parse_args(argv)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    reader = EngineMetricsReader(base)
    clock = iter(range(10**9))

    def kept() -> None:
        if reader.read(float(next(clock)), force=True) is None:
            raise SystemExit(f"scrape failed: {reader.unavailable_reason}")

    def fresh() -> None:
        httpx.get(f"{base}/metrics", timeout=2).raise_for_status()

    for r in range(1, args.rounds + 1):
        new, old = cpu_ms_per_scrape(kept, args.scrapes), cpu_ms_per_scrape(fresh, args.scrapes)
        print(f"round {r}: client per scrape {old:.2f} ms CPU, kept connection + parse {new:.2f} ms "
              f"({old / new:.1f}x)")  # fmt: skip
    reader.close()
    print(f"sidecar idle for {args.idle_s:g} s: {sidecar_idle_percent(base, args.idle_s):.2f} % of one core")
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
