"""Start-up facts in reports and the sidecar's /startup endpoint (log parser wired into the sidecar)."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from core.settings import Settings
from engine.vllmlog.tracker import StartupAttempt, StartupPhase
from sidecar.reports.envinfo import startup_facts, vllm_fingerprint
from sidecar.reports.writer import ReportService
from sidecar.server import create_app


def attempt(startup_s: float, outcome: str = "ready") -> StartupAttempt:
    return StartupAttempt(
        started_at_s=1000.0, ready_at_s=1000.0 + startup_s, outcome=outcome, load_s=1.0, engine_init_s=10.0
    )


def test_cold_start_is_the_first_and_restarts_are_warm() -> None:
    """The first ready start is the cold start; later ones that became ready are warm restarts, whatever ended them
    (stopped by a switch, or failed after being ready: vLLM's teardown once logged EngineDeadError after a stop and
    `make status` lost the cold start); a start that failed before being ready has no start-up time."""
    never_ready = StartupAttempt(started_at_s=1000.0, ready_at_s=None, outcome="failed", load_s=None,
                                 engine_init_s=None)  # fmt: skip
    phase = StartupPhase(
        phase="ready",
        detail="ready",
        load_s=0.5,
        engine_init_s=9.0,
        kv_cache_line="GPU KV cache size: 412,336 tokens",
        attempts=(attempt(90.0, "stopped"), never_ready, attempt(20.0, "failed"), attempt(30.0)),
    )
    facts = startup_facts(phase)
    assert facts is not None and facts.cold_start_s == 90.0 and facts.warm_starts_s == [20.0, 30.0]
    assert (facts.model_load_s, facts.engine_init_s) == (0.5, 9.0)
    assert facts.kv_cache_line == "GPU KV cache size: 412,336 tokens"


def test_no_start_in_log_gives_none() -> None:
    """A log without any start yields no startup facts."""
    assert startup_facts(StartupPhase(phase="not_started", detail="no log")) is None


def test_startup_endpoint_reads_the_vllm_log(tmp_path: Path) -> None:
    """GET /startup parses logs/vllm.log: a failed start reports its error line."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "vllm.log").write_text(
        "[INFO] Starting vLLM: python -m vllm.entrypoints.openai.api_server --model m\n"
        "(APIServer pid=1) INFO 11-29 21:55:01 [utils.py:253] non-default args: {}\n"
        "(APIServer pid=1) ERROR 11-29 21:55:05 [core.py:1] EngineCore failed to start.\n"
        "ValueError: Unsupported CPU attention configuration\n"
    )
    settings = Settings(_env_file=None, logs_dir=logs, reports_dir=tmp_path / "reports")  # type: ignore[call-arg]
    service = ReportService.from_settings(settings, gpu=(None, "no GPU in this test"))
    with TestClient(create_app(settings, service), base_url="http://127.0.0.1:8200") as client:
        body = client.get("/startup").json()
    assert body["phase"] == "failed" and "Unsupported CPU attention" in (body["error_line"] or "")


def test_no_fingerprint_is_guessed_for_a_server_that_did_not_answer() -> None:
    """vLLM killed mid-run: nothing from the server, so no fingerprint (a ``vllm-<version>`` guess from the log read as
    a changed fingerprint against the server's own ``system_fingerprint``); a server answering without one gets it."""
    assert vllm_fingerprint({}, "0.32.0", None) is None
    assert vllm_fingerprint({"version": "0.32.0"}, "0.32.0", None) == "vllm-0.32.0"
    assert vllm_fingerprint({"system_fingerprint": "vllm-0.32.0-85bf72ca"}, "0.32.0", None) == "vllm-0.32.0-85bf72ca"
