"""Facts from vLLM's log: version, model load time, engine init time, KV cache line, errors in a time window.

Handles vLLM's per-process prefixes (``(APIServer pid=…)``, ``(EngineCore pid=…)``) and the ``LEVEL MM-DD
HH:MM:SS [file.py:line] message`` format. Reads only the last ``max_bytes`` so a huge log stays cheap.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from core.report_schema import LogFacts

LINE_RE = re.compile(
    r"^(?:\((?P<proc>[\w\-]+) pid=(?P<pid>\d+)\)\s+)?(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
    r"(?P<month>\d\d)-(?P<day>\d\d) (?P<time>\d\d:\d\d:\d\d)(?:\.\d+)?\s+(?:\[[^\]]*\]\s+)?(?P<msg>.*)$"
)
VERSION_RE = re.compile(r"(?:vLLM API server version|LLM engine \(v)\s*v?(\d+\.\d+\.\d+[\w.+\-]*)")
LOAD_RE = re.compile(r"(?:Model loading took|Loading weights took)\s+([\d.]+)\s*(?:GiB and ([\d.]+) )?s")
INIT_RE = re.compile(r"init engine .* took ([\d.]+) s")
KV_RE = re.compile(r"KV cache size|Maximum concurrency")
MAX_EXAMPLES = 50


def _line_time(match: re.Match[str], year: int) -> float | None:
    try:
        stamp = datetime.strptime(f"{year}-{match['month']}-{match['day']} {match['time']}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    return stamp.timestamp()


def read_log_facts(
    path: Path, window_start: float | None = None, window_end: float | None = None, max_bytes: int = 16 << 20
) -> LogFacts:
    """Parse ``path``; WARNING/ERROR lines are kept when their local timestamp lies inside the window.

    Never raises for a missing, rotated or garbled log: ``found`` is False or the unparsable lines are skipped.
    """
    facts = LogFacts(log_file=str(path), found=False)
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            raw = fh.read()
    except OSError:
        return facts
    facts.found = True
    year = datetime.now().year
    for line in raw.decode("utf-8", errors="replace").splitlines():
        match = LINE_RE.match(line.strip())
        if not match:
            continue
        msg = match["msg"]
        if (version := VERSION_RE.search(msg)) and facts.vllm_version is None:
            facts.vllm_version = version.group(1)
        if (load := LOAD_RE.search(msg)) is not None:
            facts.model_load_s = float(load.group(2) or load.group(1))
        if (init := INIT_RE.search(msg)) is not None:
            facts.engine_init_s = float(init.group(1))
        if KV_RE.search(msg):
            facts.kv_cache_line = msg
        if match["level"] in ("WARNING", "ERROR", "CRITICAL") and window_start is not None:
            t = _line_time(match, year)
            inside = t is not None and window_start - 1 <= t <= (window_end or t) + 1
            bucket = facts.warnings_in_window if match["level"] == "WARNING" else facts.errors_in_window
            if inside and len(bucket) < MAX_EXAMPLES:
                bucket.append(line.strip()[:500])
    return facts
