"""A readable ``logs/vllm.log``: the stack's own polling is not in vLLM's access log, uvicorn's lines (the readiness
line among them) carry a time in vLLM's header, and every reader of the log still parses it."""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from core.redact import Redactor
from core.settings import Settings
from engine import launcher as launch
from engine.logpipe import QUIET_ENDPOINTS, Masked, pump, stamp_uvicorn_lines
from engine.model_resolve import ResolvedModel
from engine.vllmlog.startup import startup_phase
from logtools.reports import scan_log

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "logs"
RECORDED = FIXTURES / "vllm_0.32_cpu_recorded.log"
OLD = FIXTURES / "vllm_0.4_old_format.log"
RESOLVED = ResolvedModel(requested="m", source="local", model_arg="/models/m", served_name="m", synthetic=False)
DOCS = Path(__file__).resolve().parents[3] / "docs"
DOC_GREP = re.compile(r'grep((?: -e "[^"]+")+) logs/vllm\.log')


def ready_needles() -> list[str]:
    """The patterns of the grep that docs/seed-commands.md and docs/logs.md give for the two ready lines (the same
    in both)."""
    found = [DOC_GREP.search((DOCS / name).read_text(encoding="utf-8")) for name in ("seed-commands.md", "logs.md")]
    assert all(found), "the docs no longer show the ready lines' grep"
    needles = [re.findall(r'-e "([^"]+)"', match[1]) for match in found if match]
    assert needles[0] == needles[1] and len(needles[0]) == 2
    return needles[0]
STAMPED = re.compile(r"(INFO|WARNING|ERROR) \d\d-\d\d \d\d:\d\d:\d\d \[")


def settings(tmp_path: Path, **fields: Any) -> Settings:
    return Settings(_env_file=None, logs_dir=tmp_path / "logs", run_dir=tmp_path / "run", **fields)  # type: ignore[call-arg]


def flag_value(argv: list[str]) -> list[str]:
    """The values of every ``--disable-access-log-for-endpoints`` in ``argv`` (both spellings)."""
    flag = "--disable-access-log-for-endpoints"
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag] + [
        a.split("=", 1)[1] for a in argv if a.startswith(flag + "=")
    ]


def test_the_stacks_polling_is_left_out_of_the_access_log(tmp_path: Path) -> None:
    """vLLM's command line leaves /metrics (the sidecar's scrapes), /health, /v1/models and /version out of its
    access log; the requests users send are not among them."""
    (value,) = flag_value(launch.vllm_argv(settings(tmp_path), RESOLVED))
    paths = value.split(",")
    assert {"/metrics", "/health", "/v1/models", "/version"} <= set(paths) and tuple(paths) == QUIET_ENDPOINTS
    assert not {"/v1/chat/completions", "/v1/completions", "/tokenize"} & set(paths)


@pytest.mark.parametrize("extra", ["--disable-access-log-for-endpoints /health", "--disable-access-log-for-endpoints="])
def test_vllm_extra_args_setting_the_flag_wins(tmp_path: Path, extra: str) -> None:
    """VLLM_EXTRA_ARGS with its own list (or an empty one: log every path) is the only one vLLM gets."""
    argv = launch.vllm_argv(settings(tmp_path, vllm_extra_args=f"--max-num-seqs 4 {extra}"), RESOLVED)
    assert flag_value(argv) == [extra.split(" ", 1)[1] if " " in extra else ""]


def piped(source: Path, tmp_path: Path, now_s: float, pieces_bytes: int = 4096) -> Path:
    """``source`` copied through the launcher's real pipe (:func:`engine.logpipe.pump`, written in pieces as a child
    writes) at a fixed clock; the file it wrote."""
    read_fd, write_fd = os.pipe()
    got: list[bytes] = []
    thread = threading.Thread(target=pump, args=(read_fd, Masked([got.append], Redactor([])), lambda: now_s))
    thread.start()
    data = source.read_bytes()
    for at in range(0, len(data), pieces_bytes):
        os.write(write_fd, data[at : at + pieces_bytes])
    os.close(write_fd)
    thread.join(10)
    os.close(read_fd)
    out = tmp_path / source.name
    out.write_bytes(b"".join(got))
    os.utime(out, (source.stat().st_mtime, source.stat().st_mtime))  # year-less stamps are dated by the mtime
    return out


def at_local(month: int, day: int, clock: str) -> float:
    hour, minute, second = (int(x) for x in clock.split(":"))
    return time.mktime((2026, month, day, hour, minute, second, 0, 0, -1))


