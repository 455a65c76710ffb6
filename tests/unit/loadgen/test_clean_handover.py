"""A clean hand-over between runs (issue 34): a request the benchmark gives up on closes its connection, so the
server aborts it (vLLM aborts a request whose client went away) instead of keeping the engine busy for the next run;
and a run starts only on an idle engine (it waits for another client's requests, or refuses with the figure).
Against the mock server in a child process, whose ``vllm:num_requests_running`` drops when a client disconnects."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import gevent
import pytest

from core.records import RequestRecord
from core.requestlog import RequestLog
from core.settings import PROJECT_ROOT, Settings
from loadgen.locust_side import user_actions as driver
from loadgen.locust_side.process_state import RunState
from loadgen.orchestrate.measured_run import read_records
from loadgen.orchestrate.replica_watch import EngineBusy, wait_until_idle
from loadgen.plan import bench_config
from loadgen.request.client import new_session
from tests.unit.loadgen.mock_process import mock_process, running_after, running_in_gevent

SLOW_STREAM = ("--metrics", "--tokens", "200", "--ttft-ms", "100", "--itl-ms", "200")  # 40 s per answer


def plan_for(url: str, **knobs: int) -> RunState:
    settings = Settings(_env_file=None, vllm_base_url=url, max_tokens=200, **knobs)  # type: ignore[call-arg, arg-type]
    return RunState(bench_config(settings, "mock-model"), RequestLog(Path("/dev/null")))


def test_requests_cut_by_the_end_of_the_run_close_their_connections(tmp_path: Path) -> None:
    """4 users mid-stream when the run's end kills them (Locust's GreenletExit): their rows are cut keeping what they
    received, and the server sees all 4 go at once (running 4 -> 0), not after their 40 s answers."""
    with mock_process(*SLOW_STREAM) as url:
        state = plan_for(url, requests=4, concurrency=4)
        state.begin(0, tmp_path / "rows.jsonl")
        sessions = [new_session() for _ in range(4)]
        users = [gevent.spawn(driver.send, state, s, url, state.item(k)) for k, s in enumerate(sessions)]
        assert running_in_gevent(url, 4.0) == 4.0  # every answer has begun streaming
        gevent.sleep(0.5)  # and sent its first tokens
        gevent.killall(users, block=True)
        assert running_after(url, 0.0, within_s=10.0) == 0.0
        rows, _ = read_records(tmp_path / "rows.jsonl")
        assert [r.error_kind for r in rows] == ["incomplete"] * 4 and all(r.content_chunks >= 1 for r in rows)
        for session in sessions:
            session.close()


WARMUP_CHILD = """
import signal
import sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # as the benchmark does, whatever SIGINT the runner passed on
from pathlib import Path
from loadgen.orchestrate.measured_run import warmup
from tests.unit.loadgen.test_clean_handover import plan_for
try:
    warmup(plan_for(sys.argv[1], warmup=3, concurrency=3).plan, Path(sys.argv[2]))
    print("ended")
except WarmupInterrupted as exc:
    print(f"WarmupInterrupted: {exc}")
except KeyboardInterrupt:
    print("KeyboardInterrupt")
