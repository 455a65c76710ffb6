"""Error mapping of the chat UI: each failure in the user's words, with sizes and what to do."""

from __future__ import annotations

import httpx
import httpx2
import openai
import pytest

from ui import chat_errors as errors
from ui.chat import ContextTooLong, plan_max_tokens
from ui.status import BackendStatus

URL = "http://127.0.0.1:8100"
REQUEST = httpx2.Request("POST", f"{URL}/v1/chat/completions")
DOWN = BackendStatus(state="Down", url=URL, detail="vLLM is not reachable")
LOADING = BackendStatus(state="Loading", url=URL)


def status_error(code: int, message: str, param: str | None = None) -> openai.APIStatusError:
    body = {"error": {"message": message, "type": "BadRequestError", "param": param, "code": code}}
    response = httpx2.Response(code, request=REQUEST, json=body)
    cls = {400: openai.BadRequestError, 404: openai.NotFoundError, 500: openai.InternalServerError}.get(
        code, openai.APIStatusError
    )
    return cls(message, response=response, body=body)


def mapped(exc: BaseException, *, status: BackendStatus | None = DOWN, partial: bool = False) -> errors.UiError:
    return errors.map_exception(exc, model="ernie", url=URL, status=status, partial=partial, timeout_s=300)


def test_connection_refused_means_backend_down_with_what_to_do() -> None:
    """No connection and no vLLM process: say it is down, where, and how to start it."""
    error = mapped(openai.APIConnectionError(request=REQUEST))
    assert error.kind == "backend_down"
    assert URL in error.message and "make up" in error.message


def test_connection_refused_while_loading_says_wait() -> None:
    """No connection while the vLLM process loads: say it is loading and to wait for Ready."""
    error = mapped(openai.APIConnectionError(request=REQUEST), status=LOADING)
    assert error.kind == "backend_loading"
    assert "Status: Ready" in error.message


def test_httpx_connect_error_is_backend_down() -> None:
    """A refused connection from the plain HTTP client maps like the OpenAI client's."""
    assert mapped(httpx.ConnectError("refused")).kind == "backend_down"


def test_connection_lost_mid_answer_is_stream_cut() -> None:
    """Losing the connection after tokens arrived means the answer was cut off."""
    error = mapped(openai.APIConnectionError(request=REQUEST), partial=True)
    assert error.kind == "stream_cut"
    assert "cut off" in error.message and "above" in error.message


def test_context_error_from_vllm_reports_limit_and_size() -> None:
    """vLLM's 400 for a too-long prompt becomes the limit and the size, with advice."""
    text = (
        "This model's maximum context length is 4096 tokens. However, your prompt contains at least 4097 input "
        "tokens, which exceeds this limit even without any output tokens."
    )
    error = mapped(status_error(400, text, "input_tokens"))
    assert error.kind == "context_too_long"
    assert "4,097 tokens" in error.message and "4,096 tokens" in error.message
    assert "4097" in error.cause


def test_max_tokens_error_from_vllm_reports_both_numbers() -> None:
    """vLLM's 400 for max_tokens above the context names both numbers and the setting to change."""
    error = mapped(status_error(400, "max_tokens=5000 cannot be greater than max_model_len=4096.", "max_tokens"))
    assert error.kind == "max_tokens_too_large"
    assert "5,000" in error.message and "4,096" in error.message and "max_tokens" in error.message


def test_other_bad_request_passes_the_server_text() -> None:
    """An unrecognised 400 shows the server's own explanation."""
    error = mapped(status_error(400, "temperature must be >= 0"))
    assert error.kind == "rejected"
    assert "temperature must be >= 0" in error.message


def test_server_error_names_the_status_and_the_log() -> None:
    """A 5xx says the server failed, with the code, and points at the vLLM log."""
    error = mapped(status_error(500, "EngineCore died"))
    assert error.kind == "server_error"
    assert "HTTP 500" in error.message and "EngineCore died" in error.message and "logs/vllm.log" in error.message


def test_unknown_model_means_the_model_was_switched() -> None:
    """A 404 for the model says the server switched models and to resend."""
    error = mapped(status_error(404, "The model `ernie` does not exist."))
    assert error.kind == "model_gone"
    assert "send your message again" in error.message


@pytest.mark.parametrize("exc", [openai.APITimeoutError(request=REQUEST), httpx.ReadTimeout("slow")])
def test_timeout_names_the_limit(exc: BaseException) -> None:
    """A timeout says how long was waited and which setting raises it."""
    error = mapped(exc)
    assert error.kind == "timeout"
    assert "300 s" in error.message and "REQUEST_TIMEOUT_S" in error.message


def test_error_event_mid_stream_is_stream_cut() -> None:
    """An error event after tokens arrived is reported as a cut-off answer with the server's reason."""
    exc = openai.APIError("engine overloaded", REQUEST, body={"error": {"message": "engine overloaded"}})
    error = mapped(exc, partial=True)
    assert error.kind == "stream_cut"
    assert "engine overloaded" in error.message


def test_unexpected_exception_is_named() -> None:
    """Anything else is shown with its type, never swallowed."""
    error = mapped(RuntimeError("boom"))
    assert error.kind == "unknown"
    assert "RuntimeError" in error.message and "boom" in error.cause


def test_history_too_long_suggests_new_chat() -> None:
    """When the history is the problem, the message says so and suggests a New Chat."""
    error = errors.context_too_long(ContextTooLong(prompt_tokens=5000, max_model_len=4096, message_tokens=300), "m")
    assert "5,000 tokens" in error.message and "4,096 tokens" in error.message and "300 tokens" in error.message
    assert "New Chat" in error.message


def test_message_alone_too_long_suggests_shortening() -> None:
    """When the message alone is too long, the message says to shorten it."""
    error = errors.context_too_long(ContextTooLong(prompt_tokens=4500, max_model_len=4096, message_tokens=4500), "m")
    assert "Your message is 4,500 tokens" in error.message
    assert "Shorten the message" in error.message


def test_clamp_notice_only_when_clamped() -> None:
    """A clamped max_tokens is announced with the numbers; an unclamped one is not."""
    assert errors.clamp_notice(plan_max_tokens(100, 8192, 19, 4096)) is None
    notice = errors.clamp_notice(plan_max_tokens(5000, 8192, 19, 4096))
    assert notice is not None
    assert "5,000" in notice and "4,077" in notice and "4,096" in notice and "19" in notice


def test_clamp_to_the_ui_limit_names_the_setting() -> None:
    """A max_tokens lowered to UI_MAX_TOKENS says so, with both numbers and the setting's name."""
    notice = errors.clamp_notice(plan_max_tokens(131_072, 4096, 20, 131_072))
    assert notice is not None
    assert "131,072" in notice and "4,096" in notice and "UI_MAX_TOKENS" in notice


def test_cancel_reason_tells_stop_from_disconnect() -> None:
    """Stop and a disconnected session are both ``cancelled``, with causes that tell them apart."""
    stopped, gone = errors.cancelled(errors.STOPPED), errors.cancelled(errors.DISCONNECTED)
    assert stopped.kind == gone.kind == "cancelled"
    assert stopped.cause == "cancelled" and "disconnected" in gone.cause
    assert errors.cancelled(None) == stopped


def test_stream_cut_without_text_does_not_mention_a_partial_answer() -> None:
    """A stream that ended before any token does not point at a partial answer."""
    assert "above" not in errors.stream_cut(partial=False).message