def test_the_two_ready_lines_are_found_as_the_seed_says_and_carry_a_time(tmp_path: Path) -> None:
    """A recorded vLLM 0.32 log through the real pipe: the docs' grep finds vLLM's `Starting vLLM server on …` and
    uvicorn's `Application startup complete.` of each start, each with a time (uvicorn's had none); nothing else
    changes but uvicorn's own lines (access lines, tracebacks, vLLM's lines are copied as they were)."""
    needles = ready_needles()
    before = RECORDED.read_text(encoding="utf-8").splitlines()
    assert next(line for line in before if "Application startup complete" in line) == (
        "INFO:     Application startup complete."
    )  # the recorded shape: no time
    after = piped(RECORDED, tmp_path, at_local(11, 29, "22:03:10")).read_text(encoding="utf-8").splitlines()
    ready = [line for line in after if any(needle in line for needle in needles)]
    assert len(ready) == 4 and all(STAMPED.search(line) for line in ready), ready  # two starts, two lines each
    assert ready[1] == "INFO 11-29 22:03:10 [uvicorn] Application startup complete."
    assert len(after) == len(before)
    changed = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
    assert changed and all(b.startswith("INFO:     ") and not b[10].isdigit() for b, _ in changed)
    assert all(a.startswith("INFO 11-29 22:03:10 [uvicorn] ") for _, a in changed)
    assert sum('"POST /v1/chat/completions' in line for line in after) == sum(
        '"POST /v1/chat/completions' in line for line in before
    )


@pytest.mark.parametrize(
    ("source", "copied_at"), [(RECORDED, (11, 29, "22:03:10")), (OLD, (5, 1, "12:00:15"))], ids=["vllm-0.32", "vllm-0.4"]
)
def test_the_start_up_tracker_and_the_analyzer_read_the_stamped_log_alike(
    source: Path, copied_at: tuple[int, int, str], tmp_path: Path
) -> None:
    """The start-up phase (ready, load and init times) and the analyzer's errors (uvicorn's `ERROR:    Exception in
    ASGI application` with its traceback), engine figures and HTTP counts are the same before and after the pipe
    (copied at the time of the stamped line before uvicorn's, as the pipe copies a line as it comes)."""
    after = piped(source, tmp_path, at_local(*copied_at))
    old, new = startup_phase(source), startup_phase(after)
    assert (new.phase, new.load_s, new.engine_init_s, new.started_at_s, new.ready_at_s) == (
        old.phase, old.load_s, old.engine_init_s, old.started_at_s, old.ready_at_s
    )  # fmt: skip
    assert new.attempts == old.attempts and any(a.ready_at_s for a in new.attempts)
    first, second = scan_log([str(source)], True, None, 20), scan_log([str(after)], True, None, 20)
    assert (second["lines"], second["http"], second["engine"]) == (first["lines"], first["http"], first["engine"])
    keys = ("level", "count", "message", "exception", "traceback")
    # by message: groups of one count are listed by time, and uvicorn's error line now has one of its own
    groups = [sorted(([g[k] for k in keys] for g in scan["errors"]["groups"]), key=str) for scan in (first, second)]
    assert groups[0] == groups[1] and second["errors"]["events"] == first["errors"]["events"]


def test_stamping_leaves_access_lines_tracebacks_and_vllm_lines_alone() -> None:
    """Only uvicorn's own lines get a header (behind vLLM's process prefix too); access lines, vLLM's stamped lines,
    the launcher's lines and traceback lines are unchanged."""
    now_s = at_local(12, 6, "02:34:30")
    same = [
        b'INFO:     127.0.0.1:50840 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n',
        b'INFO:     ::1:50840 - "GET /v1/models HTTP/1.1" 200 OK\n',
        b'INFO:      - "GET /health HTTP/1.1" 200 OK\n',
        b"(APIServer pid=1) INFO 12-06 02:34:29 [entry.py:140] Starting vLLM server on http://127.0.0.1:8100\n",
        b"[INFO] Starting vLLM: python -m vllm.entrypoints.openai.api_server\n",
        b'  File "x.py", line 3, in <module>\nValueError: INFO:     not a header\n',
    ]
    for line in same:
        assert stamp_uvicorn_lines(line, now_s) == line
    assert stamp_uvicorn_lines(b"ERROR:    Exception in ASGI application\r\n", now_s) == (
        b"ERROR 12-06 02:34:30 [uvicorn] Exception in ASGI application\r\n"
    )
    assert stamp_uvicorn_lines(b"(APIServer pid=7) INFO:     Application startup complete.\n", now_s) == (
        b"(APIServer pid=7) INFO 12-06 02:34:30 [uvicorn] Application startup complete.\n"
    )