"""
"""The warmup in its own interpreter: a real SIGINT, and no thread or signal state left by other tests (gevent's
monkey-patching by Locust's tests once made an in-process Ctrl-C miss the warmup)."""


def test_ctrl_c_in_the_warmup_aborts_its_requests_and_keeps_their_rows(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT) while 3 warmup requests stream: their connections are shut down (the server's running requests
    drop to 0 at once), their rows are saved as cut by Ctrl-C, and the warmup says it was interrupted."""
    with mock_process(*SLOW_STREAM) as url:
        rows_file = tmp_path / "run.requests.jsonl"
        child = subprocess.Popen([sys.executable, "-c", WARMUP_CHILD, url, str(rows_file)], cwd=PROJECT_ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
        try:
            seen = running_after(url, 3.0, within_s=60.0)  # generous: a busy 2-core host starts them late
            child.send_signal(signal.SIGINT)
            out, _ = child.communicate(timeout=60)
        finally:
            child.kill()
        assert seen == 3.0, out
        assert "WarmupInterrupted: interrupted during the warmup" in out, out
        assert running_after(url, 0.0, within_s=15.0) == 0.0
        rows, _ = read_records(rows_file)
        assert len(rows) == 3 and all(r.phase == "warmup" and r.error_kind == "incomplete" for r in rows), rows
        assert all((r.error or "").startswith("cancelled by Ctrl-C") for r in rows)


def held_requests(url: str, n: int) -> list[socket.socket]:
    """``n`` streamed chat requests of another client, held open (their answers are read by nobody)."""
    host, port = url.removeprefix("http://").split(":")
    body = b'{"model":"mock-model","messages":[{"role":"user","content":"hi"}],"max_tokens":200,"stream":true}'
    socks = []
    for _ in range(n):
        sock = socket.create_connection((host, int(port)))
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
        socks.append(sock)
    return socks


def test_a_run_waits_for_another_clients_requests_or_refuses_with_the_figure() -> None:
    """vLLM (the mock) streams 2 answers of another client: with IDLE_WAIT_S=1 the run is refused naming them; with
    IDLE_WAIT_S=30 it waits, and starts once that client goes away, saying so. The client goes away when the run has
    said it waits (not on a timer: on a busy host the first read of ``/metrics`` once took longer than the timer)."""
    with mock_process(*SLOW_STREAM) as url:
        others = held_requests(url, 2)
        assert running_after(url, 2.0) == 2.0
        settings = Settings(_env_file=None, vllm_base_url=url, idle_wait_s=1.0)  # type: ignore[call-arg]
        with pytest.raises(EngineBusy, match=r"still busy after \d+ s: 2 running \+ 0 waiting requests"):
            wait_until_idle(settings, out=lambda line: None)
        lines: list[str] = []

        def say(line: str) -> None:
            lines.append(line)
            if len(lines) == 1:  # the run waits: the other client goes away
                for sock in others:
                    sock.close()

        waited = wait_until_idle(settings.model_copy(update={"idle_wait_s": 30.0}), out=say)
        assert lines[0].startswith("[INFO] vLLM is busy: 2 running + 0 waiting requests"), lines
        assert lines[-1].startswith("[INFO] vLLM is idle after ") and 0.5 <= waited < 30, (waited, lines)


def test_the_idle_check_comes_before_anything_is_sent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy engine refuses the run before its warmup (nothing sent, no rows): exit 2 with the refusal as the
    run's error."""
    from loadgen.orchestrate import measured_run, pipeline
    from loadgen.orchestrate.outcome import EXIT_USAGE

    def busy(settings: Settings) -> float:
        raise EngineBusy("vLLM is still busy after 60 s: 13 running + 0 waiting requests")

    def no_warmup(*args: object) -> list[RequestRecord]:
        raise AssertionError("the warmup was sent to a busy engine")

    monkeypatch.setattr(measured_run, "wait_until_idle", busy)
    monkeypatch.setattr(measured_run, "warmup", no_warmup)
    settings = Settings(_env_file=None, logs_dir=tmp_path, warmup=2)  # type: ignore[call-arg]
    done = pipeline.point_runner(settings, None, None)(bench_config(settings, "m"))  # type: ignore[arg-type]
    assert done.exit_code == EXIT_USAGE and done.report is None and "13 running" in (done.error or "")
    (rows,) = (tmp_path / "runs").glob("*.requests.jsonl")
    assert rows.read_text() == ""


def test_behind_vllm_router_a_request_cut_before_its_first_token_stays_and_the_run_says_so(tmp_path: Path) -> None:
    """The real vllm-router in front of one engine (the stack's default front) does not pass a client's cancel on
    before the first streamed chunk (vLLM sends nothing before its first token: ``--role-with-first``): straight to
    the engine a cut request leaves at once, through the router it stays until its first token. A run stopped
    early there says what the engine still holds and why (:func:`left_after_stop`); with nothing left it says
    nothing."""
    import httpx

    from core.net import free_port, wait_for_http
    from core.replicas import record_cluster
    from loadgen.orchestrate.replica_watch import left_after_stop
    from tests.unit.loadgen.mock_process import running

    router_bin = Path(sys.executable).parent / "vllm-router"
    with mock_process("--metrics", "--role-with-first", "--tokens", "2", "--ttft-ms", "8000") as engine:
        router_port = free_port()
        settings = Settings(_env_file=None, run_dir=tmp_path, vllm_port=router_port,  # type: ignore[call-arg]
                            replica_port_base=int(engine.rsplit(":", 1)[1]))  # fmt: skip
        record_cluster(settings)  # as `make up` records the front
        assert left_after_stop(settings) is None  # idle: nothing to say
        router = subprocess.Popen(
            [str(router_bin), "--host", "127.0.0.1", "--port", str(router_port), "--worker-urls", engine,
             "--policy", "round_robin", "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            body = {"model": "mock-model", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            for url in (engine, settings.vllm_url):
                assert wait_for_http(f"{url}/v1/models", 30, interval_s=0.1)[0]  # the router: once it checked its worker
                with httpx.Client(timeout=10) as client, client.stream("POST", f"{url}/v1/chat/completions", json=body):
                    assert running_after(engine, 1.0, within_s=5.0) == 1.0
                # the client is gone: straight, the engine drops it at once; through the router it stays
                if url == engine:
                    assert running_after(engine, 0.0, within_s=3.0) == 0.0
                else:
                    time.sleep(1.5)
                    assert running(engine) == 1.0
            said = left_after_stop(settings)
            assert said is not None and "1 running + 0 waiting requests" in said and "first token" in said, said
        finally:
            router.terminate()
            router.wait(10)
