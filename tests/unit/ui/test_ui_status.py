"""Backend status of the chat UI header: probing vLLM (mock transport, no sockets) and Ready/Loading/Down."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.enginestate import EngineState
from ui.status import (
    BackendStatus,
    Probe,
    classify,
    current_status,
    engine_process_alive,
    header_markdown,
    plain_reason,
    probe_vllm,
)

URL = "http://127.0.0.1:8100"
MODELS = {"object": "list", "data": [{"id": "ernie-4.5-0.3b-pt", "max_model_len": 4096}]}
READY_PROBE = Probe(health_code=200, connect_error=None, models=MODELS, version="0.32.0")
DOWN_PROBE = Probe(health_code=None, connect_error="connection refused", models=None, version=None)


def _state(**fields: Any) -> EngineState:
    """An engine state file's content with the launcher's required fields filled in."""
    base: dict[str, Any] = {"requested": "m", "source": "local", "model_arg": "/m", "served_name": "m"}
    return EngineState(**{**base, **fields})


def plain(markdown: str) -> str:
    """Text as the browser shows it (bold markers and escapes removed)."""
    return re.sub(r"\*\*|\\", "", markdown)


def vllm_transport(health: int = 200, models: dict[str, Any] | None = None) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            return httpx.Response(health)
        if request.url.path == "/v1/models":
            return httpx.Response(200, json=models or MODELS)
        if request.url.path == "/version":
            return httpx.Response(200, json={"version": "0.32.0"})
        return httpx.Response(404)

    return httpx.MockTransport(handler)


def refusing_transport() -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("Connection refused", request=request)

    return httpx.MockTransport(handler)


def test_ready_when_healthy_and_a_model_is_listed() -> None:
    """Health 200 plus a listed model is Ready, with name, version and context length."""
    status = classify(READY_PROBE, URL, None, engine_alive=False)
    assert status.state == "Ready" and status.ready
    assert (status.model, status.version, status.max_model_len) == ("ernie-4.5-0.3b-pt", "0.32.0", 4096)


def test_loading_when_unreachable_but_the_engine_process_runs() -> None:
    """No HTTP answer while the vLLM process exists means it is still loading."""
    status = classify(DOWN_PROBE, URL, _state(pid=123), engine_alive=True)
    assert status.state == "Loading"
    assert "updates by itself" in status.detail


def test_down_when_unreachable_and_no_engine_process() -> None:
    """No HTTP answer and no process means down, with the URL and how to start it."""
    status = classify(DOWN_PROBE, URL, None, engine_alive=False)
    assert status.state == "Down"
    assert URL in status.detail and "make up" in status.detail


def test_down_when_health_fails() -> None:
    """A /health error code (dead engine) is Down, naming the code."""
    status = classify(Probe(503, None, MODELS, "0.32.0"), URL, None, engine_alive=False)
    assert status.state == "Down"
    assert "503" in status.detail


def test_loading_when_no_model_is_listed_yet() -> None:
    """Healthy but without a listed model is still Loading."""
    assert classify(Probe(200, None, {"data": []}, "0.32.0"), URL, None, engine_alive=False).state == "Loading"


def test_synthetic_model_is_flagged_with_the_launcher_reason() -> None:
    """The launcher's state file marks the served model synthetic, with its fallback reason."""
    state = _state(synthetic=True, served_name="ernie-4.5-0.3b-pt", fallback_reason="the hub is unreachable")
    status = classify(READY_PROBE, URL, state, engine_alive=False)
    assert status.synthetic
    assert status.synthetic_reason == "the hub is unreachable"


def test_synthetic_flag_ignores_a_state_file_for_another_model() -> None:
    """A state file about a different served name does not mark the current model synthetic."""
    state = _state(synthetic=True, served_name="other", requested="synthetic:tiny")
    assert not classify(READY_PROBE, URL, state, engine_alive=False).synthetic


def test_synthetic_flag_from_the_model_name() -> None:
    """A served name containing 'synthetic' is flagged even without a state file."""
    probe = Probe(200, None, {"data": [{"id": "ernie-tiny-synthetic", "max_model_len": 4096}]}, "0.32.0")
    assert classify(probe, URL, None, engine_alive=False).synthetic


def test_header_shows_model_backend_and_status_lines() -> None:
    """The header reads ``Model: ...``, ``Backend: vLLM <version>`` and ``Status: Ready``."""
    text = plain(header_markdown(classify(READY_PROBE, URL, None, engine_alive=False)))
    assert "Model: ernie-4.5-0.3b-pt" in text
    assert "Backend: vLLM 0.32.0" in text
    assert "Status: Ready" in text
    assert "Context: 4096 tokens" in text
    assert "Synthetic" not in text


def test_header_says_plainly_that_synthetic_answers_are_noise() -> None:
    """While a synthetic model is served the header says its answers are noise, and why it is served."""
    state = _state(synthetic=True, served_name="ernie-4.5-0.3b-pt", requested="synthetic:tiny")
    text = plain(header_markdown(classify(READY_PROBE, URL, state, engine_alive=False)))
    assert "noise by design" in text
    assert "MODEL=synthetic:tiny was requested" in text


FALLBACK_REASON = (
    "default model baidu/ERNIE-4.5-0.3B-PT is not in the HF cache and could not be downloaded (ConnectError: "
    "[Errno -2] Name or service not known (huggingface.co)); serving synthetic:ernie-4.5-0.3b instead: same "
    "architecture, random weights, its text is noise"
)


