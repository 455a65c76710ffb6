"""The vLLM launcher with secrets: the API key through the environment (never argv), masked command lines in the
state file and the log, vLLM's own output masked on its way to the log, signals passed on, exit codes kept."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from core.logrotate import RotatingWriter
from core.redact import Redactor
from core.settings import Settings
from engine import launcher as launch
from engine.logpipe import Masked, file_sink, pump
from engine.model_resolve import ResolvedModel


def settings(tmp_path: Path, **fields: Any) -> Settings:
    return Settings(_env_file=None, logs_dir=tmp_path / "logs", run_dir=tmp_path / "run", **fields)  # type: ignore[call-arg]


RESOLVED = ResolvedModel(requested="m", source="local", model_arg="/models/m", served_name="m", synthetic=False)


def test_one_api_key_goes_through_the_environment_only(tmp_path: Path) -> None:
    """VLLM_API_KEY (or one --api-key in VLLM_EXTRA_ARGS) is in vLLM's environment and nowhere on its command line;
    other extra arguments stay."""
    for fields in ({"vllm_api_key": "s3cr3tXYZ"}, {"vllm_extra_args": "--api-key s3cr3tXYZ --max-num-seqs 4"}):
        s = settings(tmp_path, **fields)
        argv = launch.vllm_argv(s, RESOLVED)
        assert "s3cr3tXYZ" not in " ".join(argv) and "--api-key" not in argv
        assert launch.vllm_env(s, base={"PATH": "/bin"})["VLLM_API_KEY"] == "s3cr3tXYZ"
    assert argv[-2:] == ["--max-num-seqs", "4"]


def test_several_keys_go_on_the_command_line_as_one_list(tmp_path: Path) -> None:
    """VLLM_API_KEY and a different --api-key: vLLM accepts both (its --api-key list); the variable is not passed."""
    s = settings(tmp_path, vllm_api_key="k1", vllm_extra_args="--api-key=k2 --max-num-seqs 2")
    argv = launch.vllm_argv(s, RESOLVED)
    assert argv[-5:] == ["--api-key", "k1", "k2", "--max-num-seqs", "2"]  # the extra arguments stay last
    assert "VLLM_API_KEY" not in launch.vllm_env(s, base={"VLLM_API_KEY": "k1"})


def test_vllm_env_drops_the_other_services_secrets(tmp_path: Path) -> None:
    """vLLM gets the HF token, never the UI password, the sidecar token or the Locust password."""
    s = settings(tmp_path, hf_token="hf_abc")
    env = launch.vllm_env(s, base={"UI_PASSWORD": "pw", "SIDECAR_TOKEN": "t", "LOCUST_WEB_PASSWORD": "l", "PATH": "/b"})
    assert env["HF_TOKEN"] == "hf_abc" and {"UI_PASSWORD", "SIDECAR_TOKEN", "LOCUST_WEB_PASSWORD"}.isdisjoint(env)


def test_state_file_masks_secret_arguments(tmp_path: Path) -> None:
    """engine_state.json records the command line with secret values masked, vLLM's pid and the log position."""
    s = settings(tmp_path)
    argv = ["python", "-m", "vllm", "--api-key", "k1", "k2", "--hf-token=hf_zzz", "--port", "1"]
    launch.write_state(s, RESOLVED, argv, False, pid=4242)
    state = json.loads(s.engine_state_file.read_text())
    assert state["argv"] == ["python", "-m", "vllm", "--api-key", "***", "***", "--hf-token=***", "--port", "1"]
    assert state["pid"] == 4242 and "k1" not in s.engine_state_file.read_text()


