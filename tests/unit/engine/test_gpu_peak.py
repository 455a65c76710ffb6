"""The GPU start-up peak (engine/gpupeak.py): every cited line of vLLM 0.32 holds the code it is cited for, the
replicas of vLLM's batch defaults and CUDA graph sizes agree with vLLM's own code, ERNIE-4.5-0.3B at the stack's GPU
defaults is predicted ≤ 2.6 × 10⁹ B on every card class (and above 2.8 × 10⁹ B at vLLM's own), the launcher passes
those defaults on GPU builds, and docs/engine.md's tables are generated from it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from core.gpus import DeviceMemory
from core.settings import PROJECT_ROOT, Settings
from core.units import GIB
from engine import gpupeak, gpupeakdoc
from engine import launcher as launch
from engine.engineplan import ModelFacts, gpu_plan, kv_plan
from engine.gpupeak import (
    CARD_CLASSES,
    PROMISE_BYTES,
    TARGET_BYTES,
    BatchLimits,
    CardClass,
    ModelShape,
    batch_limits,
    capture_sizes,
    predict_peak,
    vllm_batch_defaults,
)
from engine.gpupeakdoc import ernie_peak
from engine.gpuplan import HostGpus
from engine.model_resolve import ResolvedModel
from tests.unit.engine.test_gpu_plan import ERNIE_FULL, engine  # noqa: F401 - the engine interpreter fixture

SITE = PROJECT_ROOT / ".venvs" / "engine" / "lib" / "python3.11" / "site-packages"
KV = GIB

BATCH_DEFAULTS_PROBE = r"""
import json, sys
from vllm.engine.arg_utils import EngineArgs
from vllm.platforms import current_platform as platform
from vllm.usage.usage_lib import UsageContext
total, name = int(sys.argv[1]), sys.argv[2]
names = ("get_device_total_memory", "get_device_name", "is_cpu", "is_tpu")
saved = {k: platform.__dict__.get(k) for k in names}
platform.get_device_total_memory = lambda *a, **k: total
platform.get_device_name = lambda *a, **k: name
platform.is_cpu = platform.is_tpu = lambda: False
try:
    tokens, seqs = EngineArgs.get_batch_defaults(1)
finally:
    for k, v in saved.items():
        if v is None:
            platform.__dict__.pop(k, None)
        else:
            setattr(platform, k, v)
print(json.dumps([seqs[UsageContext.OPENAI_API_SERVER], tokens[UsageContext.OPENAI_API_SERVER]]))
"""

CAPTURE_SIZES_PROBE = r"""
import json, sys
from types import SimpleNamespace
from vllm.config.compilation import CompilationConfig, CUDAGraphMode
from vllm.config.vllm import VllmConfig
seqs, tokens = int(sys.argv[1]), int(sys.argv[2])
compilation = CompilationConfig()
compilation.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
config = SimpleNamespace(
    model_config=SimpleNamespace(enforce_eager=False), compilation_config=compilation,
    scheduler_config=SimpleNamespace(max_num_seqs=seqs, max_num_batched_tokens=tokens), uniform_decode_query_len=1,
    speculative_config=None, performance_mode="throughput", parallel_config=SimpleNamespace(), lora_config=None)
