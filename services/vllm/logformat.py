"""vLLM's log grammar, the one place it is written down: how a line is built and which messages carry which facts.

A line, outside in (every part optional):

- a container stamp: ``2026-11-29T21:55:01.123456789Z `` (``docker logs -t``, ``kubectl logs --timestamps``) or
  ``2026-11-29T21:55:01.123456789+00:00 stdout F `` (Kubernetes/CRI log files; ``P`` marks a line split in parts);
- a process prefix, written by vLLM's ``_add_prefix`` (``vllm/utils/system_utils.py``): ``(APIServer pid=123) ``,
  ``(EngineCore_DP0 pid=…) ``, ``(Worker_TP1 pid=…) ``, ``(Worker_PP0_TP1 pid=…) ``, ``(VllmWorker rank=2 pid=…) ``,
  ``(VllmWorkerProcess pid=…) ``, Ray's ``(RayWorkerWrapper pid=…, ip=10.0.0.2) `` and ``(pid=…) ``;
- a header: vLLM >= 0.6 ``INFO 11-29 21:55:01 [utils.py:253] `` (with ``VLLM_LOGGING_LEVEL=DEBUG`` the source is a
  path, ``[v1/engine/core.py:936]``), older vLLM ``INFO 05-01 12:00:00 llm_engine.py:123] ``, uvicorn
  ``ERROR:    ``, this project's launcher ``[ERROR] ``;
- the message. Lines of one multi-line message repeat the prefix and header (vLLM's ``NewLineFormatter``, which also
  ends them with ``\\r``).

ANSI colour codes may wrap any part: vLLM colours the prefix cyan and, on a terminal or with
``VLLM_LOGGING_COLOR=1``, the level by severity and the stamp and source grey (``ColoredFormatter``). Container
stamps and colour codes are removed before a line is parsed (:func:`clean`; :func:`clean_span` for whole blocks).

Everything else (tracebacks, tqdm bars, Python warnings, garbage) is a line with no header. The second half of the
module says which messages carry the facts read from the log (version, load times, KV cache, ready, fatal errors,
the periodic stats line); :mod:`services.vllm.startup` turns them into start-up phases.
"""

from __future__ import annotations

import re

from core.timeparse import StampClock

# --- the line ---------------------------------------------------------------------------------------------------

ANSI_RE = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)")
"""ANSI escape sequences: CSI (colours, ``\\x1b[0;36m``) and OSC (``\\x1b]…\\x07``)."""
_CONTAINER_STAMP = rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?"
CONTAINER_RE = re.compile(_CONTAINER_STAMP + rb" (?:(?:stdout|stderr) [FP] )?")
"""A container runtime's stamp in front of the line (Docker ``-t``; CRI with stream and full/partial tag)."""
_CONTAINER_LINES_RE = re.compile(rb"^" + CONTAINER_RE.pattern, re.MULTILINE)
_CRI_LINES_RE = re.compile(rb"^" + _CONTAINER_STAMP + rb" (?:stdout|stderr) ([FP]) ([^\n]*)\n", re.MULTILINE)

PREFIX = rb"(\((?:([^()\s]{1,64}(?: rank=\d{1,6})?) )?pid=\d{1,10}(?:, ip=[\w.:\-]{1,64})?\) )?"
"""vLLM's process prefix (groups: the whole prefix, the process name with its rank if any)."""
LEVELS = (b"DEBUG", b"INFO", b"WARNING", b"ERROR", b"CRITICAL")
VLLM_HEADER_RE = re.compile(
    PREFIX + rb"(WARNING|ERROR|INFO|DEBUG|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d+)? \[?([^\]\s]{0,200})\] ?"
)
"""Prefix and vLLM's header (groups: prefix, process, level, stamp, source); tried first, most lines have it."""
OTHER_HEADER_RE = re.compile(
    PREFIX + rb"(?:(WARNING|ERROR|INFO|DEBUG|CRITICAL):\s+|\[(WARNING|ERROR|INFO|DEBUG|CRITICAL)\] )?"
)
"""Prefix and uvicorn or launcher level, each optional: always matches (possibly empty)."""
_SGR = rb"(?:\x1b\[[0-9;]*m)*"
STAMP_RE = re.compile(rb"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)" + _SGR + rb" " + _SGR + rb"(\d\d-\d\d \d\d:\d\d:\d\d)")
"""Finds a vLLM stamp anywhere, also between colour codes (used to date lines that have none, from the lines before
them, and to find where a ``--since`` window starts without parsing every line)."""

