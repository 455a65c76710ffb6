"""A reader that closes the pipe early (``| head -1``) ends a command quietly: no traceback, its own exit code."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from core.pipes import PipeSafeStdout

REPO = Path(__file__).resolve().parents[3]
REQUESTS = REPO / "tests" / "fixtures" / "logs" / "requests_mixed.jsonl"


def head_1(*argv: str) -> tuple[int, str, str]:
    """Run ``argv`` with its stdout read for one line and then closed, as ``| head -1`` does."""
    env = {**os.environ, "PYTHONUNBUFFERED": "0"}
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline().decode()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    return proc.wait(timeout=60), first, err


def test_log_analyzer_piped_into_head_ends_quietly() -> None:
    """``./log_analyze.sh --slow --stats | head -1``: the first line, then exit 0 and no BrokenPipeError."""
    code, first, err = head_1(
        sys.executable, "-m", "logtools", "--slow", "--stats", "--json", "--requests", str(REQUESTS)
    )
    assert first.strip()
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert code == 0


def test_guarded_program_keeps_going_and_keeps_its_exit_code() -> None:
    """After the reader left, output is dropped but the program runs to its end (a benchmark still marks its
    baseline) and returns its own exit code; the interpreter's last flush is quiet too."""
    program = (
        "import sys, pathlib\n"
        "from core.pipes import guard_stdout\n"
        "guard_stdout()\n"
        "for i in range(200000): print('line', i)\n"
        "pathlib.Path(sys.argv[1]).write_text('reached the end')\n"
        "print('unflushed tail', end='')\n"
        "raise SystemExit(3)\n"
    )
    marker = REPO / "logs" / f"pipes_test_{os.getpid()}.txt"
    try:
        code, first, err = head_1(sys.executable, "-c", program, str(marker))
        assert first == "line 0\n"
        assert marker.read_text() == "reached the end"
    finally:
        marker.unlink(missing_ok=True)
    assert code == 3
    assert err == "", err


def test_wrapper_passes_writes_through_until_the_pipe_breaks() -> None:
    """Writes reach the stream; a BrokenPipeError turns later writes into no-ops that still report their length."""

    class Closing(io.StringIO):
        broken = False

        def write(self, s: str) -> int:
            if self.broken:
                raise BrokenPipeError(32, "Broken pipe")
            return super().write(s)

    stream = Closing()
    out = PipeSafeStdout(stream)
    assert out.write("a") == 1
    stream.broken = True
    assert out.write("bcd") == 3 and out.reader_gone
    stream.broken = False
    out.write("e")  # dropped: the reader is gone for good
    assert stream.getvalue() == "a"