VllmConfig._set_cudagraph_sizes(config)
print(json.dumps(compilation.cudagraph_capture_sizes))
"""


def test_every_cited_vllm_line_holds_its_code() -> None:
    """Each term's source (file:line of vLLM 0.32, the same Python in the CPU and GPU wheels) holds the code it is
    cited for, so a vLLM upgrade that moves or changes it fails here."""
    if not SITE.joinpath("vllm").is_dir():
        pytest.skip("no engine venv (.venvs/engine): vLLM's code cannot be read")
    for key, source in gpupeak.SOURCES.items():
        lines = (SITE / source.path).read_text(encoding="utf-8").splitlines()
        assert source.needle in lines[source.line - 1], (key, str(source), lines[source.line - 1])


@pytest.mark.parametrize("card", CARD_CLASSES, ids=lambda c: c.label)
def test_ernie_at_the_gpu_defaults_stays_under_the_target_on_every_card(card: CardClass) -> None:
    """ERNIE-4.5-0.3B, 1 GiB KV pool: ≤ 2.6 × 10⁹ B predicted at the stack's GPU defaults on every card class, while
    vLLM's own batch defaults are predicted above the seed's 2.8 × 10⁹ B (the sampler warm-up held with the pool)."""
    now = ernie_peak(card, BatchLimits(), KV)
    then = ernie_peak(card, BatchLimits(*vllm_batch_defaults(card.total_bytes, card.nvml_name)), KV)
    assert now.peak_bytes <= TARGET_BYTES and now.within_promise, now.line()
    assert then.peak_bytes > PROMISE_BYTES and not then.within_promise, then.line()


def test_batch_defaults_match_vllms_own(engine: Callable[..., str]) -> None:  # noqa: F811
    """vLLM 0.32's API-server batch defaults per card class, asked of its own ``get_batch_defaults`` with the card's
    memory and name: 256 / 2,048 below 70 GiB and on A100s, 1,024 / 8,192 on H100 and H200."""
    for card in CARD_CLASSES:
        theirs = json.loads(engine(BATCH_DEFAULTS_PROBE, card.total_bytes, card.nvml_name))
        assert tuple(theirs) == vllm_batch_defaults(card.total_bytes, card.nvml_name), card.label


@pytest.mark.parametrize(("seqs", "tokens"), [(64, 2048), (256, 2048), (1024, 8192), (8, 4096), (64, 100), (50, 2048)])
def test_capture_sizes_match_vllms_own(seqs: int, tokens: int, engine: Callable[..., str]) -> None:  # noqa: F811
    """The CUDA graph sizes counted in the graphs term are those vLLM's own config code picks (no speculation)."""
    assert json.loads(engine(CAPTURE_SIZES_PROBE, seqs, tokens)) == capture_sizes(seqs, tokens)