def test_pump_masks_secrets_split_across_reads(tmp_path: Path) -> None:
    """A secret arriving in pieces (two writes of the child) is masked whole; progress bars (\\r) pass at once."""
    read_fd, write_fd = os.pipe()
    got: list[bytes] = []
    out = Masked([got.append], Redactor(["s3cr3tXYZ", "pw42"]))
    thread = threading.Thread(target=pump, args=(read_fd, out))
    thread.start()
    for piece in (b"key=s3c", b"r3tXYZ user pw42\n", b"10%\r", b"tail s3cr3tXYZ"):
        os.write(write_fd, piece)
    os.close(write_fd)
    thread.join(10)
    text = b"".join(got)
    assert text == b"key=*** user ***\n10%\rtail ***" and b"s3cr3t" not in text


def run_child(code: str, out: Masked, on_start: Callable[[int], None] | None = None) -> int:
    return launch.run_vllm([sys.executable, "-c", code], dict(os.environ), out, on_start or (lambda pid: None))


def test_run_vllm_copies_masked_output_and_keeps_the_exit_code(tmp_path: Path) -> None:
    """The child's stdout and stderr reach the log masked, to stdout and the rotated file alike; its exit code is
    the launcher's."""
    got: list[bytes] = []
    writer = RotatingWriter(tmp_path / "vllm.log", 1 << 20, 2)
    out = Masked([got.append, file_sink(writer)], Redactor(["hunter2-key"]))
    pids: list[int] = []
    code = run_child("import sys; print('non-default args: hunter2-key'); print('oops hunter2-key', file=sys.stderr);"
                     " sys.exit(3)", out, pids.append)  # fmt: skip
    writer.close()
    assert code == 3 and pids and pids[0] != os.getpid()
    assert b"hunter2" not in b"".join(got) and b"non-default args: ***" in b"".join(got)
    assert (tmp_path / "vllm.log").read_bytes() == b"".join(got)


def test_run_vllm_passes_sigterm_on(tmp_path: Path) -> None:
    """SIGTERM to the launcher (docker stop, supervisord) reaches vLLM, which shuts down; its code is returned."""
    got: list[bytes] = []
    ready = threading.Event()

    def sink(data: bytes) -> None:
        got.append(data)
        if b"ready" in data:
            ready.set()

    code = ("import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: (print('stopping', flush=True), sys.exit(7)))\n"
            "print('ready', flush=True)\ntime.sleep(60)\n")  # fmt: skip
    previous = {s: signal.getsignal(s) for s in launch.FORWARDED_SIGNALS}
    def stop_me() -> None:
        if ready.wait(30):
            os.kill(os.getpid(), signal.SIGTERM)

    killer = threading.Thread(target=stop_me)
    killer.start()
    try:
        assert run_child(code, Masked([sink], Redactor([]))) == 7
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        killer.join()
    assert b"stopping" in b"".join(got)


@pytest.mark.parametrize(("returncode", "shown"), [(0, 0), (3, 3), (-9, 137), (-15, 143)])
def test_exit_code_of_a_killed_child(returncode: int, shown: int) -> None:
    """A child killed by signal N exits the launcher with 128 + N, as a shell shows it."""
    assert launch.exit_code(returncode) == shown


def test_engine_request_never_stores_secret_flags(tmp_path: Path) -> None:
    """A restart with other VLLM_EXTRA_ARGS (start_vllm.sh) writes run/engine_request.json without the --api-key;
    the launcher adds back the keys of its own settings, so vLLM keeps them."""
    from core.enginestate import EngineRequest, read_request, write_request

    path = tmp_path / "run" / "engine_request.json"
    write_request(path, EngineRequest(vllm_extra_args="--max-num-seqs 2 --api-key s3cr3tXYZ other"))
    assert "s3cr3tXYZ" not in path.read_text()
    request = read_request(path)
    assert request.vllm_extra_args == "--max-num-seqs 2"
    own = settings(tmp_path, vllm_extra_args="--api-key s3cr3tXYZ --max-num-seqs 8")
    applied = launch.apply_request(own, request)
    assert applied.vllm_extra_args == "--max-num-seqs 2 --api-key s3cr3tXYZ"
    assert applied.vllm_api_keys == ["s3cr3tXYZ"]
