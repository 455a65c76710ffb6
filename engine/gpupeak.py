"""vLLM 0.32's GPU memory peak at start-up, term by term in bytes, and the batch limits that keep it under the seed's
promise (ERNIE-4.5-0.3B in < 2.8 × 10⁹ B on a 24 GB card).

With ``--kv-cache-memory-bytes`` given, a GPU worker starts in this order (each step's vLLM line is in
:data:`SOURCES`, checked by ``tests/unit/engine/test_gpu_peak.py``): 1. CUDA context (and NCCL buffers on > 1 GPU);
2. this rank's weights; 3. ``profile_run``: a forward pass of ``max_num_batched_tokens`` tokens and a sampler pass
over ``min(max_num_seqs, max_num_batched_tokens)`` rows × vocabulary, with no ``empty_cache`` after it, so that
memory is still held when 4. the KV pool is allocated (phase **profiling held**); 5. ``capture_model`` empties the
cache, captures the CUDA graphs and warms the sampler up again (phase **after capture**).

So ``peak = context + communication + weights + Triton sampler buffer + KV pool + max(profiling held, after capture)``.
The sampler dominates the batch-dependent part (14 B per row and vocabulary entry: 0.37 and 1.48 GB for ERNIE at vLLM's
defaults of 256 and 1,024 rows); the stack's :data:`GPU_MAX_NUM_SEQS` and :data:`GPU_MAX_NUM_BATCHED_TOKENS` keep every
card class ≤ :data:`TARGET_BYTES`. ``docs/engine.md``'s tables are generated from here (:mod:`engine.gpupeakdoc`).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.units import GIB, MIB
from engine.kvsizing import text_config

PROMISE_BYTES = 2_800_000_000
"""The seed's promise: ERNIE-4.5-0.3B's GPU memory under 2.8 GB (10⁹ B, not GiB)."""
TARGET_BYTES = 2_600_000_000
"""The most the defaults may predict on any card class: 0.2 GB under the promise."""
GPU_MAX_NUM_SEQS = 64
"""``--max-num-seqs`` on GPU builds: the 50 default users (vLLM's own: 256, 1,024 on H100/H200)."""
GPU_MAX_NUM_BATCHED_TOKENS = 2048
"""``--max-num-batched-tokens`` on GPU builds: vLLM's own default on cards < 70 GiB."""
CUDA_CONTEXT_BYTES = 512 * MIB
"""CUDA context with torch's and cuBLAS's handles: 0.3 – 0.5 GiB measured (A10 to H200), the top taken."""
COMM_BUFFER_BYTES = 256 * MIB
"""An allowance for NCCL's and vLLM's all-reduce buffers per GPU with > 1 GPU."""
GRAPH_OVERHEAD_BYTES = 2 * MIB
"""Per captured CUDA graph beyond the shared pool: twice vLLM's own 1 MiB floor."""
SAMPLER_BYTES_PER_LOGIT = 2 + 4 + 4 + 4
"""Sampler warm-up per row and vocabulary entry: bf16 logits, their float32 copy, float32 probabilities and exponential
noise, all alive in ``random_sample``."""
SAMPLER_BUFFER_BYTES_PER_LOGIT = 4
"""The Triton top-k/top-p kernel's float32 row buffer, kept for the process."""


@dataclass(frozen=True)
class Source:
    """A line of vLLM 0.32's Python (``path`` under ``site-packages``) and text it holds (checked by a test)."""

    path: str
    line: int
    needle: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


SOURCES: dict[str, Source] = {
    "snapshot": Source("vllm/v1/worker/gpu_worker.py", 534,
                       "self.init_snapshot = init_snapshot = MemorySnapshot(device=self.device)"),
    "nccl": Source("vllm/v1/worker/gpu_worker.py", 509, "init_worker_distributed_environment("),
    "request": Source("vllm/v1/worker/utils.py", 724, "requested_memory = math.ceil("),
    "weights": Source("vllm/v1/worker/gpu_worker.py", 587, "def load_model("),
    "kv_path": Source("vllm/v1/worker/gpu_worker.py", 649,
                      "if kv_cache_memory_bytes := self.cache_config.kv_cache_memory_bytes:"),
    "profile_call": Source("vllm/v1/worker/gpu_worker.py", 653, "self.model_runner.profile_run("),
    "kv_bytes": Source("vllm/v1/worker/gpu_worker.py", 671, "kv_cache_memory_bytes,"),
    "profile_forward": Source("vllm/v1/worker/gpu_model_runner.py", 6194, "self.max_num_tokens, is_profile=True"),
    "profile_sampler": Source("vllm/v1/worker/gpu_model_runner.py", 6200,
                              "output = self._dummy_sampler_run(last_hidden_states)"),
    "dummy_rows": Source("vllm/v1/worker/gpu_model_runner.py", 5606, "num_reqs = min(num_tokens, max_num_reqs)"),
    "logits": Source("vllm/v1/worker/gpu_model_runner.py", 5942, "logits = self.model.compute_logits(hidden_states)"),
    "fp32_copy": Source("vllm/v1/sample/sampler.py", 97, "logits = logits.to(torch.float32)"),
    "probs": Source("vllm/v1/sample/ops/topk_topp_sampler.py", 280,
                    "probs = logits.softmax(dim=-1, dtype=torch.float32)"),
    "noise": Source("vllm/v1/sample/ops/topk_topp_sampler.py", 565,
                    "q = empty_exponential_noise_like(probs, use_fp64_gumbel)"),
    "triton_buffer": Source("vllm/v1/sample/ops/topk_topp_triton.py", 1686,
                            "buffer = logits.new_empty((size, vocab_size))"),
    "capture": Source("vllm/v1/worker/gpu_worker.py", 962,
                      "cuda_graph_memory_bytes = self.model_runner.capture_model()"),
    "capture_empty": Source("vllm/v1/worker/gpu_model_runner.py", 6541, "torch.accelerator.empty_cache()"),
    "graph_estimate": Source("vllm/v1/worker/gpu_model_runner.py", 6468,
                             "decoder_estimate = max(shared_memory_estimate.values(), default=0) + sum("),
    "graph_floor": Source("vllm/v1/worker/gpu_model_runner.py", 6417, "# Use at least 1 MiB per graph for driver"),
    "capture_sizes": Source("vllm/config/vllm.py", 2362, "max_cudagraph_capture_size = min("),
    "full_sizes": Source("vllm/v1/cudagraph_dispatcher.py", 219,
                         "if x <= max_num_tokens and x >= uniform_decode_query_len"),
    "warmup": Source("vllm/v1/worker/gpu_worker.py", 1058,
                     "self.model_runner._dummy_sampler_run(hidden_states=last_hidden_states)"),
    "warmup_rows": Source("vllm/v1/worker/gpu_worker.py", 1044, "max_num_reqs = min("),
    "batch_defaults": Source("vllm/engine/arg_utils.py", 2933, "elif device_memory >= 70 * GiB_bytes"),
}
"""Where each term comes from in vLLM 0.32 (``tests/unit/engine/test_gpu_peak.py`` checks every one)."""


@dataclass(frozen=True)
class CardClass:
    """A GPU model as NVML reports it: name, total memory (bytes) and streaming multiprocessors."""

    label: str
    nvml_name: str
    total_bytes: int
    sms: int


CARD_CLASSES = (
    CardClass("A10 24 GB", "NVIDIA A10", 23_028 * MIB, 72),
    CardClass("L4 24 GB", "NVIDIA L4", 23_034 * MIB, 58),
    CardClass("A100 40 GB", "NVIDIA A100-SXM4-40GB", 40_960 * MIB, 108),
    CardClass("A100 80 GB", "NVIDIA A100-SXM4-80GB", 81_920 * MIB, 108),
    CardClass("H100 80 GB", "NVIDIA H100 80GB HBM3", 81_559 * MIB, 132),
    CardClass("H200 141 GB", "NVIDIA H200", 143_771 * MIB, 132),
)
"""The card classes the promise is held on (``docs/engine.md``)."""


def card_sms(name: str | None) -> int | None:
    """Streaming multiprocessors of a known card (:data:`CARD_CLASSES`, by NVML name); None when unknown."""
    return next((c.sms for c in CARD_CLASSES if name and c.nvml_name.lower() == name.lower()), None)


def vllm_batch_defaults(total_bytes: int, name: str) -> tuple[int, int]:
    """``(max_num_seqs, max_num_batched_tokens)`` of vLLM 0.32 on a CUDA card (:data:`SOURCES`)."""
    if total_bytes >= 160 * GIB:
        return 1024, 16384
    if total_bytes >= 70 * GIB and "a100" not in name.lower():
        return 1024, 8192
    return 256, 2048


@dataclass(frozen=True)
class BatchLimits:
    """The engine's ``--max-num-seqs`` and ``--max-num-batched-tokens``, and which of them VLLM_EXTRA_ARGS sets."""

    max_num_seqs: int = GPU_MAX_NUM_SEQS
    max_num_batched_tokens: int = GPU_MAX_NUM_BATCHED_TOKENS
    from_user: frozenset[str] = frozenset()

    @property
    def sampler_rows(self) -> int:
        """Rows of the sampler warm-up: ``min(max_num_seqs, max_num_batched_tokens)``."""
        return min(self.max_num_seqs, self.max_num_batched_tokens)

    def args(self) -> list[str]:
        """The flags the launcher adds: those VLLM_EXTRA_ARGS does not set."""
        out: list[str] = []
        if "--max-num-seqs" not in self.from_user:
            out += ["--max-num-seqs", str(self.max_num_seqs)]
        if "--max-num-batched-tokens" not in self.from_user:
            out += ["--max-num-batched-tokens", str(self.max_num_batched_tokens)]
        return out


def _flag_values(extra_args: str) -> dict[str, str]:
    try:
        words = shlex.split(extra_args)
    except ValueError:
        return {}
    found: dict[str, str] = {}
    for i, word in enumerate(words):
        flag, eq, inline = word.partition("=")
        if flag.startswith("--"):
            found[flag] = inline if eq else (words[i + 1] if i + 1 < len(words) else "")
    return found


def batch_limits(extra_args: str) -> BatchLimits:
    """The GPU defaults, VLLM_EXTRA_ARGS's positive ``--max-num-seqs``/``--max-num-batched-tokens`` winning."""
    given = {
        flag: int(value)
        for flag, value in _flag_values(extra_args).items()
        if flag in ("--max-num-seqs", "--max-num-batched-tokens") and value.isdigit() and int(value) > 0
    }
    return BatchLimits(given.get("--max-num-seqs", GPU_MAX_NUM_SEQS),
                       given.get("--max-num-batched-tokens", GPU_MAX_NUM_BATCHED_TOKENS), frozenset(given))  # fmt: skip


def has_flag(extra_args: str, flag: str) -> bool:
    """Whether ``extra_args`` sets ``--flag`` (``--flag v`` or ``--flag=v``); False when they do not parse."""
    return flag in _flag_values(extra_args)


def capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, blackwell: bool = False) -> list[int]:
    """The CUDA graph batch sizes vLLM 0.32 captures by default (``_set_cudagraph_sizes``): 1, 2, 4,
    then steps of 8 below 256 and 16 above, up to ``min(2 × max_num_seqs, 512 (1,024 on Blackwell),
    max_num_batched_tokens)``, plus ``max_num_seqs``."""
    largest = min(max_num_seqs * 2, 1024 if blackwell else 512, max_num_batched_tokens)
    sizes = [i for i in (1, 2, 4) if i <= largest]
    sizes += list(range(8, min(largest + 1, 256), 8)) + list(range(256, largest + 1, 16))
    if max_num_batched_tokens <= largest:
        sizes.append(max_num_batched_tokens)
    if max_num_seqs <= largest:
        sizes.append(max_num_seqs)
    return sorted({s for s in sizes if s <= max_num_batched_tokens})


