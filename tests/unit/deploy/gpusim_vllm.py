"""vLLM 0.32's own code on what the launcher planned in a simulated container (tests/unit/deploy/test_gpu_host_sim.py):
its CLI parser and engine arguments on the final argv, its check of VLLM_* variables on the environment, and
``request_memory`` on the free memory each rank's GPU has left after vLLM's CUDA context (and NCCL's buffers)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.gpupeak import COMM_BUFFER_BYTES, CUDA_CONTEXT_BYTES
from tests.unit.deploy.gpusim import Container, EngineRun


def flag_value(argv: list[str], flag: str) -> str | None:
    """The value of the last ``flag`` in ``argv`` (argparse: the last wins), or None."""
    values = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]
    return values[-1] if values else None


VLLM_NAMES_PROBE = "import json\nfrom vllm import envs\nprint(json.dumps(sorted(envs.environment_variables)))"
VLLM_PROBE = r"""
import json, os, sys
from types import SimpleNamespace
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.platforms.interface import Platform
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.v1.worker.utils import request_memory
out = {}
for name, case in json.load(open(sys.argv[1])).items():
    try:
        args = make_arg_parser(FlexibleArgumentParser()).parse_args(case["args"])
        validate_parsed_serve_args(args)
        engine = AsyncEngineArgs.from_cli_args(args)
    except (SystemExit, Exception) as exc:
        out[name] = {"error": f"{type(exc).__name__}: {exc}"}
        continue
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(case["env"])
    try:
        Platform.validate_environ(hard_fail=True)
        unknown = None
    except ValueError as exc:
        unknown = str(exc)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    requests = []
    for total, free in case["gpus"]:
        snapshot = SimpleNamespace(total_memory=total, free_memory=free, device_="cuda:0")
        try:
            requests.append(request_memory(snapshot, SimpleNamespace(gpu_memory_utilization=engine.gpu_memory_utilization)))
        except ValueError as exc:
            requests.append("refused: " + str(exc))
    out[name] = {"tp": engine.tensor_parallel_size, "max_num_seqs": engine.max_num_seqs,
                 "max_num_batched_tokens": engine.max_num_batched_tokens, "kv": engine.kv_cache_memory_bytes,
                 "max_model_len": engine.max_model_len, "unknown_env": unknown, "requests": requests}
print(json.dumps(out))
"""


def vllm_cases(runs: dict[str, tuple[Container, EngineRun, int]]) -> dict[str, Any]:
    """The engine probe's input: each run's vLLM arguments, environment, and (total, free after vLLM's CUDA context
    and NCCL) of each GPU its ranks use."""
    cases = {}
    for key, (_container, run, tp) in runs.items():
        assert run.argv is not None and run.env is not None
        taken = CUDA_CONTEXT_BYTES + (COMM_BUFFER_BYTES if tp > 1 else 0)
        gpus = [(g.total_bytes, g.total_bytes - g.used_bytes - taken) for g in run.visible[:tp]]
        cases[key] = {"args": run.argv[3:], "env": run.env, "gpus": gpus}
    return cases


def check_in_vllm(vllm: Callable[..., str], runs: dict[str, tuple[Container, EngineRun, int]],
                  tmp: Path) -> dict[str, str]:  # fmt: skip
    """Each run's argv, environment and utilization through vLLM's own code; what vLLM refused, by run."""
    cases = tmp / "cases.json"
    cases.write_text(json.dumps(vllm_cases(runs)))
    verdicts = json.loads(vllm(VLLM_PROBE, cases))
    bad = {}
    for key, (_container, run, tp) in runs.items():
        got = verdicts[key]
        assert run.argv is not None
        wanted = {"tp": tp, "max_num_seqs": int(flag_value(run.argv, "--max-num-seqs") or 0),
                  "kv": int(flag_value(run.argv, "--kv-cache-memory-bytes") or 0), "max_model_len": 4096}  # fmt: skip
        if "error" in got or got["unknown_env"] or any(str(r).startswith("refused") for r in got["requests"]):
            bad[key] = json.dumps(got)[:800]
        elif {k: got[k] for k in wanted} != wanted or len(got["requests"]) != tp:
            bad[key] = f"vLLM read {got}, the launcher meant {wanted}"
    return bad