def test_the_peak_is_the_fixed_terms_plus_the_larger_transient_phase() -> None:
    """peak = context + weights + sampler buffer + KV + max(profiling held, after capture); --enforce-eager drops the
    graphs; tensor parallelism halves the weights per GPU and adds NCCL's buffers; the headroom vLLM's utilization
    must cover is the peak beyond context, weights and pool."""
    shape = ModelShape.from_config(ERNIE_FULL)
    assert shape is not None and shape.vocab == 103_424
    peak = predict_peak(shape, 721_496_064, KV, BatchLimits(), sms=72)
    by = {t.label: t for t in peak.terms}
    fixed = sum(t.bytes for t in peak.terms if t.phase == "fixed")
    profiling = by["profiling forward pass"].bytes + by["profiling sampler"].bytes
    assert by["profiling sampler"].bytes == 64 * 103_424 * 14
    assert peak.peak_bytes == fixed + max(profiling, by["CUDA graphs"].bytes + by["warm-up sampler"].bytes)
    assert peak.beyond_weights_and_kv_bytes == peak.peak_bytes - fixed + by["sampler buffer"].bytes
    assert predict_peak(shape, 1, KV, BatchLimits(), enforce_eager=True).terms[-2].bytes == 0
    tp2 = predict_peak(shape, 721_496_064 // 2, KV, BatchLimits(), tensor_parallel=2, gpus=2)
    assert "NCCL buffers" in {t.label for t in tp2.terms}
    assert tp2.peak_bytes > peak.peak_bytes - 721_496_064 // 2  # half the weights, plus NCCL's buffers


def test_batch_limits_come_from_the_extra_arguments_where_set() -> None:
    """VLLM_EXTRA_ARGS's --max-num-seqs / --max-num-batched-tokens win and are not passed twice; values vLLM would
    refuse are left to it (the defaults are planned)."""
    assert batch_limits("").args() == ["--max-num-seqs", "64", "--max-num-batched-tokens", "2048"]
    mine = batch_limits("--max-num-seqs=256 --enforce-eager")
    assert (mine.max_num_seqs, mine.max_num_batched_tokens) == (256, 2048)
    assert mine.args() == ["--max-num-batched-tokens", "2048"] and mine.sampler_rows == 256
    assert batch_limits("--max-num-seqs lots").max_num_seqs == 64


def _plan_argv(tmp_path: Path, **env: object) -> list[str]:
    (tmp_path / "config.json").write_text(json.dumps(ERNIE_FULL))
    settings = Settings(_env_file=None, engine_python="python", **env)  # type: ignore[call-arg,arg-type]
    resolved = ResolvedModel(str(tmp_path), "local", str(tmp_path), "ernie", False)
    kv = kv_plan(settings, resolved)
    gpus = HostGpus([DeviceMemory(0, "GPU-0", "NVIDIA H100 80GB HBM3", 81_559 * 2**20, 80 * GIB)], "570.86.15")
    plan = gpu_plan(settings, ModelFacts(ERNIE_FULL, tmp_path), kv, gpus)
    assert plan.peak is not None and plan.limits is not None
    lines = plan.log_lines()
    assert any("GPU start-up peak" in line for line in lines), lines
    return launch.vllm_argv(settings, resolved, kv=kv, gpu_utilization=plan.utilization, limits=plan.limits)


def test_the_launcher_passes_the_gpu_batch_limits(tmp_path: Path) -> None:
    """On a GPU host vLLM gets --max-num-seqs 64 --max-num-batched-tokens 2048 (before VLLM_EXTRA_ARGS, once each);
    a value of VLLM_EXTRA_ARGS is the only one on the command line."""
    argv = _plan_argv(tmp_path)
    at = argv.index("--max-num-seqs")
    assert argv[at : at + 4] == ["--max-num-seqs", "64", "--max-num-batched-tokens", "2048"]
    mine = _plan_argv(tmp_path, vllm_extra_args="--max-num-seqs 256")
    assert mine.count("--max-num-seqs") == 1 and mine[-2:] == ["--max-num-seqs", "256"]


def test_the_utilization_covers_a_larger_batchs_peak(tmp_path: Path) -> None:
    """vLLM's own H100 batch (1,024 sequences, 8,192 tokens) takes ~1.8 GB beyond weights and pool, more than
    GPU_HEADROOM_GB's 1 GiB: --gpu-memory-utilization asks for the predicted share, so vLLM's free-memory check at
    start sees what it will really take (not a card that fits 1 GiB of headroom but not its sampler)."""
    argv = _plan_argv(tmp_path, vllm_extra_args="--max-num-seqs 1024 --max-num-batched-tokens 8192")
    util = float(argv[argv.index("--gpu-memory-utilization") + 1])
    shape = ModelShape.from_config(ERNIE_FULL)
    assert shape is not None
    peak = predict_peak(shape, 721_496_064, KV, BatchLimits(1024, 8192), sms=132)
    assert peak.beyond_weights_and_kv_bytes > GIB
    assert util * 81_559 * 2**20 >= 721_496_064 + KV + peak.beyond_weights_and_kv_bytes


def test_the_docs_tables_are_generated_from_the_plan(tmp_path: Path) -> None:
    """docs/engine.md's GPU memory tables are what ``python -m engine.gpupeakdoc`` writes (``make lint`` checks it); a
    stale copy is refused, a file without the markers too."""
    assert gpupeakdoc.main(["--check", str(PROJECT_ROOT / "docs" / "engine.md")]) == 0
    stale = tmp_path / "engine.md"
    text = (PROJECT_ROOT / "docs" / "engine.md").read_text(encoding="utf-8")
    stale.write_text(text.replace("2,524,653,568", "2,400,000,000"), encoding="utf-8")
    assert gpupeakdoc.main(["--check", str(stale)]) == 1
    assert gpupeakdoc.main(["--write", str(stale)]) == 0 and stale.read_text(encoding="utf-8") == text
    stale.write_text("no markers", encoding="utf-8")
    assert gpupeakdoc.main(["--check", str(stale)]) == 2
