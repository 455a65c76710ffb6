"""The engine env's Python kept running for the unit suite: vLLM is imported once (each import costs ≈ 10 CPU-s),
then every probe script runs in it with its own argv and answers one JSON line (the script's last printed line).
The tests that check the stack's plans against vLLM's own code share it (``engine_interpreter`` in
``tests/unit/conftest.py``)."""

from __future__ import annotations

import json
import subprocess

from core.settings import PROJECT_ROOT

ENGINE_PY = PROJECT_ROOT / ".venvs" / "engine" / "bin" / "python"

ENGINE_SERVER = r"""
import contextlib, io, json, sys
for line in sys.stdin:
    call = json.loads(line)
    out = io.StringIO()
    try:
        sys.argv = ["probe", *call["args"]]
        with contextlib.redirect_stdout(out):
            exec(call["script"], {"__name__": "__probe__"})
        reply = {"ok": out.getvalue().strip().splitlines()[-1]}
    except BaseException as exc:  # noqa: BLE001 - the test reads the failure
        reply = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(reply), flush=True)
"""


class EngineInterpreter:
    """The engine env's Python kept running: :meth:`run` executes a probe script there with ``args`` as argv."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([str(ENGINE_PY), "-c", ENGINE_SERVER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)  # fmt: skip

    def run(self, script: str, *args: object) -> str:
        """The last line the script printed. Raises AssertionError when it raised."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"script": script, "args": [str(a) for a in args]}) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline())
        assert "ok" in reply, reply.get("error")
        return str(reply["ok"])

    def close(self) -> None:
        """Ends the interpreter."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)
