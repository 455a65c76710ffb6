"""Deterministic request logs (``requests.jsonl``) of any length, for the analyzer's ``--stats`` tests and benchmarks.

Test data, not product code. :func:`write_requests_log` writes in constant memory; :class:`OkLatencies` keeps the
true latencies of the successful records to compare percentiles with.
"""

from __future__ import annotations

import json
import random
from array import array
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path


def write_requests_log(
    path: Path, count: int, start_s: float, seed: int = 0, on_ok: Callable[[float, float], None] | None = None
) -> None:
    """Write ``count`` ``requests.jsonl`` records (about 230 bytes each) ending from ``start_s`` on, two seconds apart.

    Latencies are log-normal (TTFT median ~150 ms; total = TTFT + tokens x ~30 ms with a heavy tail); 1 % of the
    requests fail (timeouts, refused connections), 0.5 % are cancelled, a tenth come from the UI. Written in chunks:
    memory does not grow with ``count``. ``on_ok(total_ms, ttft_ms)`` sees every successful record's latencies (for
    exact percentiles to compare with).
    """
    rng = random.Random(seed)
    chunk: list[str] = []
    with path.open("w", encoding="utf-8", newline="\n") as out:
        for i in range(count):
            ttft_ms = round(rng.lognormvariate(5.0, 0.6), 3)
            tokens = rng.randint(16, 512)
            total_ms = round(ttft_ms + tokens * rng.lognormvariate(3.4, 0.35), 3)
            roll = rng.random()
            status = "error" if roll < 0.01 else "cancelled" if roll < 0.015 else "ok"
            error = (rng.choice(("timeout after 300000 ms", "vLLM is not reachable")) if status == "error" else None)
            ts = datetime.fromtimestamp(start_s + i * 2.0, UTC).isoformat(timespec="milliseconds")
            record = {
                "ts": ts, "source": "ui" if i % 10 == 0 else "loadtest", "request_id": f"r{i}", "model": "ernie",
                "prompt_tokens": rng.randint(8, 2048), "completion_tokens": None if error else tokens,
                "ttft_ms": None if error else ttft_ms, "total_ms": total_ms, "status": status, "error": error,
            }  # fmt: skip
            chunk.append(json.dumps(record))
            if status == "ok" and on_ok is not None:
                on_ok(total_ms, ttft_ms)
            if len(chunk) >= 10_000:
                out.write("\n".join(chunk) + "\n")
                chunk.clear()
        if chunk:
            out.write("\n".join(chunk) + "\n")


class OkLatencies:
    """Collects the successful records' latencies of :func:`write_requests_log` (``array('d')``: 8 bytes each)."""

    def __init__(self) -> None:
        self.total_ms: array[float] = array("d")
        self.ttft_ms: array[float] = array("d")

    def __call__(self, total_ms: float, ttft_ms: float) -> None:
        self.total_ms.append(total_ms)
        self.ttft_ms.append(ttft_ms)
