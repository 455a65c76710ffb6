"""Deterministic, realistic vLLM logs and request logs for the analyzer's tests and benchmarks.

Test data, not product code: it lives with the tests (the benchmarks import it from here). A log is a server's life: a start-up in the old format (no process prefixes, ``file.py:line]``), ten-second ticks of
uvicorn access lines and the engine's periodic stats line, warnings, errors with tracebacks (vLLM style with the
header on every line, and bare uvicorn ones), an upgrade to the new format (``(APIServer pid=N) ... [file.py:line]``),
engine crashes followed by restarts, and a few garbage lines. :class:`GeneratedLog` holds the true counts.
:func:`write_requests_log` (:mod:`tests.synthrequests`) writes a ``requests.jsonl`` of any length in constant
memory; :func:`write_current_shapes` (:mod:`tests.synthshapes`) the shapes deployments give a log.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TextIO

TICK_S = 10


@dataclass
class GeneratedLog:
    """Ground truth of a generated log: counts of what was written and the time span (epoch seconds)."""

    path: Path
    lines: int = 0
    size_bytes: int = 0
    metrics_lines: int = 0
    error_events: int = 0
    warning_events: int = 0
    traceback_events: int = 0
    inference_requests: int = 0
    status_4xx: int = 0
    status_5xx: int = 0
    starts: int = 0
    garbage_lines: int = 0
    first_stamp_s: float = 0.0
    last_stamp_s: float = 0.0
    error_messages: dict[str, int] = field(default_factory=dict)
    """Error events by exception type (``ValueError``)."""


class _Writer:
    """Builds the lines of one log; ``new`` switches between the old and the new vLLM format."""

    def __init__(self, rng: random.Random, start_s: float, facts: GeneratedLog) -> None:
        self.rng = rng
        self.now_s = start_s
        self.facts = facts
        self.lines: list[str] = []
        self.new = False
        self.api_pid = 1000
        self.core_pid = 1001
        self.worker_pid = 1002

    def stamp(self) -> str:
        return datetime.fromtimestamp(self.now_s).strftime("%m-%d %H:%M:%S")

    def log(self, proc: str, level: str, src: str, message: str) -> None:
        """A vLLM logger line in the current format."""
        if self.new:
            pid = {"APIServer": self.api_pid, "EngineCore_DP0": self.core_pid}.get(proc, self.worker_pid)
            self.lines.append(f"({proc} pid={pid}) {level} {self.stamp()} [{src}] {message}")
        else:
            self.lines.append(f"{level} {self.stamp()} {src}] {message}")

    def logged_traceback(self, proc: str, src: str, headline: str, frames: list[str], exception: str) -> None:
        """``logger.exception``: vLLM repeats the header on each line of the message."""
        for part in [headline, "Traceback (most recent call last):", *frames, exception]:
            self.log(proc, "ERROR", src, part)
        self.facts.error_events += 1
        self.facts.traceback_events += 1
        kind = exception.split(":")[0]
        self.facts.error_messages[kind] = self.facts.error_messages.get(kind, 0) + 1

    def start_up(self, version: str) -> None:
        self.facts.starts += 1
        self.api_pid, self.core_pid, self.worker_pid = (p + 37 for p in (self.api_pid, self.core_pid, self.worker_pid))
        self.lines.append("[INFO] Starting vLLM: /opt/venv/bin/python -m vllm.entrypoints.openai.api_server --port 81")
        if self.new:
            self.log("APIServer", "INFO", "utils.py:253", "non-default args: {'model': 'models/tiny', 'port': 8100}")
            self.log("APIServer", "WARNING", "system_utils.py:255", "Found ulimit of 20000 and failed to increase it.")
            self.facts.warning_events += 1
            self.now_s += 9
            self.log("EngineCore_DP0", "INFO", "core.py:133", f"Initializing a V1 LLM engine (v{version}) with config")
            self.log("Worker", "INFO", "cpu_model_runner.py:68", "Starting to load model models/tiny...")
            self.lines.append("Loading safetensors checkpoint shards: 100% Completed | 1/1 [00:00<00:00, 131.76it/s]")
            self.log("Worker", "INFO", "default_loader.py:501", "Loading weights took 0.01 seconds")
            self.log("Worker", "INFO", "cpu_model_runner.py:87", "Warming up model for the compilation...")
            self.now_s += 36
            self.log("EngineCore_DP0", "INFO", "kv_cache_utils.py:2327", "CPU KV cache size: 2,097,152 tokens")
            self.log("EngineCore_DP0", "INFO", "core.py:402", "init engine (profile, create kv cache) took 39.09 s")
            self.log("APIServer", "INFO", "entry.py:140", "Starting vLLM server on http://127.0.0.1:8100")
        else:
            self.log("", "INFO", "api_server.py:177", f"vLLM API server version {version}")
            self.log("", "INFO", "llm_engine.py:100", f"Initializing an LLM engine (v{version}) with config: model='m'")
            self.now_s += 3
            self.log("", "INFO", "model_runner.py:175", "Loading model weights took 0.2389 GB")
            self.log("", "INFO", "gpu_executor.py:114", "# GPU blocks: 127285, # CPU blocks: 7281")
            self.now_s += 8
            self.log("", "INFO", "model_runner.py:1094", "Graph capturing finished in 8 secs.")
        self.lines += ["INFO:     Started server process [42]", "INFO:     Application startup complete."]

    def tick(self) -> None:
        rng, facts = self.rng, self.facts
        self.now_s += TICK_S
        for _ in range(rng.randint(4, 10)):
            roll = rng.random()
            port = rng.randint(30000, 65000)
            if roll < 0.1:
                self.lines.append(f'INFO:     127.0.0.1:{port} - "GET /health HTTP/1.1" 200 OK')
                continue
            status = "200 OK"
            if roll > 0.995:
                status, facts.status_5xx = "500 Internal Server Error", facts.status_5xx + 1
            elif roll > 0.985:
                status, facts.status_4xx = "400 Bad Request", facts.status_4xx + 1
            facts.inference_requests += 1
            self.lines.append(f'INFO:     127.0.0.1:{port} - "POST /v1/chat/completions HTTP/1.1" {status}')
        running = rng.randint(0, 16)
        gen = round(running * rng.uniform(10, 16), 1)
        kv = round(running * 0.4, 1)
        if self.new:
            self.log(
                "APIServer", "INFO", "loggers.py:257",
                f"Engine 000: Avg prompt throughput: {gen * 0.3:.1f} tokens/s, Avg generation throughput: {gen} "
                f"tokens/s, Running: {running} reqs, Waiting: 0 reqs, GPU KV cache usage: {kv}%, "
                f"Prefix cache hit rate: {rng.uniform(0, 60):.1f}%",
            )  # fmt: skip
        else:
            self.log(
                "", "INFO", "metrics.py:351",
                f"Avg prompt throughput: {gen * 0.3:.1f} tokens/s, Avg generation throughput: {gen} tokens/s, "
                f"Running: {running} reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: {kv}%, "
                "CPU KV cache usage: 0.0%.",
            )  # fmt: skip
        facts.metrics_lines += 1
        self.incidents()

    def incidents(self) -> None:
        rng, facts = self.rng, self.facts
        roll = rng.random()
        if roll < 0.03:
            self.log(
                "EngineCore_DP0", "WARNING", "scheduler.py:1541",
                f"Sequence group chatcmpl-{rng.getrandbits(48):012x} is preempted by PreemptionMode.RECOMPUTE mode "
                f"because there is not enough KV cache space. total_num_cumulative_preemption={rng.randint(1, 999)}",
            )  # fmt: skip
            facts.warning_events += 1
        elif roll < 0.045:
            src = "serving_chat.py:1145" if self.new else "serving_chat.py:270"
            frames = [
                '  File "/opt/venv/lib/python3.11/site-packages/vllm/entrypoints/openai/serving_chat.py", line 581, '
                "in chat_completion_stream_generator",
                "    async for res in result_generator:",
                '  File "/opt/venv/lib/python3.11/site-packages/vllm/v1/engine/async_llm.py", line 402, in generate',
                "    raise ValueError(f'prompt too long: {n} tokens')",
            ]
            error = f"ValueError: prompt too long: {rng.randint(5000, 9000)} tokens"
            self.logged_traceback("APIServer", src, "Error in chat completion stream generator.", frames, error)
        elif roll < 0.05:
            self.lines += [
                "ERROR:    Exception in ASGI application",
                "Traceback (most recent call last):",
                '  File "/opt/venv/lib/python3.11/site-packages/uvicorn/protocols/http/httptools_impl.py", line 409',
                "    result = await app(  # type: ignore[func-returns-value]",
                "",
                "During handling of the above exception, another exception occurred:",
                "",
                "Traceback (most recent call last):",
                '  File "/opt/venv/lib/python3.11/site-packages/starlette/middleware/errors.py", line 186, in __call__',
                "    raise exc",
                "RuntimeError: Response content longer than Content-Length",
            ]
            facts.error_events += 1
            facts.traceback_events += 1
            facts.error_messages["RuntimeError"] = facts.error_messages.get("RuntimeError", 0) + 1
        elif roll < 0.051:
            self.lines.append(rng.choice(["\x00\x00\x00garbage\x01\x02", "\udcff\udcfe\udc80 binary junk", "=" * 3000]))
            facts.garbage_lines += 1

    def crash_and_restart(self, version: str) -> None:
        frames = [
            '  File "/opt/venv/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 842, in run_engine_core',
            "    engine_core.run_busy_loop()",
        ]
        self.logged_traceback(
            "EngineCore_DP0", "core.py:851", "EngineCore encountered a fatal error.", frames,
            "RuntimeError: Worker failed with error 'out of memory', please check the stack trace above",
        )  # fmt: skip
        self.lines += ["INFO:     Shutting down", "INFO:     Finished server process [42]"]
        self.now_s += 5
        self.start_up(version)


def generate_vllm_log(
    path: Path, n_lines: int = 500_000, seed: int = 0, start: datetime | None = None, old_format_share: float = 0.2
) -> GeneratedLog:
    """Write a realistic vLLM log of about ``n_lines`` lines (≈ 90 bytes each) to ``path``; same seed, same bytes.

    Args:
        path: file to (over)write; its modification time is set to the last line's time.
        n_lines: lines to write at least (whole records: the result may be a few lines longer).
        seed: random seed.
        start: local time of the first line (default 2026-11-20 00:00).
        old_format_share: share of the lines written by the old vLLM before the upgrade to the new format.
    """
    rng = random.Random(seed)
    start_s = (start or datetime(2026, 11, 20)).timestamp()
    facts = GeneratedLog(path=path, first_stamp_s=start_s)
    writer = _Writer(rng, start_s, facts)
    with path.open("w", encoding="utf-8", errors="surrogateescape", newline="\n") as out:
        writer.start_up("0.4.2")
        upgraded = False
        written = 0
        while written + len(writer.lines) < n_lines:
            if not upgraded and written + len(writer.lines) >= n_lines * old_format_share:
                writer.new = upgraded = True
                writer.lines += ["INFO:     Shutting down", "INFO:     Finished server process [42]"]
                writer.start_up("0.32.0")
            elif rng.random() < 0.0004:
                writer.crash_and_restart("0.32.0" if writer.new else "0.4.2")
            writer.tick()
            if len(writer.lines) > 10_000:
                written += _flush(out, writer.lines)
        written += _flush(out, writer.lines)
    facts.lines = written
    facts.size_bytes = path.stat().st_size
    facts.last_stamp_s = writer.now_s
    os.utime(path, (writer.now_s, writer.now_s))
    return facts


def _flush(out: TextIO, lines: list[str]) -> int:
    count = len(lines)
    out.write("\n".join(lines) + "\n")
    lines.clear()
    return count


def generate_current_log(path: Path, n_lines: int = 500_000, errors: int = 137, seed: int = 0) -> GeneratedLog:
    """A log in the shape vLLM writes today: every line behind ``(APIServer pid=N)`` (access lines, the stats line,
    warnings), with ``errors`` error records planted at random places (a third with a ``logger.exception``
    traceback, the header repeated on each line) and one warning per ~5,000 lines; same seed, same bytes.

    The truth (``error_events``, ``warning_events``, ``lines``) is in the returned :class:`GeneratedLog`.
    """
    rng = random.Random(seed)
    start_s = datetime(2026, 11, 20).timestamp()
    facts = GeneratedLog(path=path, first_stamp_s=start_s)
    planted = set(rng.sample(range(100, n_lines - 100), errors))
    prefix = "(APIServer pid=1111) "
    now_s = start_s
    with path.open("w", encoding="utf-8", newline="\n") as out:
        lines: list[str] = []
        for number in range(n_lines):
            if number % 50 == 0:
                now_s += 1
            stamp = datetime.fromtimestamp(now_s).strftime("%m-%d %H:%M:%S")
            if number in planted:
                facts.error_events += 1
                if facts.error_events % 3 == 0:
                    head = f"{prefix}ERROR {stamp} [serving_chat.py:1201] "
                    parts = ["Error in chat completion stream generator.", "Traceback (most recent call last):",
                             '  File "/opt/venv/lib/python3.12/site-packages/vllm/entrypoints/serving.py", line 9',
                             "    raise ValueError(msg)", f"ValueError: planted error {number}"]  # fmt: skip
                    lines += [head + part for part in parts]
                    facts.traceback_events += 1
                else:
                    lines.append(f"{prefix}ERROR {stamp} [engine.py:88] planted error {number}: request failed")
            elif number % 5000 == 2500:
                facts.warning_events += 1
                lines.append(f"{prefix}WARNING {stamp} [scheduler.py:1570] Sequence group 0 is preempted by "
                             "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space.")  # fmt: skip
            elif number % 500 == 0:
                facts.metrics_lines += 1
                lines.append(f"{prefix}INFO {stamp} [loggers.py:257] Engine 000: Avg prompt throughput: 812.4 "
                             "tokens/s, Avg generation throughput: 410.2 tokens/s, Running: 12 reqs, Waiting: 0 "
                             "reqs, GPU KV cache usage: 7.1%, Prefix cache hit rate: 41.0%")  # fmt: skip
            else:
                facts.inference_requests += 1
                port = rng.randrange(30000, 65000)
                lines.append(f'{prefix}INFO:     127.0.0.1:{port} - "POST /v1/chat/completions HTTP/1.1" 200 OK')
            if len(lines) > 10_000:
                facts.lines += _flush(out, lines)
        if lines:
            facts.lines += _flush(out, lines)
    facts.size_bytes = path.stat().st_size
    facts.last_stamp_s = now_s
    os.utime(path, (now_s, now_s))
    return facts
