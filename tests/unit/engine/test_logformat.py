"""vLLM's log grammar: every line shape found in vLLM's logging code and public bug reports parses the same way."""

from __future__ import annotations

import pytest

from core.parsing import StampClock
from engine.vllmlog.grammar import clean, clean_span, parse_line
from engine.vllmlog.tracker import (
    CONCURRENCY_RE,
    KV_CACHE_RE,
    MODEL_LOAD_TIME_RE,
    VERSION_RE,
    WEIGHTS_TIME_RE,
    is_api_server,
    seconds,
)

CLOCK = StampClock(1_800_000_000.0)
HEADER = "ERROR 03-14 10:02:31 [multiproc_executor.py:546] "
MESSAGE = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB."
ESC = "\x1b"


@pytest.mark.parametrize(
    ("prefix", "proc"),
    [
        ("", None),
        ("(APIServer pid=123) ", "APIServer"),
        ("(EngineCore pid=2630) ", "EngineCore"),
        ("(EngineCore_DP0 pid=16064) ", "EngineCore_DP0"),
        ("(EngineCore_0 pid=2095608) ", "EngineCore_0"),
        ("(VllmWorker rank=2 pid=8080) ", "VllmWorker rank=2"),
        ("(VllmWorker-0 pid=5787) ", "VllmWorker-0"),
        ("(VllmWorkerProcess pid=486731) ", "VllmWorkerProcess"),
        ("(Worker pid=5787) ", "Worker"),
        ("(Worker_TP1 pid=211) ", "Worker_TP1"),
        ("(Worker_PP0_TP1 pid=212) ", "Worker_PP0_TP1"),
        ("(Worker_DP1_TP0_EP1 pid=213) ", "Worker_DP1_TP0_EP1"),
        ("(RayWorkerWrapper pid=5219, ip=10.0.0.2) ", "RayWorkerWrapper"),
        ("(pid=5219) ", None),
    ],
)
def test_every_process_prefix_parses(prefix: str, proc: str | None) -> None:
    """Plain, API server, engine core, worker (rank, TP/PP/DP/EP), Ray: level, stamp, source and message come out."""
    line = parse_line(f"{prefix}{HEADER}{MESSAGE}".encode(), CLOCK)
    assert (line.proc, line.level, line.src) == (proc, "ERROR", "multiproc_executor.py:546")
    assert line.body.decode() == MESSAGE and line.stamp_s is not None
    assert line.process == prefix.encode()


@pytest.mark.parametrize(
    "raw",
    [
        # vLLM's cyan prefix and ColoredFormatter's level, grey stamp and source
        f"{ESC}[0;36m(VllmWorker rank=2 pid=8080){ESC}[0;0m {ESC}[31mERROR{ESC}[0m {ESC}[90m03-14 10:02:31{ESC}[0m "
        f"{ESC}[90m[multiproc_executor.py:546]{ESC}[0m {MESSAGE}",
        f"{ESC}[1;36m(VllmWorker rank=2 pid=8080){ESC}[0;0m {HEADER}{MESSAGE}",  # older bold cyan
        f"2026-03-14T10:02:31.118273645Z (VllmWorker rank=2 pid=8080) {HEADER}{MESSAGE}",  # docker logs -t
        f"2026-03-14T10:02:31.118273645+00:00 stderr F (VllmWorker rank=2 pid=8080) {HEADER}{MESSAGE}",  # CRI file
        f"2026-03-14T10:02:31.1Z {ESC}[0;36m(VllmWorker rank=2 pid=8080){ESC}[0;0m {HEADER}{MESSAGE}",
    ],
)
def test_colours_and_container_stamps_are_removed_before_parsing(raw: str) -> None:
    """ANSI codes anywhere and a leading Docker or CRI stamp do not hide the worker's error."""
    line = parse_line(raw.encode(), CLOCK)
    assert (line.proc, line.level, line.src) == ("VllmWorker rank=2", "ERROR", "multiproc_executor.py:546")
    assert line.body.decode() == MESSAGE


def test_other_headers_keep_their_level() -> None:
    """Old vLLM (no bracket), DEBUG paths, uvicorn and the launcher; garbage has no level."""
    old = parse_line(b"INFO 05-01 12:00:00 llm_engine.py:123] Initializing an LLM engine (v0.4.2)", CLOCK)
    assert (old.level, old.src) == ("INFO", "llm_engine.py:123")
    debug = parse_line(b"(EngineCore_DP0 pid=1) DEBUG 04-15 14:37:13 [v1/engine/core.py:936] x", CLOCK)
    assert (debug.level, debug.src, debug.body) == ("DEBUG", "v1/engine/core.py:936", b"x")
    uvicorn = parse_line(f"(APIServer pid=1) {ESC}[32mINFO{ESC}[0m:     Application startup complete.".encode(), CLOCK)
    assert (uvicorn.proc, uvicorn.level, uvicorn.body) == ("APIServer", "INFO", b"Application startup complete.")
    assert parse_line(b"[ERROR] VLLM_PORT=8100 is in use", CLOCK).level == "ERROR"
    assert parse_line(b"\x00\xff garbage (Worker pid=x) ERROR", CLOCK).level is None


