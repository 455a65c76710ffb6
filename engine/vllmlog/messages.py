"""vLLM's log grammar, second half: which messages (the text after a line's header, :mod:`engine.vllmlog.grammar`)
carry which facts of a start: version, weights and model load times, engine init time, KV cache size, ready, fatal
errors and the errors that only report another process's failure.

Wordings are vLLM's own, old and new (``vllm/v1/worker/gpu_model_runner.py``, ``model_executor/model_loader``,
``v1/engine/core.py``, ``v1/core/kv_cache_utils.py``, ``entrypoints/openai/api_server.py``, uvicorn).
"""

from __future__ import annotations

import re

LAUNCH_RE = re.compile(r"^Starting vLLM: ")
"""This project's launcher: ``[INFO] Starting vLLM: <argv>`` (the ``[INFO]`` header is parsed off)."""
SERVER_START_RE = re.compile(r"vLLM API server version|non-default args:")
"""The API server's first lines: a new start of vLLM."""
VERSION_RE = re.compile(r"(?:vLLM API server version|LLM engine \(v|\bversion)\s*v?(\d+\.\d+\.\d+[\w.+\-]*)")
"""``vLLM API server version 0.32.0``, the banner's ``version 0.32.0``, ``Initializing a V1 LLM engine (v0.32.0)``."""
DOWNLOAD_RE = re.compile(r"Downloading|Fetching \d+ files|\.(?:safetensors|bin|pt|gguf)\S*:\s+(\d+)%")
PERCENT_RE = re.compile(r"(\d{1,3})%")
LOADING_RE = re.compile(
    r"Starting to load model|Loading model weights|Loading safetensors checkpoint|Loading weights|Model loading took"
)
WEIGHTS_TIME_RE = re.compile(r"Loading weights took\s+([\d.]+)\s*s")
"""``Loading weights took 0.92 seconds`` (the loader, per worker)."""
MODEL_LOAD_TIME_RE = re.compile(r"Model loading took (?:[\d.]+ \w+(?: memory)? and )?([\d.]+)\s*s")
"""``Model loading took 15.25 GiB and 6.123 seconds`` (the model runner, per worker: weights and model set-up)."""
COMPILE_RE = re.compile(
    r"Warming up|warmup|torch\.compile|Compiling|compiled function|Capturing|[Gg]raph capturing|profiling"
    r"|KV cache size|# GPU blocks|Maximum concurrency|init engine"
)
INIT_TIME_RE = re.compile(r"init engine .*took ([\d.]+) s")
"""``init engine (profile, create kv cache, warmup model) took 39.09 s[econds]`` (per engine core)."""
KV_CACHE_RE = re.compile(r"KV cache size:|# (?:GPU|CPU|gpu|cpu) blocks:|num_gpu_blocks is:")
"""The KV cache's size: ``GPU KV cache size: 1,234 tokens``, old ``# GPU blocks: 2345, # CPU blocks: 512``."""
CONCURRENCY_RE = re.compile(r"Maximum concurrency for")
"""``Maximum concurrency for 4,096 tokens per request: 5.2x`` (its own line in some versions)."""
READY_RE = re.compile(
    r"Starting vLLM (?:API )?server (?:\d+ )?on|Uvicorn running on|Application startup complete|Available routes are"
)
"""The API server answers requests (only the API server's lines count: :func:`is_api_server`)."""
FATAL_RE = re.compile(
    r"EngineDeadError|Engine core initialization failed|EngineCore failed to start|died unexpectedly"
    r"|encountered a fatal error|Engine loop has died|WorkerProc failed|Got fatal signal"
)
"""Errors that end a running server (after ready, other errors are about one request)."""
FOLLOW_UP_RE = re.compile(
    r"WorkerProc initialization failed|WorkerProc failed to start|Engine core initialization failed"
    r"|EngineCore failed to start|See root cause above|See stack trace (?:above )?for root cause|Got fatal signal"
    r"|EngineDeadError|Engine loop has died|died unexpectedly"
)
"""Errors that report another process's failure: never the root cause while a worker's own error is known."""
STOP_RE = re.compile(r"Shutting down|Finished server process|shutdown triggered|KeyboardInterrupt")
EXCEPTION_RE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt)(?::|$)")
"""An exception line: ``ValueError: …``, ``torch.OutOfMemoryError: CUDA out of memory …``."""


def seconds(pattern: re.Pattern[str], message: str) -> float | None:
    """The seconds that ``pattern`` (one group) finds in ``message``, None without a match."""
    match = pattern.search(message)
    return float(match.group(1)) if match is not None else None


def is_api_server(proc: str | None) -> bool:
    """True for the API server's lines (``APIServer``, ``ApiServer_0``) and unprefixed ones (single-process vLLM,
    uvicorn, the launcher); False for engine cores and workers (``proc`` as :class:`~engine.vllmlog.grammar.Line`
    has it)."""
    return proc is None or proc[:9].lower() == "apiserver"
