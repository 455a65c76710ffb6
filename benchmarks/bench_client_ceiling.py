"""Client ceiling: streamed chunks/s per client core of our load generator vs ``vllm bench serve``, at saturation.

Run from the repository root (no stack needed)::

    .venvs/app/bin/python benchmarks/bench_client_ceiling.py [--users 32] [--tokens 256] [--run-time-s 15]

Both clients stream ``--tokens``-token answers from the bundled mock server with no delays, ``--users`` requests at
a time: ours a headless Locust run of ``make benchmark``'s locustfile for ``--run-time-s``, theirs ``vllm bench
serve`` (:mod:`vllm_peer`) sending as many requests as ours completed. Each client's process tree CPU is sampled
(psutil, 0.1 s) and read over its measured window (first send to last end, so start-up is not counted);
chunks/s per client core = content chunks in the window ÷ client CPU seconds in it. The mock's CPU is printed too.

Target: ours ÷ theirs ≥ 1.5 (the median over ``--repeats`` pairs, order alternating). Exits 0 on pass, 1 on a miss,
2 when a run could not be made.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchkit import REPO, BenchError, work_folder
from vllm_peer import run_vllm_bench, sharegpt_prompts, vllm_bench_argv, vllm_chunks, vllm_window_monotonic_s

from core.enginestate import read_engine_state
from core.settings import get_settings
from engine.launcher import engine_python
from loadgen.childprocs import CpuSample, CpuSampler, ProcessError, cpu_in_window, mock_server
from loadgen.selftest.calibrate import (
    CalibrationError,
    ClientRun,
    calibration_table,
    run_our_client,
    summarize_records,
)

TARGET_RATIO = 1.5  # ours / theirs, chunks/s per client core
VLLM_REQUESTS_FIRST = 500  # vLLM's requests if it ever ran before any run of ours without --requests


def theirs_run(result: Mapping[str, Any], client: Sequence[CpuSample], server: Sequence[CpuSample]) -> ClientRun:
    """A :class:`ClientRun` from vLLM's detailed result and CPU samples on the monotonic clock (pure).

    Raises:
        ValueError: no successful request (or the result lacks ``--save-detailed`` fields), or no samples.
    """
    window = vllm_window_monotonic_s(result)
    if window is None:
        raise ValueError("vllm bench serve recorded no successful request with timings")
    start, end = window
    return ClientRun(
        requests_ok=int(result["completed"]),
        requests_failed=int(result.get("failed", 0)),
        chunks=vllm_chunks(result),
        window_s=end - start,
        client_cpu_s=cpu_in_window(client, start, end, monotonic=True),
        server_cpu_s=cpu_in_window(server, start, end, monotonic=True) if server else None,
    )


def run_pair(index: int, workdir: Path, args: argparse.Namespace, vllm_requests: int) -> tuple[ClientRun, ClientRun]:
    """Both clients against one mock server, order alternating with ``index``: (ours, theirs).

    vLLM sends as many requests as ours completed in this pair when ours ran first, else ``vllm_requests``.
    """
    dataset = workdir / "prompts.sharegpt.json"
    with mock_server(
        workdir / f"mock_{index}.log", tokens=args.tokens, ttft_ms=0, itl_ms=0, tokens_per_chunk=args.tokens_per_chunk,
        events_per_write=args.events_per_write, processes=args.mock_processes,
    ) as mock:  # fmt: skip
        ours: ClientRun | None = None
        theirs: ClientRun | None = None
        for client in ("ours", "vllm") if index % 2 == 0 else ("vllm", "ours"):
            print(f"[CEILING] pair {index + 1}: {client} ...", flush=True)
            if client == "ours":
                rows, client_samples, server_samples = run_our_client(
                    mock.url, workdir, users=args.users, run_time_s=args.run_time_s, max_tokens=args.tokens,
                    server_pid=mock.pid, name=f"ours_{index}",
                )  # fmt: skip
                ours = summarize_records(rows, client_samples, server_samples)
            else:
                requests = args.requests or (ours.requests_ok if ours else vllm_requests)
                dataset.write_text(json.dumps(sharegpt_prompts(requests, 40), ensure_ascii=False))
                argv = vllm_bench_argv(
                    mock.url, dataset, workdir, f"vllm_{index}.json", requests=requests, concurrency=args.users,
                    output_tokens=args.tokens, warmups=0, tokenizer=args.tokenizer,
                )  # fmt: skip
                with CpuSampler(mock.pid) as server:
                    result, client_samples = run_vllm_bench(argv, workdir / f"vllm_{index}.log", args.timeout_s)
                theirs = theirs_run(result, client_samples, server.samples)
        assert ours is not None and theirs is not None
        return ours, theirs


def default_tokenizer() -> str | None:
    """A local tokenizer for vLLM's client (the mock has none): the stack's resolved model, else the first model
    folder with a tokenizer.json, else the synthetic tiny model built for it (vLLM's ShareGPT loader needs one to
    size prompts; building takes a few seconds with the engine env)."""
    settings = get_settings()
    state = read_engine_state(settings.engine_state_file)
    if state is not None:
        model = Path(state.model_arg)
        if (model / "tokenizer.json").exists() or (model / "tokenizer_config.json").exists():
            return str(model)
    found = sorted(settings.models_dir.glob("*/tokenizer.json"))
    if found:
        return str(found[0].parent)
    out = settings.models_dir / "tiny"
    argv = [engine_python(settings), "-m", "engine.synthetic", "--variant", "tiny", "--out", str(out),
            "--corpus", str(settings.prompts_file)]  # fmt: skip
    built = subprocess.run(argv, cwd=REPO, check=False)
    return str(out) if built.returncode == 0 and (out / "tokenizer.json").exists() else None


def main(argv: list[str] | None = None) -> int:
    """Run the pair(s) and judge; 0 pass, 1 miss, 2 a run failed."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=32, help="concurrent requests of each client")
    parser.add_argument("--tokens", type=int, default=256, help="tokens per mock answer")
    parser.add_argument("--tokens-per-chunk", type=int, default=1, help="tokens per event (vLLM-like chunking)")
    parser.add_argument(
        "--events-per-write", type=int, default=0,
        help="mock events per write (0: each answer in one write, what a saturated client finds; 1: one per write)",
    )  # fmt: skip
    parser.add_argument("--mock-processes", type=int, default=1, help="mock server processes")
    parser.add_argument("--run-time-s", type=float, default=15.0, help="length of our run")
    parser.add_argument("--requests", type=int, default=0, help="vLLM's requests (default: as many as ours did)")
    parser.add_argument("--repeats", type=int, default=1, help="pairs to run (order alternates)")
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder for vLLM's client (default: local model)")
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, results)")
    args = parser.parse_args(argv)
    args.tokenizer = args.tokenizer or default_tokenizer()
    if args.tokenizer is None:
        parser.error("no local tokenizer under models/ and none could be built; pass --tokenizer DIR")

    ratios: list[float] = []
    vllm_requests = VLLM_REQUESTS_FIRST  # then what ours completed in the pair before
    with work_folder("client_ceiling_", args.keep, CalibrationError, BenchError, ProcessError, ValueError) as workdir:
        print(
            f"[CEILING] mock: {args.tokens} tokens, 1 per chunk, no delays; {args.users} concurrent requests; "
            f"ours {args.run_time_s:g} s; vLLM tokenizer {args.tokenizer}; work folder {workdir}"
        )
        for i in range(args.repeats):
            ours, theirs = run_pair(i, workdir, args, vllm_requests)
            vllm_requests = ours.requests_ok
            for line in calibration_table({"ours": ours, "vllm": theirs}):
                print(f"[CEILING]   {line}")
            ratios.append(ours.chunks_per_sec_per_core / theirs.chunks_per_sec_per_core)
            print(f"[CEILING]   ours/vllm chunks/s per client core = {ratios[-1]:.2f}")
    value = statistics.median(ratios)
    passed = value >= TARGET_RATIO
    n = f" (median of {len(ratios)})" if len(ratios) > 1 else ""
    print(
        f"[CEILING] chunks/s per client core ours/vllm = {value:.2f}{n}  target >= {TARGET_RATIO}  "
        + ("PASS" if passed else "FAIL")
    )
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
