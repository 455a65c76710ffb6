"""vLLM's start-up phase from its log: each phase, timings, the error line of a failed start, restarts."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from engine.vllmlog.startup import startup_phase
from engine.vllmlog.tracker import PHASES

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "logs"
RECORDED = FIXTURES / "vllm_0.32_cpu_recorded.log"
FAILED = FIXTURES / "vllm_0.32_failed_start.log"
OLD = FIXTURES / "vllm_0.4_old_format.log"
ANSI = FIXTURES / "vllm_0.11_ansi_colour.log"
TP2_OOM = FIXTURES / "vllm_0.9_tp2_oom_rank1.log"
DOCKER_TP2 = FIXTURES / "vllm_0.11_docker_tp2_ready.log"
CRI_DEAD = FIXTURES / "vllm_0.11_k8s_cri_engine_dead.log"

LAUNCH = "[INFO] Starting vLLM: /venv/bin/python -m vllm.entrypoints.openai.api_server --port 8100"
ARGS = "(APIServer pid=1) INFO 11-29 21:55:01 [utils.py:253] non-default args: {'port': 8100}"
INIT = "(EngineCore pid=2) INFO 11-29 21:55:10 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: x"
LOAD = "(Worker pid=3) INFO 11-29 21:55:20 [cpu_model_runner.py:68] Starting to load model models/tiny..."
LOADED = "(Worker pid=3) INFO 11-29 21:55:20 [default_loader.py:501] Loading weights took 0.01 seconds"
WARMUP = "(Worker pid=3) INFO 11-29 21:55:21 [cpu_model_runner.py:87] Warming up model for the compilation..."
INIT_TOOK = "(EngineCore pid=2) INFO 11-29 21:56:00 [core.py:402] init engine (profile, create kv cache) took 39.09 s"
READY = "(APIServer pid=1) INFO 11-29 21:56:01 [entry.py:140] Starting vLLM server on http://127.0.0.1:8100"


@pytest.mark.parametrize(
    ("lines", "phase", "detail"),
    [
        ([], "not_started", "no vLLM start-up in the log yet"),
        ([LAUNCH], "starting", "process started"),
        ([LAUNCH, ARGS, "model.safetensors:  45%|████▌     | 300M/700M [00:10<00:13, 30.0MB/s]"], "downloading",
         "downloading weights (45%)"),
        ([LAUNCH, ARGS, INIT, LOAD], "loading_weights", "loading weights"),
        ([LAUNCH, ARGS, INIT, LOAD, LOADED], "loading_weights", "loading weights (took 0.01 s)"),
        ([LAUNCH, ARGS, INIT, LOAD, LOADED, WARMUP], "compiling", "compiling / warming up (model load 0.01 s)"),
        ([LAUNCH, ARGS, INIT, LOAD, LOADED, WARMUP, INIT_TOOK, READY], "ready",
         "ready after 60 s (model load 0.01 s, engine init 39.09 s)"),
    ],
)  # fmt: skip
def test_each_phase_from_lines(lines: list[str], phase: str, detail: str) -> None:
    """The phase follows the last start-up milestone seen, with its detail line."""
    result = startup_phase(lines)
    assert (result.phase, result.detail) == (phase, detail)
    assert result.phase in PHASES


def test_ready_start_has_timings_and_stamps() -> None:
    """A finished start reports weights load, engine init, start-to-ready seconds and when it became ready."""
    result = startup_phase([LAUNCH, ARGS, INIT, LOAD, LOADED, WARMUP, INIT_TOOK, READY])
    assert (result.load_s, result.engine_init_s, result.startup_s) == (0.01, 39.09, 60.0)
    assert result.ready_at_s is not None and result.started_at_s is not None
    assert result.ready_at_s - result.started_at_s == 60.0 and result.phase_since_s == result.ready_at_s
    assert result.vllm_version == "0.32.0" and result.error_line is None


def test_recorded_log_has_two_starts_then_a_stop() -> None:
    """The recorded CPU log: a synthetic tiny model start (51 s), a restart (163 s), then shutdown."""
    result = startup_phase(RECORDED)
    assert result.phase == "stopped"
    assert [(a.outcome, a.startup_s, a.load_s, a.engine_init_s) for a in result.attempts] == [
        ("stopped", 51.0, 0.02, 29.05),
        ("stopped", 163.0, 2.62, 125.83),
    ]
    assert result.as_dict()["attempts"][0]["startup_s"] == 51.0


def test_failed_start_reports_the_root_cause() -> None:
    """A failed start is ``failed`` with the first exception line (the cause), not the follow-up errors."""
    result = startup_phase(FAILED)
    assert result.phase == "failed" and result.load_s == 1.84
    assert result.error_line is not None and result.error_line.startswith("ValueError: To serve at least one request")
    assert result.detail.startswith("failed: ValueError:")
    assert result.attempts[-1].outcome == "failed" and result.attempts[-1].startup_s is None


def test_engine_death_after_ready_is_failed_with_its_cause() -> None:
    """Old format: ready, then the engine dies; the cause shown is the exception inside that record."""
    result = startup_phase(OLD)
    assert result.vllm_version == "0.4.2" and result.ready_at_s is not None
    assert result.phase == "failed"
    assert result.error_line == "RuntimeError: CUDA error: an illegal memory access was encountered"


def test_request_errors_after_ready_do_not_fail_the_server() -> None:
    """An ERROR for one request (handled by vLLM) leaves the phase ``ready``."""
    lines = [LAUNCH, ARGS, READY, "(APIServer pid=1) ERROR 11-29 21:57:00 [serving_chat.py:1145] Error in stream."]
    lines.append("(APIServer pid=1) ERROR 11-29 21:57:00 [serving_chat.py:1145] ValueError: prompt too long")
    assert startup_phase(lines).phase == "ready"


def test_launcher_error_before_vllm_is_failed() -> None:
    """The launcher's own ``[ERROR]`` (busy port, unloadable model) after a start marks it failed."""
    result = startup_phase([LAUNCH, "[ERROR] VLLM_PORT=8100 is in use by another process"])
    assert (result.phase, result.error_line) == ("failed", "VLLM_PORT=8100 is in use by another process")


