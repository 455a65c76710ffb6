"""``make gpu-check``: the first GPU host's verdict in one command — does the stack start, serve and stay under the
seed's 2.8 GB (10⁹ B) of GPU memory, and how close was the plan's prediction?

Steps, each timed with its exit status in the report: the host's GPUs (none: refused, exit 2); ``make engine-env``
and ``make doctor``; the GPU tests (``pytest tests/gpu -m gpu``; skips reported as such); ``docker compose up``
(``scripts/compose_stack.sh up``, with a fresh SIDECAR_TOKEN through APP_ENV_FILE so the host's benchmark may write
its report; GPUs sampled through NVML every 0.2 s from before the start); ``./run_benchmark.sh`` (50 users, 200
requests); ``docker compose down`` (``--keep`` leaves it up).

PASS when every step succeeded and the measured peak (the largest rise of any GPU's used memory over its reading
before the start) is under 2.8 × 10⁹ B; the plan's prediction (the engine's start-up line, else :mod:`engine.gpupeak`)
is printed beside it. The JSON report goes to ``logs/gpu-check/`` (its path is the last line). Exit 0 pass, 1 fail,
2 refused.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/ is no package: the project's modules

from core.settings import PROJECT_ROOT, Settings, get_settings
from engine.gpupeak import CARD_CLASSES, PROMISE_BYTES, BatchLimits
from engine.gpuplan import HostGpus, host_gpus

PREDICTED_LINE = re.compile(r"GPU start-up peak \(predicted per GPU[^)]*\): ([\d.]+) GB")
REPORT_PATH = re.compile(r"(\S*reports/\S+\.(?:json|html))")
SAMPLE_INTERVAL_S = 0.2


@dataclass
class Step:
    """One step: its name, command, exit status (None: not run), seconds and the tail of its output."""

    name: str
    command: list[str]
    code: int | None = None
    seconds: float = 0.0
    tail: str = ""

    @property
    def ok(self) -> bool:
        """Whether it ran and exited 0."""
        return self.code == 0


@dataclass
class CheckResult:
    """What the check found: the host, each step, the measured and predicted peaks (bytes; None: unknown)."""

    host: dict[str, Any]
    steps: list[Step] = field(default_factory=list)
    measured_bytes: int | None = None
    predicted_bytes: int | None = None
    predicted_from: str = ""
    benchmark_report: str | None = None
    skipped_tests: list[str] = field(default_factory=list)


def refusal(gpus: HostGpus) -> str | None:
    """Why the check cannot run on this host (no GPU seen), in words with what to do instead; None when it can."""
    if gpus.devices:
        return None
    return (f"[ERROR] make gpu-check needs an NVIDIA GPU, and none is seen here ({gpus.reason}). It runs the GPU "
            "tests, docker compose up and ./run_benchmark.sh on a GPU host and measures the engine's GPU memory. "
            "Without a GPU: `make test` (the simulated GPU hosts of tests/unit/deploy/test_gpu_host_sim.py) and "
            "`make doctor`.")  # fmt: skip


def predicted_from_log(text: str) -> int | None:
    """The engine's predicted start-up peak (bytes) from its last start-up line in ``text`` (vllm.log)."""
    found = PREDICTED_LINE.findall(text)
    return int(float(found[-1]) * 1e9) if found else None


def predicted_for_card(name: str | None) -> int | None:
    """ERNIE-4.5-0.3B's predicted peak at the defaults on a known card class (None: unknown card)."""
    from engine.gpupeakdoc import default_kv_bytes, ernie_peak

    card = next((c for c in CARD_CLASSES if name and c.nvml_name.lower() == name.lower()), None)
    return ernie_peak(card, BatchLimits(), default_kv_bytes()).peak_bytes if card else None


def verdict(result: CheckResult) -> tuple[bool, list[str]]:
    """PASS/FAIL and the lines that say why: each step, the measured peak against 2.8 GB and the prediction."""
    lines = [f"[{'  OK  ' if s.ok else 'FAILED'}] {s.name} ({s.seconds:.0f} s{'' if s.ok else f', exit {s.code}'})"
             for s in result.steps]  # fmt: skip
    lines += [f"[ SKIP ] GPU test skipped: {reason}" for reason in result.skipped_tests]
    measured, predicted = result.measured_bytes, result.predicted_bytes
    if measured is None:
        lines.append("[FAILED] measured GPU peak: no NVML reading (the engine never started?)")
    else:
        under = measured < PROMISE_BYTES
        lines.append(f"[{'  OK  ' if under else 'FAILED'}] measured GPU peak {measured / 1e9:.3f} GB "
                     f"({measured / 2**30:.3f} GiB) {'<' if under else '≥'} the promised {PROMISE_BYTES / 1e9:g} GB")
    if predicted is not None:
        diff = "" if measured is None else f"; measured − predicted = {(measured - predicted) / 1e9:+.3f} GB"
        lines.append(f"[ INFO ] predicted {predicted / 1e9:.3f} GB ({result.predicted_from}){diff}")
    if result.benchmark_report:
        lines.append(f"[ INFO ] benchmark report: {result.benchmark_report}")
    passed = all(s.ok for s in result.steps if s.code is not None) and measured is not None and measured < PROMISE_BYTES
    lines.append(f"gpu-check: {'PASS' if passed else 'FAIL'}")
    return passed, lines


