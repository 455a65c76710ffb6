"""The fixed workload the engine and peer benchmarks give ``python -m loadgen.command.benchmark``, as its environment.

Shared by ``bench_engine_defaults.py`` and ``bench_peer_agreement.py`` so both measure the same thing: a closed loop
of ``concurrency`` users, ``requests`` measured requests after ``warmup`` ones, prompts from ``dataset`` and exactly
``output_tokens`` output tokens each (``OUTPUT_LEN=fixed``, ``IGNORE_EOS=1``, greedy), no rate, no ramp, no input
mix, no duration.
"""

from __future__ import annotations

from pathlib import Path


def fixed_load_env(
    *, vllm_url: str, sidecar_url: str, dataset: Path, concurrency: int, requests: int, warmup: int, output_tokens: int
) -> dict[str, str]:
    """The settings (environment variables) of one fixed-load benchmark run against ``vllm_url``, reporting to
    ``sidecar_url``; merge them over the caller's environment."""
    return {
        "VLLM_BASE_URL": vllm_url,
        "SIDECAR_BASE_URL": sidecar_url,
        "CONCURRENCY": str(concurrency),
        "REQUESTS": str(requests),
        "DURATION": "",
        "WARMUP": str(warmup),
        "MAX_TOKENS": str(output_tokens),
        "OUTPUT_LEN": "fixed",
        "IGNORE_EOS": "1",
        "TEMPERATURE": "0",
        "DATASET": str(dataset),
        "RATE": "",
        "RAMP_UP_S": "0",
        "INPUT_MIX": "",
        "PYTHONUNBUFFERED": "1",
    }