def test_restart_after_failure_starts_a_new_attempt() -> None:
    """A new launch line after a failure starts over; both attempts are listed."""
    lines = [LAUNCH, ARGS, "(EngineCore pid=2) ERROR 11-29 21:55:30 [core.py:866] EngineCore failed to start."]
    lines += [LAUNCH, ARGS.replace("21:55:01", "21:58:00"), READY.replace("21:56:01", "21:58:30")]
    result = startup_phase(lines)
    assert result.phase == "ready" and result.startup_s == 30.0
    assert [a.outcome for a in result.attempts] == ["failed", "ready"]


def test_gzip_path_and_garbage_lines(tmp_path: Path) -> None:
    """A gzip file path works; binary garbage between the milestones is ignored."""
    log = tmp_path / "vllm.log.1"
    log.write_bytes(gzip.compress(f"{LAUNCH}\n\x00\xff\xfe junk\n{ARGS}\n{LOAD}\n".encode() + b"\x80\x81\n"))
    assert startup_phase(log).phase == "loading_weights"
    assert startup_phase(str(log)).phase == "loading_weights"


def test_missing_file_is_not_started(tmp_path: Path) -> None:
    """No log file yet: ``not_started``, no exception."""
    assert startup_phase(tmp_path / "vllm.log").phase == "not_started"


def test_bytes_lines_with_newlines() -> None:
    """Lines may be bytes with their newlines (as read from a file)."""
    result = startup_phase([f"{line}\n".encode() for line in (LAUNCH, ARGS, LOAD, LOADED)])
    assert result.detail == "loading weights (took 0.01 s)"


def test_tp2_start_failing_with_oom_on_rank_1_is_failed_with_the_workers_error() -> None:
    """TP=2, rank 1 runs out of GPU memory while loading: failed, with rank 1's OOM line, not the follow-ups."""
    result = startup_phase(TP2_OOM)
    assert result.phase == "failed" and result.error_process == "VllmWorker rank=1"
    assert result.error_line is not None and result.error_line.startswith("torch.OutOfMemoryError: CUDA out of memory")
    assert result.detail.endswith("(in VllmWorker rank=1)") and result.vllm_version == "0.9.2"
    assert result.load_s == 5.684321  # rank 0 finished loading before the engine gave up


@pytest.mark.parametrize(
    "prefix",
    ["(EngineCore_DP0 pid=7)", "(VllmWorker rank=2 pid=8080)", "(Worker_TP1 pid=211)", "(VllmWorkerProcess pid=9)"],
)
def test_an_error_from_any_process_during_start_up_fails_it(prefix: str) -> None:
    """The same ERROR line from an engine core or any worker gives ``failed`` with that line."""
    error = f"{prefix} ERROR 11-29 21:55:30 [gpu_worker.py:1] torch.OutOfMemoryError: CUDA out of memory on GPU 2"
    result = startup_phase([LAUNCH, ARGS, INIT, LOAD, error])
    assert result.phase == "failed" and result.error_line == "torch.OutOfMemoryError: CUDA out of memory on GPU 2"
    assert result.error_process == prefix[1:].rsplit(" pid=", 1)[0]