@dataclass(frozen=True)
class ModelShape:
    """What the batch-dependent terms need of a dense decoder: vocabulary, widths and the dtype's bytes."""

    vocab: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int = 2

    @classmethod
    def from_config(cls, config: Mapping[str, Any], dtype_bytes: int = 2) -> ModelShape | None:
        """From a ``config.json`` (its ``text_config`` when there is one); None when a field is missing."""
        cfg = text_config(config)
        try:
            heads = int(cfg["num_attention_heads"])
            hidden = int(cfg["hidden_size"])
            return cls(vocab=int(cfg["vocab_size"]), hidden=hidden, intermediate=int(cfg["intermediate_size"]),
                       heads=heads, kv_heads=int(cfg.get("num_key_value_heads") or heads),
                       head_dim=int(cfg.get("head_dim") or hidden // heads), dtype_bytes=dtype_bytes)  # fmt: skip
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            return None

    def activation_bytes_per_token(self, tensor_parallel: int = 1) -> int:
        """Upper bound of one token's activations in a layer's widest step: four hidden-wide tensors, q/k/v, the
        attention output, the gated MLP's gate-up and activation, split over TP ranks."""
        tp = max(1, tensor_parallel)
        qkv = (self.heads // tp + 2 * max(1, self.kv_heads // tp)) * self.head_dim
        width = 4 * self.hidden + qkv + self.heads // tp * self.head_dim + 3 * self.intermediate // tp
        return width * self.dtype_bytes


def weights_from_config(config: Mapping[str, Any], dtype_bytes: int) -> int | None:
    """Weight bytes of a dense decoder from its ``config.json``: embeddings, per layer grouped-KV attention, a gated
    MLP and two norms, the final norm, and the LM head unless ``tie_word_embeddings``; None when a field is missing.
    Exact for ERNIE-4.5-0.3B (360,748,032 parameters); underestimates mixture-of-experts models."""
    cfg = text_config(config)
    shape = ModelShape.from_config(config)
    try:
        layers = int(cfg["num_hidden_layers"])
    except (KeyError, TypeError, ValueError):
        return None
    if shape is None:
        return None
    hidden, head_dim = shape.hidden, shape.head_dim
    attention = 2 * hidden * shape.heads * head_dim + 2 * hidden * shape.kv_heads * head_dim
    per_layer = attention + 3 * hidden * shape.intermediate + 2 * hidden
    tied = cfg.get("tie_word_embeddings", config.get("tie_word_embeddings"))
    embeddings = shape.vocab * hidden * (1 if tied else 2)
    return (embeddings + layers * per_layer + hidden) * dtype_bytes


@dataclass(frozen=True)
class PeakTerm:
    """One term of the peak: bytes, phase, :data:`SOURCES` keys and its arithmetic in words."""

    label: str
    bytes: int
    phase: str
    sources: tuple[str, ...]
    how: str


@dataclass(frozen=True)
class StartupPeak:
    """The predicted start-up peak of one GPU (bytes): fixed terms plus the larger of the two transient phases."""

    terms: tuple[PeakTerm, ...]
    limits: BatchLimits

    def _sum(self, phase: str) -> int:
        return sum(t.bytes for t in self.terms if t.phase == phase)

    @property
    def peak_bytes(self) -> int:
        """``fixed + max(profiling held, after capture)``."""
        return self._sum("fixed") + max(self._sum("profiling"), self._sum("capture"))

    @property
    def beyond_weights_and_kv_bytes(self) -> int:
        """What vLLM takes beyond context, weights and KV pool: the least headroom."""
        base = {"CUDA context", "weights", "KV pool"}
        return self.peak_bytes - sum(t.bytes for t in self.terms if t.label in base or t.label.startswith("NCCL"))

    @property
    def within_promise(self) -> bool:
        """Whether the peak is under the seed's 2.8 GB."""
        return self.peak_bytes < PROMISE_BYTES

    def line(self) -> str:
        """The start-up line (``make doctor``, the launcher): the sum in GB with its terms."""
        fixed = " + ".join(f"{t.label} {t.bytes / 1e9:.3f}" for t in self.terms if t.phase == "fixed")
        profiling, capture = self._sum("profiling") / 1e9, self._sum("capture") / 1e9
        verdict = "under" if self.within_promise else "ABOVE"
        return (
            f"GPU start-up peak (predicted per GPU, vLLM 0.32, {self.limits.max_num_seqs} sequences, "
            f"{self.limits.max_num_batched_tokens} batched tokens): {self.peak_bytes / 1e9:.3f} GB "
            f"({self.peak_bytes / GIB:.2f} GiB) = {fixed} + max(profiling held {profiling:.3f}, after graph "
            f"capture {capture:.3f}) GB; {verdict} the seed's 2.8 GB for ERNIE-4.5-0.3B (docs/engine.md)"
        )


def predict_peak(
    shape: ModelShape,
    weights_per_gpu_bytes: int,
    kv_cache_bytes: int,
    limits: BatchLimits,
    tensor_parallel: int = 1,
    gpus: int = 1,
    sms: int | None = None,
    enforce_eager: bool = False,
    blackwell: bool = False,
) -> StartupPeak:
    """The start-up peak of one of ``gpus`` GPUs (rank 0, which also samples) for ``shape`` at ``limits``.

    ``sms``: the card's multiprocessors (the Triton buffer has ``min(next power of 2 of min(rows, sms), sms)`` rows;
    unknown: the rows). Every term is an upper bound where the allocator could reuse memory.
    """
    rows = limits.sampler_rows
    logits = rows * shape.vocab
    per_token = shape.activation_bytes_per_token(tensor_parallel)
    programs = min(rows, sms) if sms else rows
    buffer_rows = min(1 << (programs - 1).bit_length(), sms) if sms else rows
    sizes = [] if enforce_eager else capture_sizes(limits.max_num_seqs, limits.max_num_batched_tokens, blackwell)
    full = [s for s in sizes if s <= limits.max_num_seqs]
    graphs = 0 if not sizes else (max(sizes) * per_token
                                  + (len(sizes) - 1 + max(0, len(full) - 1)) * GRAPH_OVERHEAD_BYTES)  # fmt: skip
    sampler = logits * SAMPLER_BYTES_PER_LOGIT
    terms = [
        PeakTerm("CUDA context", CUDA_CONTEXT_BYTES, "fixed", ("snapshot", "request"),
                 "the driver's, before vLLM's snapshot (0.3 – 0.5 GiB; 0.5 GiB taken)"),
        PeakTerm("weights", weights_per_gpu_bytes, "fixed", ("weights",), "this rank's share of the weights"),
    ]
    if gpus > 1:
        terms.append(PeakTerm("NCCL buffers", COMM_BUFFER_BYTES, "fixed", ("nccl",), "allowance, > 1 GPU"))
    terms += [
        PeakTerm("sampler buffer", buffer_rows * shape.vocab * SAMPLER_BUFFER_BYTES_PER_LOGIT, "fixed",
                 ("triton_buffer",), f"{buffer_rows} rows × vocabulary {shape.vocab:,} × 4 B, kept"),
        PeakTerm("KV pool", kv_cache_bytes, "fixed", ("kv_path", "kv_bytes"), "--kv-cache-memory-bytes"),
        PeakTerm("profiling forward pass", limits.max_num_batched_tokens * per_token, "profiling",
                 ("kv_path", "profile_call", "profile_forward"),
                 f"{limits.max_num_batched_tokens:,} tokens × {per_token:,} B of activations, still cached"),
        PeakTerm("profiling sampler", sampler, "profiling",
                 ("profile_sampler", "dummy_rows", "logits", "fp32_copy", "probs", "noise"),
                 f"{rows} rows × {shape.vocab:,} × 14 B (bf16 logits, fp32 copy, probs, noise), still cached"),
        PeakTerm("CUDA graphs", graphs, "capture", ("capture", "capture_empty", "graph_estimate", "graph_floor",
                 "capture_sizes", "full_sizes"),
                 "none (--enforce-eager)" if not sizes else
                 f"{len(sizes)} piecewise + {len(full)} full graphs: pool of {max(sizes)} tokens × {per_token:,} B "
                 f"+ 2 MiB per further graph"),
        PeakTerm("warm-up sampler", sampler + rows * per_token, "capture", ("warmup", "warmup_rows"),
                 f"the profiling sampler again after capture, plus {rows} tokens of activations"),
    ]  # fmt: skip
    return StartupPeak(tuple(terms), limits)
