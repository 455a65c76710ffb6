"""Other servers, odd streams and bad input, end to end through `python -m loadgen.command.benchmark` and the real sidecar.

A real peer server (Hugging Face ``transformers serve`` from the engine env, serving ``synthetic:tiny`` on the CPU),
and the mock server with one quirk each: malformed chunks, no usage block, several models, no ``[DONE]``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from core.net import free_port
from core.settings import PROJECT_ROOT
from tests.integration.conftest import Stack, report_path, wait_http

pytestmark = pytest.mark.integration
APP_PY = str(PROJECT_ROOT / ".venvs/app/bin/python")
ENGINE_BIN = PROJECT_ROOT / ".venvs/engine/bin"




@pytest.fixture
def mock() -> Iterator[Callable[..., str]]:
    """Start mock servers with the given quirks; each is stopped at the end of the test."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> str:
        port = free_port()
        procs.append(subprocess.Popen([APP_PY, "-m", "loadgen.selftest.mock_server", "--port", str(port), *args],
                                      cwd=PROJECT_ROOT))
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/health", 30)
        return url

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)


def bench(stack: Stack, url: str, *flags: str, timeout_s: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m loadgen.command.benchmark` against ``url`` with the stack's sidecar."""
    knobs = {"VLLM_BASE_URL": url, "WARMUP": "0", "CONCURRENCY": "2", "REQUESTS": "6", **env}
    return stack.python("-m", "loadgen.command.benchmark", *flags, timeout_s=timeout_s, **knobs)


def report_of(stdout: str) -> dict[str, Any]:
    return json.loads(report_path(stdout).read_text(encoding="utf-8"))


def rows_of(report: dict[str, Any], reports_dir: Path) -> list[dict[str, Any]]:
    path = reports_dir / f"{report['report_id']}.requests.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def hf_cache_with(model_dir: Path, root: Path) -> Path:
    """An HF hub cache holding ``model_dir`` as ``local/tiny`` (transformers serve lists only cached models)."""
    revision = "0" * 39 + "1"
    repo = root / "hub" / "models--local--tiny"
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    for item in model_dir.iterdir():
        (snapshot / item.name).symlink_to(item)
    return root / "hub"


@pytest.fixture
def transformers_serve(stack: Stack, tmp_path: Path) -> Iterator[str]:
    """Hugging Face `transformers serve` on the CPU, serving the stack's synthetic tiny model as ``local/tiny``."""
    model_dir = PROJECT_ROOT / "models" / "tiny"
    assert (model_dir / "config.json").exists(), "make up builds models/tiny first"
    port = free_port()
    env = {**os.environ, "HF_HUB_CACHE": str(hf_cache_with(model_dir, tmp_path)), "HF_HUB_OFFLINE": "1"}
    log = (tmp_path / "transformers-serve.log").open("w")
    proc = subprocess.Popen([str(ENGINE_BIN / "transformers"), "serve", "--device", "cpu", "--port", str(port)],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/health", 180)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()


def test_transformers_serve_is_measured_like_vllm(stack: Stack, transformers_serve: str) -> None:
    """Every request to `transformers serve` (no [DONE], usage in the finish chunk) is ok, counted by its usage."""
    run = bench(stack, transformers_serve, MAX_TOKENS="8", timeout_s=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = report_of(run.stdout)
    m = report["metrics"]
    assert (m["requests_ok"], m["requests_failed"]) == (6, 0), report["errors"]
    assert m["output_token_sources"] == {"usage": 6} and m["output_tokens_per_sec"] > 0
    rows = [r for r in rows_of(report, stack.reports_dir) if r["phase"] == "measured"]
    assert {r["end_reason"] for r in rows} == {"finish_then_close"}
    assert all(r["output_tokens"] == r["max_tokens"] == 8 for r in rows)  # the server's usage, 8 asked, 8 given
    assert any(g.startswith("server cross-check skipped: GET /metrics answered HTTP 404") for g in report["gaps"])
    assert "[WARN] server cross-check skipped" in run.stdout


def test_malformed_chunk_on_every_request_ends_by_itself_with_every_row(stack: Stack, mock: Callable[..., str]) -> None:
    """A server that sends ``content: 6`` in every answer: all rows recorded as invalid_stream, exit 4, no hang."""
    url = mock("--tokens", "5", "--ttft-ms", "20", "--itl-ms", "5",
               "--bad-chunk", '{"choices":[{"index":0,"delta":{"content":6}}]}')
    run = bench(stack, url, WARMUP="0")
    assert run.returncode == 4, run.stdout[-3000:] + run.stderr[-3000:]
    report = report_of(run.stdout)
    assert report["metrics"]["requests_total"] == 6 and report["errors"]["by_kind"] == {"invalid_stream": 6}
    assert "content is a number (6)" in report["errors"]["examples"]["invalid_stream"][0]
    assert "Traceback" not in run.stdout + run.stderr
    # with a warmup that fails the same way, the measured run is not started: exit 4, the cause in words, and the
    # warmup's report (its rows and causes), which is no baseline
    warm = bench(stack, url, WARMUP="2")
    out = warm.stdout + warm.stderr
    assert warm.returncode == 4 and "every warmup request failed (2 of 2)" in out and "content is a number (6)" in out
    assert "[REPORT] Baseline saved to" not in out and "Traceback" not in out
    assert json.loads(report_path(out).read_text(encoding="utf-8"))["errors"]["by_kind"] == {"invalid_stream": 2}


def test_server_without_usage_gives_token_throughput_marked_with_its_source(stack: Stack,
                                                                            mock: Callable[..., str]) -> None:
    """No usage block and no /tokenize: tokens are the client's chunk count, said in the report and the summary."""
    run = bench(stack, mock("--tokens", "5", "--ttft-ms", "20", "--itl-ms", "5", "--no-usage", "--no-done", "--no-tokenize"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    m = report_of(run.stdout)["metrics"]
    assert m["output_tokens_per_sec"] > 0 and m["output_tokens_total"] == 30
    assert m["output_token_sources"] == {"chunks": 6}
    assert "6 request(s) carried no usage block: tokens counted 6 by chunks" in run.stdout


def test_shared_prefixes_against_a_server_without_tokenize_refuse_or_size_with_tokenizer(
        stack: Stack, mock: Callable[..., str]) -> None:
    """PREFIX_LEN against a server answering /tokenize with an HTML page (a gateway): exit 2 with one line naming
    TOKENIZER, nothing sent, no traceback; with TOKENIZER=models/tiny the prefixes are sized by that folder's
    tokenizer, the output says so, and the run writes its report."""
    url = mock("--tokens", "3", "--ttft-ms", "10", "--itl-ms", "5", "--tokenize-answer", "html")
    refused = bench(stack, url, PREFIX_LEN="16")
    out = refused.stdout + refused.stderr
    assert refused.returncode == 2 and "Set TOKENIZER (--tokenizer)" in refused.stderr, out[-3000:]
    assert "not JSON (it starts '<!DOCTYPE html>" in refused.stderr and "Traceback" not in out
    tiny = PROJECT_ROOT / "models" / "tiny"
    sized = bench(stack, url, PREFIX_LEN="16", TOKENIZER=str(tiny))
    assert sized.returncode == 0, sized.stdout[-3000:] + sized.stderr[-3000:]
    assert f"prompts sized with the local tokenizer in {tiny} (TOKENIZER)" in sized.stdout
    assert report_of(sized.stdout)["config"]["prefix_len_tokens"] == 16


def test_several_models_and_no_choice_stops_before_load_with_the_list(stack: Stack, mock: Callable[..., str]) -> None:
    """A server with several models and no BENCH_MODEL stops (exit 2) listing them; BENCH_MODEL picks one."""
    url = mock("--tokens", "3", "--ttft-ms", "10", "--itl-ms", "5", "--models", "base,lora-a")
    run = bench(stack, url)
    assert run.returncode == 2 and "serves 2 models (base, lora-a); choose one with BENCH_MODEL" in run.stderr
    chosen = bench(stack, url, BENCH_MODEL="lora-a")
    assert chosen.returncode == 0, chosen.stdout[-3000:] + chosen.stderr[-3000:]
    assert report_of(chosen.stdout)["config"]["model"] == "lora-a"


def test_bad_knob_stops_before_load_naming_it(stack: Stack) -> None:
    """INPUT_MIX=short:nan stops with exit 2 and a message naming INPUT_MIX, before any request."""
    run = bench(stack, "http://127.0.0.1:9", INPUT_MIX="short:nan")
    assert run.returncode != 0 and "INPUT_MIX" in run.stdout + run.stderr
    assert "Traceback" not in run.stdout + run.stderr


def test_open_loop_dispatches_for_the_duration_and_ends_within_the_drain(stack: Stack,
                                                                         mock: Callable[..., str]) -> None:
    """RATE=2 DURATION=8: arrivals are scheduled only inside the 8 s, and the run ends within DRAIN_S after."""
    url = mock("--tokens", "50", "--ttft-ms", "50", "--itl-ms", "100")  # 5 s answers: some still running at 8 s
    started = time.monotonic()
    run = bench(stack, url, RATE="2", DURATION="8", DRAIN_S="2", REQUESTS="", CONCURRENCY="1")
    elapsed = time.monotonic() - started
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = report_of(run.stdout)
    rows = [r for r in rows_of(report, stack.reports_dir) if r["phase"] == "measured"]
    scheduled = sorted(r["scheduled_at"] for r in rows)
    assert 5 <= len(scheduled) <= 32  # Poisson arrivals at 2/s for 8 s (mean 16; outside: odds below 1 in 1,000)
    assert scheduled[-1] - scheduled[0] <= 8.0
    assert report["metrics"]["requests_incomplete"] >= 1  # answers still running at 8 s + 2 s were cancelled
    assert elapsed < 8 + 2 + 45, elapsed  # dispatch, drain, and start-up/report overhead on a busy machine


def test_ctrl_c_writes_an_interrupted_report(stack: Stack, mock: Callable[..., str]) -> None:
    """SIGINT to the process group mid-run (as a terminal sends it): one line, no traceback, report interrupted."""
    url = mock("--tokens", "30", "--ttft-ms", "20", "--itl-ms", "50")
    env = {**stack.env, "VLLM_BASE_URL": url, "WARMUP": "0", "CONCURRENCY": "2", "REQUESTS": "200"}
    runs = stack.logs_dir / "runs"
    earlier = set(runs.glob("*.requests.jsonl")) if runs.exists() else set()
    # as from a terminal: SIGINT at its default even when this test runs as a background job (a shell starts those
    # with SIGINT ignored, and an ignored signal stays ignored across exec)
    proc = subprocess.Popen([APP_PY, "-m", "loadgen.command.benchmark"], cwd=PROJECT_ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # this run's rows file, once it holds a few measured rows
        files = sorted(set(runs.glob("*.requests.jsonl")) - earlier) if runs.exists() else []
        if files and files[-1].read_text().count('"phase":"measured"') >= 4:
            break
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out[-3000:] + err[-3000:]
    assert "Traceback" not in out + err
    report = report_of(out)
    assert report["interrupted"] is True and 4 <= report["metrics"]["requests_total"] < 200
    assert "[INFO] Interrupted: report of the" in out