def test_clean_span_copies_only_when_needed() -> None:
    """A plain or stamped block comes back as the same object (stamps go per parsed line); colours are removed."""
    plain = b"(APIServer pid=1) INFO 11-29 21:55:01 [a.py:1] x\n"
    assert clean_span(plain, 0, len(plain))[0] is plain
    docker = b"2026-03-14T10:00:00Z a\n2026-03-14T10:00:01Z b\n"
    assert clean_span(docker, 0, len(docker))[0] is docker
    coloured = b"\x1b[0;36m(APIServer pid=1)\x1b[0;0m x\n"
    assert clean_span(coloured, 0, len(coloured))[0] == b"(APIServer pid=1) x\n"


def test_cri_partial_lines_are_joined() -> None:
    """Kubernetes splits a long line into P parts ending with an F part: they come back as one line (the other
    lines are left as they are, their stamps removed per line by parse_line)."""
    cri = (
        b"2026-03-14T11:00:01.1+00:00 stdout P (APIServer pid=1) INFO 03-14 11:00:01 [utils.py:233] args: {'a': 1, \n"
        b"2026-03-14T11:00:01.2+00:00 stdout P 'b': 2, \n"
        b"2026-03-14T11:00:01.3+00:00 stdout F 'c': 3}\n"
        b"2026-03-14T11:00:02.0+00:00 stderr F next\n"
    )
    buf, start, stop = clean_span(cri, 0, len(cri))
    lines = buf[start:stop].split(b"\n")
    assert lines[0] == b"(APIServer pid=1) INFO 03-14 11:00:01 [utils.py:233] args: {'a': 1, 'b': 2, 'c': 3}"
    assert [clean(line) for line in lines[1:]] == [b"next", b""]  # other lines keep their stamp for parse_line
    assert clean(b"2026-03-14T11:00:01.1+00:00 stdout F \x1b[32mok\x1b[0m") == b"ok"


@pytest.mark.parametrize(
    ("message", "pattern", "value"),
    [
        ("Loading weights took 0.02 seconds", WEIGHTS_TIME_RE, 0.02),
        ("Model loading took 0.9267 GiB and 0.866843 seconds", MODEL_LOAD_TIME_RE, 0.866843),
        ("Model loading took 15.25 GiB memory and 6.123 seconds", MODEL_LOAD_TIME_RE, 6.123),
        ("Model loading took 1.5 seconds", MODEL_LOAD_TIME_RE, 1.5),
        ("Loading model weights took 14.9595 GB", WEIGHTS_TIME_RE, None),  # old V0: memory, not time
        ("Loading model weights took 14.9595 GB", MODEL_LOAD_TIME_RE, None),
    ],
)
def test_load_time_lines(message: str, pattern: object, value: float | None) -> None:
    """Weights and model load seconds of every vLLM wording; the old GB-only line gives no time."""
    assert seconds(pattern, message) == value  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("message", "version"),
    [
        ("vLLM API server version 0.11.0", "0.11.0"),
        (" ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0", "0.32.0"),
        ("Initializing a V1 LLM engine (v0.9.2) with config: model='m'", "0.9.2"),
        ("Initializing an LLM engine (v0.4.2) with config: model='m'", "0.4.2"),
        ("vLLM API server version 0.10.1rc2.dev12+g1a2b3c4", "0.10.1rc2.dev12+g1a2b3c4"),
    ],
)
def test_version_lines(message: str, version: str) -> None:
    """The version from the API server's first line, the banner or the engine's config line."""
    match = VERSION_RE.search(message)
    assert match is not None and match.group(1) == version


def test_kv_cache_lines_and_api_server_processes() -> None:
    """KV cache size lines of old and new vLLM; only API-server (or unprefixed) lines can mean ready."""
    assert KV_CACHE_RE.search("GPU KV cache size: 1,065,680 tokens")
    assert KV_CACHE_RE.search("# GPU blocks: 127285, # CPU blocks: 7281")
    assert not KV_CACHE_RE.search("Using LBHNC KV cache layout.") and CONCURRENCY_RE.search("Maximum concurrency for 4")
    assert is_api_server("APIServer") and is_api_server("ApiServer_1") and is_api_server(None)
    assert not is_api_server("Worker_TP0") and not is_api_server("EngineCore_DP0")
