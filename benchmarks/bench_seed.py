"""The seed's two benchmark commands, full size, on the running stack's own defaults, with the engine's raw speed.

Run from the repository root after ``make up`` (nothing else running: the figures are this host's)::

    make bench-seed                       # both seed commands and the speed probe
    .venvs/app/bin/python benchmarks/bench_seed.py --probe-only

The speed probe streams ``/v1/completions`` (token-id prompts, ``ignore_eos``): the prefill rate from one 512-token
prompt's TTFT, the ITL of 1, 8 and 32 streams started together. Then ``./run_benchmark.sh`` and ``./run_benchmark.sh
--concurrency 32 --duration 60``, each with its exit code, wall time, ``[RESULT]`` lines and vLLM's 60-s stall lines
(``No available shared memory broadcast block``) during it. ``benchmarks/avx2sim`` imitates an AVX2-only host.
Exit: 0 when both commands exited 0 with no stall line, else 1.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import subprocess
import sys
import time
from pathlib import Path

import benchkit  # noqa: F401  (puts the repository on the import path)
import httpx

from core.settings import PROJECT_ROOT, get_settings

STALL = "No available shared memory broadcast block"
SEED_COMMANDS: tuple[list[str], ...] = ([], ["--concurrency", "32", "--duration", "60"])


async def stream_once(client: httpx.AsyncClient, url: str, model: str, prompt_tokens: int, out_tokens: int,
                      seed: int) -> tuple[float, float]:  # fmt: skip
    """One streamed completion of ``prompt_tokens`` random token ids: (TTFT s, mean inter-token gap s)."""
    rnd = random.Random(seed)
    body = {"model": model, "prompt": [rnd.randrange(1000, 50000) for _ in range(prompt_tokens)],
            "max_tokens": out_tokens, "ignore_eos": True, "stream": True, "temperature": 0}  # fmt: skip
    start = time.perf_counter()
    stamps: list[float] = []
    async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data:") and "[DONE]" not in line:
                stamps.append(time.perf_counter())
    if not stamps:
        raise RuntimeError("the stream carried no token")
    return stamps[0] - start, (stamps[-1] - stamps[0]) / max(1, len(stamps) - 1)


async def probe(url: str, headers: dict[str, str]) -> list[str]:
    """The speed probe's lines (module docstring)."""
    lines = []
    async with httpx.AsyncClient(timeout=900, headers=headers) as client:
        model = (await client.get(f"{url}/v1/models")).json()["data"][0]["id"]
        await stream_once(client, url, model, 16, 4, 0)  # first request of a fresh engine
        ttft_s, itl_s = await stream_once(client, url, model, 512, 32, 1)
        lines.append(f"prefill {512 / ttft_s:.0f} prompt tok/s (512-token prompt, TTFT {ttft_s * 1000:.0f} ms); "
                     f"1 stream: ITL {itl_s * 1000:.1f} ms")  # fmt: skip
        for streams in (8, 32):
            done = await asyncio.gather(*[stream_once(client, url, model, 32, 48, 100 + i) for i in range(streams)])
            itl_median = sorted(d[1] for d in done)[streams // 2]
            lines.append(f"{streams} streams: ITL median {itl_median * 1000:.1f} ms, "
                         f"{streams / itl_median:.1f} output tok/s")  # fmt: skip
    return lines


def run_seed(argv: list[str], log: Path) -> tuple[int, float, list[str], int]:
    """``./run_benchmark.sh ARGV``: exit code, wall s, its [RESULT]/[REPORT]/[ERROR] lines, stall lines during it."""
    offset = log.stat().st_size if log.exists() else 0
    start = time.monotonic()
    done = subprocess.run([str(PROJECT_ROOT / "run_benchmark.sh"), *argv], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, check=False)  # fmt: skip
    wall_s = time.monotonic() - start
    with log.open("rb") as fh:
        fh.seek(offset)
        stalls = sum(STALL in line for line in fh.read().decode(errors="replace").splitlines())
    keep = ("[RESULT]", "[REPORT]", "[ERROR]", "[WARN]", "Key insight")
    lines = [x for x in (done.stdout + done.stderr).splitlines() if x.startswith(keep)]
    return done.returncode, wall_s, lines, stalls


def main() -> int:
    """Probe, then both seed commands; exit 0 when both succeeded without a stall line."""
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--probe-only", action="store_true", help="only the engine's speed probe")
    args = cli.parse_args()
    settings = get_settings()
    print("[PROBE] " + "\n[PROBE] ".join(asyncio.run(probe(settings.vllm_url, settings.vllm_headers))), flush=True)
    if args.probe_only:
        return 0
    ok = True
    for argv in SEED_COMMANDS:
        code, wall_s, lines, stalls = run_seed(argv, settings.vllm_log_file)
        ok = ok and code == 0 and stalls == 0
        print(f"\n[SEED] ./run_benchmark.sh {' '.join(argv)}: exit {code}, {wall_s:.0f} s, {stalls} stall line(s)")
        print("\n".join(lines), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