def test_fallback_reason_in_plain_words_with_the_cause_apart() -> None:
    """The launcher's reason loses its exception text, which becomes the cause; a plain reason stays whole."""
    plain_words, cause = plain_reason(FALLBACK_REASON)
    assert plain_words == "default model baidu/ERNIE-4.5-0.3B-PT is not in the HF cache and could not be downloaded"
    assert cause == "ConnectError: [Errno -2] Name or service not known (huggingface.co)"
    assert plain_reason("the hub is unreachable") == ("the hub is unreachable", None)


def test_synthetic_notice_ends_in_plain_words_and_puts_the_error_on_its_own_line() -> None:
    """The header's synthetic notice does not end in a raw exception: the cause is a separate ``Cause:`` line."""
    state = _state(synthetic=True, served_name="ernie-4.5-0.3b-pt", fallback_reason=FALLBACK_REASON)
    lines = plain(header_markdown(classify(READY_PROBE, URL, state, engine_alive=False))).splitlines()
    because = next(line for line in lines if line.startswith("It is served because"))
    assert because.rstrip(" ").endswith("could not be downloaded.") and "Errno" not in because
    assert lines[-1].startswith("*Cause:* `ConnectError: [Errno -2]")


def test_header_when_down_has_status_and_advice() -> None:
    """The Down header names the status and what to do, with an unknown version said plainly."""
    text = plain(header_markdown(BackendStatus(state="Down", url=URL, detail="Start it with `make up`.")))
    assert "Status: Down" in text and "make up" in text and "vLLM (version unknown)" in text


def test_probe_reads_health_models_and_version() -> None:
    """The probe collects /health, /v1/models and /version."""

    async def run() -> Probe:
        async with httpx.AsyncClient(transport=vllm_transport()) as client:
            return await probe_vllm(client, URL)

    probe = asyncio.run(run())
    assert probe == Probe(health_code=200, connect_error=None, models=MODELS, version="0.32.0", models_code=200)


def test_probe_turns_a_refused_connection_into_a_value() -> None:
    """A refused connection is a probe result, not an exception."""

    async def run() -> Probe:
        async with httpx.AsyncClient(transport=refusing_transport()) as client:
            return await probe_vllm(client, URL)

    probe = asyncio.run(run())
    assert probe.health_code is None and probe.connect_error == "connection refused"


def test_current_status_follows_a_model_switch(tmp_path: Path) -> None:
    """Each probe reads /v1/models afresh, so a switched model shows without restarting the UI."""
    second = {"data": [{"id": "other-model", "max_model_len": 2048}]}

    async def run() -> tuple[BackendStatus, BackendStatus]:
        async with httpx.AsyncClient(transport=vllm_transport()) as first_client:
            before = await current_status(first_client, URL, tmp_path / "missing.json")
        async with httpx.AsyncClient(transport=vllm_transport(models=second)) as second_client:
            after = await current_status(second_client, URL, tmp_path / "missing.json")
        return before, after

    before, after = asyncio.run(run())
    assert (before.model, after.model, after.max_model_len) == ("ernie-4.5-0.3b-pt", "other-model", 2048)


def test_engine_alive_only_for_a_vllm_process(tmp_path: Path) -> None:
    """The recorded pid counts only when that process's command line mentions vLLM."""
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cmdline").write_bytes(b"python\0-m\0vllm.entrypoints.openai.api_server\0")
    (tmp_path / "43").mkdir()
    (tmp_path / "43" / "cmdline").write_bytes(b"bash\0")
    assert engine_process_alive(_state(pid=42), proc_root=tmp_path)
    assert not engine_process_alive(_state(pid=43), proc_root=tmp_path)
    assert not engine_process_alive(_state(pid=44), proc_root=tmp_path)
    assert not engine_process_alive(None, proc_root=tmp_path)


def test_engine_on_another_host_counts_while_its_launch_is_recent(tmp_path: Path) -> None:
    """A vLLM in another container (other hostname) is presumed loading within the startup window, then not."""
    state = _state(pid=1, hostname="vllm-container", started_at=1000.0)
    assert engine_process_alive(state, tmp_path, hostname="ui-container", now_s=1100.0, startup_window_s=900.0)
    assert not engine_process_alive(state, tmp_path, hostname="ui-container", now_s=2000.0, startup_window_s=900.0)


@pytest.mark.parametrize(("body", "said"), [
    (b'[{"id": "m"}]', "Input should be an object"),
    (b"<html><body>Sign in</body></html>", "not JSON (it starts '<html><body>Sign in"),
    (b'{"data": {"id": "m"}}', "data: Input should be a valid array"),
])  # fmt: skip
def test_a_model_list_of_another_shape_is_down_naming_the_url_and_what_came_back(body: bytes, said: str) -> None:
    """/v1/models answered 200 with a list, a login page or a dict for data: the header says Down with the URL and
    the fault (before: an AttributeError from the status probe, or "Loading" for ever); /version is still read."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, content=body)
        return httpx.Response(200, json={"version": "0.32.0"})

    async def run() -> Probe:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await probe_vllm(client, URL)

    status = classify(asyncio.run(run()), URL, None, engine_alive=True)
    assert status.state == "Down" and f"GET {URL}/v1/models (HTTP 200): " in status.detail and said in status.detail
    assert "OpenAI-compatible server's root" in status.detail and status.version == "0.32.0"
