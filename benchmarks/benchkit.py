"""What the scripts under ``benchmarks/`` share: the repository on the import path (importing this module puts it
there), child runs with a log and a time limit, ``python -m loadgen.command.benchmark`` at a fixed load,
and small helpers."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from core.logfiles import log_tail  # noqa: E402
from core.net import wait_for_http  # noqa: E402
from loadgen.childprocs import CpuSample, CpuSampler, stop_process  # noqa: E402


class BenchError(RuntimeError):
    """A run could not be made (a server did not start, a client failed or hung); the message says where the log is."""


def run_logged(
    name: str, argv: Sequence[str], log: Path, env: Mapping[str, str], timeout_s: float,
    done: Callable[[], bool] = lambda: True, *, sample_cpu: bool = False,
) -> list[CpuSample]:  # fmt: skip
    """Run ``argv`` from the repository root, its output in ``log``; the CPU samples of its process tree (with
    ``sample_cpu``, else none). It is stopped after ``timeout_s``.

    Raises:
        BenchError: it ran past ``timeout_s``, exited non-zero or left ``done()`` false (the log's tail quoted).
    """
    with log.open("wb") as out:
        proc = subprocess.Popen(list(argv), cwd=REPO, env=dict(env), stdout=out, stderr=subprocess.STDOUT)
    try:
        with CpuSampler(proc.pid) if sample_cpu else nullcontext() as sampler:
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                raise BenchError(f"{name} did not finish in {timeout_s:.0f} s ({log})") from None
    finally:
        stop_process(proc)
    if proc.returncode != 0 or not done():
        raise BenchError(f"{name} failed (exit {proc.returncode}); {log}:\n{log_tail(log)}")
    return sampler.samples if sampler is not None else []


@contextmanager
def serving(
    argv: Sequence[str], log: Path, url: str, timeout_s: float, env: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:  # fmt: skip
    """Run ``argv`` from the repository root (output appended to ``log``) for the block, entered once ``url`` answers
    200 (``headers`` sent); then stopped with its children.

    Raises:
        BenchError: it exited first, or ``url`` did not answer within ``timeout_s`` (the log's tail quoted).
    """
    with log.open("ab") as out:
        proc = subprocess.Popen(list(argv), cwd=REPO, env=None if env is None else dict(env), stdout=out,
                                stderr=subprocess.STDOUT)  # fmt: skip
    try:

        def exited() -> str | None:
            return None if proc.poll() is None else f"{log.name} exited {proc.returncode}"

        ready, why = wait_for_http(url, timeout_s, interval_s=0.25, abort=exited, headers=dict(headers or {}))
        if not ready:
            what = why if proc.poll() is not None else f"{url} not ready after {timeout_s:.0f} s"
            raise BenchError(f"{what}:\n{log_tail(log)}")
        yield proc
    finally:
        stop_process(proc)


def run_fixed_load(
    base_env: Mapping[str, str], log: Path, args: argparse.Namespace, *, vllm_url: str, sidecar_url: str,
    dataset: Path, done: Callable[[], bool],
) -> None:  # fmt: skip
    """One ``python -m loadgen.command.benchmark`` at the fixed load the engine and peer benchmarks share:
    ``args.concurrency`` closed-loop users, ``args.requests`` measured requests after ``args.warmup``, prompts from
    ``dataset``, exactly ``args.output_tokens`` output tokens each, greedy; no rate, ramp, input mix or duration;
    reports to ``sidecar_url``. Its environment is ``base_env`` with those settings over it.

    Raises:
        BenchError: as :func:`run_logged` (within ``args.timeout_s``).
    """
    env = {
        **base_env,
        "VLLM_BASE_URL": vllm_url,
        "SIDECAR_BASE_URL": sidecar_url,
        "CONCURRENCY": str(args.concurrency),
        "REQUESTS": str(args.requests),
        "DURATION": "",
        "WARMUP": str(args.warmup),
        "MAX_TOKENS": str(args.output_tokens),
        "OUTPUT_LEN": "fixed",
        "IGNORE_EOS": "1",
        "TEMPERATURE": "0",
        "DATASET": str(dataset),
        "RATE": "",
        "RAMP_UP_S": "0",
        "INPUT_MIX": "",
        "PYTHONUNBUFFERED": "1",
    }
    argv = [sys.executable, "-m", "loadgen.command.benchmark"]
    run_logged("loadgen.command.benchmark", argv, log, env, args.timeout_s, done)


def child_env() -> dict[str, str]:
    """The environment of the timed commands: this one, with the repository importable and bytecode caching on
    (a user's shell does not set PYTHONDONTWRITEBYTECODE; without .pyc files every run recompiles the modules)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": str(REPO)}


def fmt_or_na(value: float | None, spec: str = ".1f") -> str:
    """``value`` formatted with ``spec``, or ``n/a`` when unknown."""
    return "n/a" if value is None else format(value, spec)


def median_known(values: Sequence[float | None]) -> float | None:
    """The median of the known values; None when none is known."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


@contextmanager
def work_folder(prefix: str, keep: bool, *errors: type[Exception]) -> Iterator[Path]:
    """A fresh temporary folder (``prefix`` and a random tail) for a benchmark's logs and results, removed after the
    block unless ``keep``. One of ``errors`` raised in the block (a run could not be made) is said on stderr with the
    folder, which stays, and ends the program with exit status 2 (SystemExit)."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield workdir
    except errors as exc:
        print(f"[ERROR] {exc}\n[ERROR] work folder kept: {workdir}", file=sys.stderr)
        raise SystemExit(2) from None
    if not keep:
        shutil.rmtree(workdir, ignore_errors=True)


def served_model(base_url: str, headers: Mapping[str, str]) -> str:
    """The first model ``/v1/models`` lists."""
    answer = httpx.get(f"{base_url}/v1/models", headers=dict(headers), timeout=10)
    answer.raise_for_status()
    return str(answer.json()["data"][0]["id"])