PROBLEM_LEVELS = frozenset({"WARNING", "ERROR", "CRITICAL"})
_LEVELS = {name: name.decode() for name in LEVELS}
MAX_TEXT_CHARS = 2000
"""Longest message or traceback line kept, in characters (longer ones are cut and end with an ellipsis)."""


def _strip_container(data: bytes) -> bytes:
    """``data`` (whole lines) without container stamps; CRI partial lines (``P``) joined to their continuation."""
    if b" stdout P " not in data and b" stderr P " not in data:
        return _CONTAINER_LINES_RE.sub(b"", data)
    end = len(data)

    def entry(match: re.Match[bytes]) -> bytes:
        whole = match[1] == b"F" or match.end() == end  # a part at the very end stays a line of its own
        return match[2] + b"\n" if whole else match[2]

    return _CRI_LINES_RE.sub(entry, data)


def clean_span(buf: bytes, start: int, stop: int, colours: bool = True) -> tuple[bytes, int, int]:
    """``buf[start:stop]`` (whole lines) without ANSI codes, and with the parts of Kubernetes' split lines (``P``)
    joined, as ``(buffer, start, stop)``; other container stamps stay (:func:`parse_line` removes them per line,
    which is cheaper than rewriting every line of a block).

    The span comes back unchanged, without a copy, when there is nothing to do (``memchr`` for ESC, a substring
    search for the partial tag). ``colours=False`` leaves colour codes too, for readers that only parse a few lines
    (removing them costs ~0.4 µs per code).
    """
    coloured = colours and buf.find(b"\x1b", start, stop) >= 0
    partial = buf[start : start + 1].isdigit() and (
        buf.find(b" stdout P ", start, stop) >= 0 or buf.find(b" stderr P ", start, stop) >= 0
    )
    if not coloured and not partial:
        return buf, start, stop
    data = buf[start:stop]
    if partial:
        data = _strip_container(data)
    if coloured:
        data = ANSI_RE.sub(b"", data)
    return data, 0, len(data)


def clean(raw: bytes) -> bytes:
    """One line without its container stamp and ANSI codes."""
    if raw[:1].isdigit() and (match := CONTAINER_RE.match(raw)) is not None:
        raw = raw[match.end() :]
    return ANSI_RE.sub(b"", raw) if b"\x1b" in raw else raw


class Line:
    """One parsed log line: process prefix, level, time, source ``file.py:line`` and the message body."""

    __slots__ = ("body", "header", "level", "proc", "process", "src", "stamp_s")

    def __init__(
        self,
        proc: str | None,
        level: str | None,
        stamp_s: float | None,
        src: str | None,
        body: bytes,
        header: bytes,
        process: bytes,
    ) -> None:
        self.proc = proc
        """Process of the prefix with its rank, if any (``EngineCore_DP0``, ``VllmWorker rank=2``); None without."""
        self.level = level
        self.stamp_s = stamp_s
        """Epoch seconds of vLLM's stamp, None when the line has none."""
        self.src = src
        """``file.py:line`` of vLLM's header."""
        self.body = body
        self.header = header
        """Prefix and header bytes as written (lines of one multi-line log call share them)."""
        self.process = process
        """The raw process prefix (``b"(EngineCore pid=2630) "`` or ``b""``)."""


def parse_line(raw: bytes, clock: StampClock) -> Line:
    """Parse one line (without its newline; container stamps and colours are removed first). Never raises; unknown
    text gives a Line with no level."""
    if raw[:1].isdigit() or b"\x1b" in raw:
        raw = clean(raw)
    match = VLLM_HEADER_RE.match(raw)
    if match is not None:
        prefix, proc, level_b, stamp, src = match.groups()
    else:
        match = OTHER_HEADER_RE.match(raw)
        assert match is not None  # the pattern matches the empty string
        prefix, proc, ulevel, blevel = match.groups()
        level_b, stamp, src = ulevel or blevel, None, None
    end = match.end()
    return Line(
        proc.decode("ascii", "replace") if proc else None,
        _LEVELS[level_b] if level_b else None,
        clock.stamp_s(stamp) if stamp else None,
        src.decode("utf-8", "replace") if src else None,
        raw[end:],
        raw[:end],
        prefix or b"",
    )