def test_the_root_cause_wins_over_errors_reporting_it() -> None:
    """The engine core's 'WorkerProc initialization failed' comes first, the worker's OOM later: the OOM is shown."""
    core = "(EngineCore_DP0 pid=7) ERROR 11-29 21:55:30 [core.py:1] "
    worker = "(Worker_TP1 pid=9) ERROR 11-29 21:55:30 [multiproc_executor.py:1] "
    lines = [LAUNCH, ARGS, f"{core}EngineCore failed to start."]
    lines += [f"{core}Exception: WorkerProc initialization failed due to an exception in a background process."]
    lines += [f"{worker}WorkerProc failed to start.", f"{worker}torch.OutOfMemoryError: CUDA out of memory"]
    lines += ["(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above."]
    result = startup_phase(lines)
    assert (result.error_line, result.error_process) == ("torch.OutOfMemoryError: CUDA out of memory", "Worker_TP1")


def test_tp_run_is_ready_only_when_its_api_server_is() -> None:
    """Docker -t log of a TP=2 start: workers loaded and the engine initialised is compiling, not ready; the API
    server's line makes it ready. The slowest worker's model load is the figure."""
    lines = DOCKER_TP2.read_text().splitlines()
    api_ready = next(i for i, line in enumerate(lines) if "Starting vLLM API server" in line)
    before = startup_phase(lines[:api_ready])
    assert before.phase == "compiling" and before.engine_init_s == 38.2
    worker_says_ready = [*lines[:api_ready], lines[api_ready].replace("(APIServer pid=1)", "(Worker_TP0 pid=210)")]
    assert startup_phase(worker_says_ready).phase == "compiling"
    result = startup_phase(DOCKER_TP2)
    assert result.phase == "ready" and result.startup_s == 47.0
    assert (result.load_s, result.engine_init_s) == (5.020349, 38.2)
    assert result.kv_cache_line == "GPU KV cache size: 412,336 tokens"
    assert result.detail == "ready after 47 s (model load 5.02 s, engine init 38.2 s)"


def test_ansi_coloured_log_reaches_ready() -> None:
    """Colour codes around the prefix, level, stamp and source do not hide the phases or the timings."""
    result = startup_phase(ANSI)
    assert result.phase == "ready" and result.vllm_version == "0.11.0"
    assert (result.startup_s, result.load_s, result.engine_init_s) == (39.0, 0.866843, 24.52)
    assert result.kv_cache_line == "GPU KV cache size: 1,065,680 tokens"


def test_kubernetes_log_engine_death_after_ready_shows_the_engine_cores_oom() -> None:
    """CRI log (stdout/stderr F/P tags): ready, then the engine core dies of OOM while serving; that is the cause."""
    result = startup_phase(CRI_DEAD)
    assert result.phase == "failed" and result.ready_at_s is not None and result.error_process == "EngineCore_DP0"
    assert result.error_line is not None and result.error_line.startswith("torch.OutOfMemoryError: CUDA out of memory")
    assert (result.load_s, result.engine_init_s) == (4.412035, 21.07)


STAMPED_LAUNCH = "INFO 11-29 21:54:46 [launcher] Starting vLLM: /venv/bin/python -m vllm.entrypoints.openai.api_server"
"""The launcher's line as it writes it now: stamped in vLLM's header at the launch (engine.logpipe.vllm_header)."""
STOP = "(APIServer pid=1) INFO 11-29 21:58:00 [launcher.py:254] [shutdown] API server: shutdown triggered"
TEARDOWN_ERROR = ("(APIServer pid=1) ERROR 11-29 21:58:00 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: "
                  "EngineCore encountered an issue. See stack trace (above) for the root cause.")  # fmt: skip


def test_a_start_is_timed_from_its_launch_and_a_stop_with_vllms_teardown_error_stays_a_stop() -> None:
    """The launcher's stamped line times the start from the launch (the API server's 15 s of imports before its first
    line included: `make status`'s "ready after" agrees with its phases), and the EngineDeadError vLLM 0.32 logs while
    a switch stops it does not turn that ready start into a failed one (its time stays the cold start)."""
    body = [ARGS, INIT, LOAD, LOADED, WARMUP, INIT_TOOK, READY]
    phase = startup_phase([STAMPED_LAUNCH, *body, STOP, TEARDOWN_ERROR, STAMPED_LAUNCH, *body])
    first, second = phase.attempts
    assert (first.outcome, first.startup_s) == ("stopped", 75.0)  # 21:54:46 -> 21:56:01
    assert second.startup_s == 75.0 and phase.phase == "ready"
    assert startup_phase([LAUNCH, *body]).startup_s == 60.0  # an older log: from the first stamped line