class PeakSampler:
    """Samples every GPU's used memory (NVML) in a thread; :attr:`peak_bytes` is the largest rise over the first
    reading of that GPU."""

    def __init__(self, read: Callable[[], dict[int, int]], interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self._read, self._interval_s = read, interval_s
        self.baseline = read()
        self.peak_bytes: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-peak", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for index, used in self._read().items():
                rise = used - self.baseline.get(index, 0)
                self.peak_bytes = rise if self.peak_bytes is None else max(self.peak_bytes, rise)
            self._stop.wait(self._interval_s)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def nvml_used() -> dict[int, int]:
    """Used memory of every GPU (bytes, NVML's count, as ``nvidia-smi`` shows it)."""
    from sidecar.sampling.gpu import NvmlReader

    return {s.index: int(s.mem_used_gb * 2**30) for s in NvmlReader().read()}


Runner = Callable[[list[str], dict[str, str]], tuple[int, str]]


def run_command(cmd: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run ``cmd`` in the project root, its output shown as it comes and kept; ``(exit status, output)``."""
    proc = subprocess.Popen(cmd, cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    kept = []
    for line in proc.stdout:
        print(line, end="", flush=True)
        kept.append(line)
    return proc.wait(), "".join(kept)


def run_step(result: CheckResult, name: str, cmd: list[str], env: dict[str, str], run: Runner) -> Step:
    """Run one step and record it."""
    print(f"\n==> {name}: {' '.join(cmd)}", flush=True)
    step = Step(name, cmd)
    start = time.monotonic()
    step.code, output = run(cmd, env)
    step.seconds, step.tail = time.monotonic() - start, output[-4000:]
    result.steps.append(step)
    return step


def check(
    settings: Settings, gpus: HostGpus, run: Runner, read: Callable[[], dict[int, int]], keep: bool
) -> CheckResult:
    """Steps 2-6 of the module docstring on a host with ``gpus``; never raises for a failed step."""
    py = sys.executable
    result = CheckResult(host={"driver": gpus.driver_version, "gpus": [asdict(d) for d in gpus.devices]})
    env = dict(os.environ)
    ok = run_step(result, "engine env", ["make", "-s", "engine-env"], env, run).ok
    ok = ok and run_step(result, "make doctor", [py, "-m", "engine.doctor"], env, run).ok
    if ok:
        tests = run_step(result, "GPU tests", [py, "-m", "pytest", "-q", "-rs", "-m", "gpu", "tests/gpu"], env, run)
        result.skipped_tests = re.findall(r"SKIPPED \[\d+\] \S+: (.+)", tests.tail)
        token_env = settings.run_dir / "gpu-check.env"
        dotenv = PROJECT_ROOT / ".env"
        token = secrets.token_urlsafe(24)
        token_env.parent.mkdir(parents=True, exist_ok=True)
        mine = dotenv.read_text(encoding="utf-8") if dotenv.exists() else ""
        token_env.write_text(f"{mine}\nSIDECAR_TOKEN={token}\n", encoding="utf-8")
        env = {**env, "APP_ENV_FILE": str(token_env), "SIDECAR_TOKEN": token}
        try:
            with PeakSampler(read) as sampler:
                if run_step(result, "docker compose up", ["scripts/compose_stack.sh", "up"], env, run).ok:
                    bench = run_step(result, "./run_benchmark.sh", ["./run_benchmark.sh"], env, run)
                    found = REPORT_PATH.findall(bench.tail)
                    result.benchmark_report = found[-1] if found else None
            result.measured_bytes = sampler.peak_bytes
        finally:
            if not keep:
                run_step(result, "docker compose down", ["scripts/compose_stack.sh", "down"], env, run)
            token_env.unlink(missing_ok=True)
    log = settings.logs_dir / settings.vllm_log_file.name
    predicted = predicted_from_log(log.read_text(errors="replace")) if log.exists() else None
    result.predicted_bytes, result.predicted_from = predicted, f"the engine's start-up line in {log}"
    if predicted is None:
        result.predicted_bytes = predicted_for_card(gpus.devices[0].name if gpus.devices else None)
        result.predicted_from = "engine/gpupeak.py for this card at the defaults"
    return result


def write_report(result: CheckResult, passed: bool, lines: Sequence[str], folder: Path) -> Path:
    """``folder/gpu-check-<UTC time>.json``: the verdict, its lines and everything measured."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"gpu-check-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    path.write_text(json.dumps({"passed": passed, "verdict": list(lines), "promise_bytes": PROMISE_BYTES,
                                **asdict(result)}, indent=2))  # fmt: skip
    return path


def main(argv: Sequence[str] | None = None, gpus: HostGpus | None = None, run: Runner = run_command,
         read: Callable[[], dict[int, int]] = nvml_used) -> int:  # fmt: skip
    """Refuse without a GPU (2); else run the check, print the verdict and the report's path (0 pass, 1 fail)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--keep", action="store_true", help="leave the compose stack up afterwards")
    args = parser.parse_args(argv)
    gpus = gpus or host_gpus()
    why = refusal(gpus)
    if why:
        print(why, file=sys.stderr)
        return 2
    settings = get_settings()
    result = check(settings, gpus, run, read, args.keep)
    passed, lines = verdict(result)
    path = write_report(result, passed, lines, settings.logs_dir / "gpu-check")
    print("\n" + "\n".join(lines), flush=True)
    print(f"[INFO] report: {path} (send it back with the verdict)", flush=True)
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