def is_api_server(proc: str | None) -> bool:
    """True for the API server's lines (``APIServer``, ``ApiServer_0``) and unprefixed ones (single-process vLLM,
    uvicorn, the launcher); False for engine cores and workers."""
    return proc is None or proc[:9].lower() == "apiserver"


def text(raw: bytes, limit_chars: int = MAX_TEXT_CHARS) -> str:
    """Bytes of a log line as printable text: undecodable bytes replaced, control characters dropped, cut to size."""
    decoded = raw.decode("utf-8", "replace").rstrip("\r")
    if not decoded.isprintable():
        decoded = "".join(ch if ch.isprintable() or ch == "\t" else "\ufffd" for ch in decoded)
    return decoded if len(decoded) <= limit_chars else decoded[: limit_chars - 1] + "…"


_NORMALISE_RE = re.compile(r"[a-fA-F]*+\d[\w.:-]*")
"""A token with a digit in it (number, version, hex id, UUID, ``file.py:12``) and what sticks to it."""


def normalise(message: str) -> str:
    """Message with tokens holding digits (numbers, hex ids, UUIDs) replaced by ``#``, so repeats of one problem share
    a group key (only the first 200 characters count)."""
    return _NORMALISE_RE.sub("#", message[:200])


# --- traceback lines ------------------------------------------------------------------------------------------------

TB_START = (b"Traceback (most recent call last):", b"Exception Group Traceback (most recent call last):")
TB_JOINERS = (
    b"During handling of the above exception, another exception occurred:",
    b"The above exception was the direct cause of the following exception:",
)


def starts_traceback(body: bytes) -> bool:
    """True for ``Traceback (most recent call last):`` (also the indented exception-group form)."""
    stripped = body.lstrip(b" \t+|")
    return stripped.startswith(TB_START)


def continues_traceback(body: bytes) -> bool:
    """True for a traceback's inner lines: indented frames and code, blank lines, chaining sentences."""
    return not body.strip() or body[:1] in (b" ", b"\t", b"|", b"+") or body.startswith(TB_JOINERS)


# --- facts in the messages (decoded text after the header) ----------------------------------------------------------

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


# --- engine's periodic stats line -----------------------------------------------------------------------------------

METRICS_RE = re.compile(
    rb"Avg prompt throughput: (\d+(?:\.\d+)?) tokens/s, Avg generation throughput: (\d+(?:\.\d+)?) tokens/s"
    rb"(?:, Running: (\d+) reqs)?(?:, Swapped: (\d+) reqs)?(?:, (?:Pending|Waiting): (\d+) reqs)?"
    rb"(?:, (\w+) KV cache usage: (\d+(?:\.\d+)?)%)?(?:[^\n]*?Prefix cache hit rate: (\d+(?:\.\d+)?)%)?"
)
"""The engine's periodic stats line (``vllm/v1/metrics/loggers.py``), old (``Running/Swapped/Pending``, GPU then
CPU-swap KV cache) and new (``Engine 000: ... Running/Waiting``, one KV cache figure named after the device, prefix
cache hit rate). Starts with a literal so that ``findall`` over a whole block is fast; fields a version lacks come
back empty."""
METRICS_NEEDLE = b"Avg prompt throughput: "
METRIC_FIELDS = (
    "prompt_tokens_per_s",
    "generation_tokens_per_s",
    "running_reqs",
    "swapped_reqs",
    "waiting_reqs",
    "kv_cache_device",
    "kv_cache_usage_pct",
    "prefix_cache_hit_rate_pct",
)
"""Names (units in them) of :data:`METRICS_RE`'s groups, in order."""


def parse_metrics(body: bytes) -> dict[str, float]:
    """Numbers of one periodic stats line by :data:`METRIC_FIELDS` name (absent fields left out)."""
    match = METRICS_RE.search(body)
    if match is None:
        return {}
    return {
        name: float(value)
        for name, value in zip(METRIC_FIELDS, match.groups(), strict=True)
        if value and name != "kv_cache_device"
    }
