"""One chat turn end to end: status check, context budget, streaming, error mapping, ``requests.jsonl`` line; then
the answer's energy, asked of the sidecar (``GET /energy?start=&end=``, open, samples nothing): what the engine's
GPUs (NVML) or the host's CPU packages (RAPL) used while the answer streamed. Any failure there is None: the timing
line then shows no energy, and the chat goes on. A sidecar that cannot measure energy here (no NVML, no readable
RAPL), or cannot be reached, is not asked again for a while."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import httpx
from openai import AsyncOpenAI

from core.requestlog import RequestLog, RequestLogLine, Status, now_iso
from core.settings import Settings
from ui import chat_errors as errors
from ui.backend import StreamState, count_tokens, stream_chat
from ui.chat import (
    ChatMessage,
    ChatParams,
    answer_room_wanted,
    build_messages,
    check_context,
    drop_oldest_turns,
    plan_max_tokens,
    request_kwargs,
    turn_count,
)
from ui.status import BackendStatus, current_status
from ui.timing import Timing, compute_timing

CONNECT_TIMEOUT_S = 5.0
MAX_WAIT_S = 1.0
"""Longest wait for the sidecar's next sample after the answer ended (its bound needs a sample after it), s."""
UNAVAILABLE_PAUSE_S = 300.0
"""How long the UI stops asking a sidecar that said it cannot measure energy, s."""
UNREACHABLE_PAUSE_S = 60.0
"""How long it stops asking a sidecar that could not be reached or answered otherwise, s."""


@dataclass(frozen=True)
class AnswerEnergy:
    """The answer's energy (None: none shown) and how long not to ask again (0: ask next time)."""

    energy_j: float | None
    pause_s: float = 0.0


def wall_bounds(t0: float, end: float, clock_now: float, wall_now: float | None = None) -> tuple[float, float]:
    """An answer's ``(start, end)`` in Unix seconds from its monotonic stamps (``t0``, ``end``) and the monotonic
    clock's reading ``clock_now`` taken with the wall clock's ``wall_now`` (default: now)."""
    wall = time.time() if wall_now is None else wall_now
    return wall - (clock_now - t0), wall - (clock_now - end)


async def answer_energy(
    http: httpx.AsyncClient,
    sidecar_url: str,
    bounds: tuple[float, float],
    sample_interval_s: float,
    clock: Callable[[], float] = time.time,
) -> AnswerEnergy:
    """Joules over ``bounds`` (Unix s) from the sidecar, after waiting until it has sampled past the end (at most
    :data:`MAX_WAIT_S`); None when it has no figure (pausing :data:`UNAVAILABLE_PAUSE_S` when it says it cannot
    measure energy at all) or cannot be asked (pausing :data:`UNREACHABLE_PAUSE_S`)."""
    wait_s = min(MAX_WAIT_S, bounds[1] + sample_interval_s - clock())
    if wait_s > 0:
        await asyncio.sleep(wait_s)
    try:
        answer = await http.get(f"{sidecar_url}/energy", params={"start": bounds[0], "end": bounds[1]})
        body = answer.json() if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return AnswerEnergy(None, UNREACHABLE_PAUSE_S)
    if not isinstance(body, dict):
        return AnswerEnergy(None, UNREACHABLE_PAUSE_S)
    value = body.get("energy_j")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return AnswerEnergy(float(value))
    return AnswerEnergy(None, UNAVAILABLE_PAUSE_S if not body.get("devices") else 0.0)


@dataclass(frozen=True)
class TurnResult:
    """Outcome of one turn: the answer text shown (maybe partial), its timing, a notice (older turns trimmed,
    max_tokens clamped), or an error; ``bounds``: when the answer streamed (Unix s), for its energy
    (:meth:`ChatBackend.answer_energy`); ``history``: the earlier turns the model saw (the history minus the turns
    trimmed to fit the context; the chat keeps this one)."""

    request_id: str
    answer: str
    timing: Timing | None
    notice: str | None
    error: errors.UiError | None
    status: BackendStatus
    bounds: tuple[float, float] | None = None
    history: list[ChatMessage] = field(default_factory=list)
    trimmed_turns: int = 0


@dataclass(frozen=True)
class Plan:
    """What to send: max_tokens after clamping, the clamp notice, the prompt size; or why nothing is sent."""

    max_tokens: int
    notice: str | None = None
    prompt_tokens: int | None = None
    error: errors.UiError | None = None
    history: list[ChatMessage] = field(default_factory=list)  # the earlier turns that fit
    trimmed_turns: int = 0
    max_model_len: int | None = None


def _joined(*notices: str | None) -> str | None:
    """The notices given, one paragraph each; None when there is none."""
    shown = [n for n in notices if n]
    return "\n\n".join(shown) if shown else None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


class ChatBackend:
    """Process-wide clients for vLLM (one connection pool shared by all chat sessions)."""

    def __init__(
        self,
        settings: Settings,
        http: httpx.AsyncClient | None = None,
        llm: AsyncOpenAI | None = None,
        sidecar: httpx.AsyncClient | None = None,
    ):
        """Clients from ``settings`` (vLLM URL, VLLM_API_KEY, REQUEST_TIMEOUT_S, logs dir); tests pass their own
        ``http``/``llm``/``sidecar``. Both vLLM clients send the key: the OpenAI client as its ``api_key``, the probes
        and ``/tokenize`` as ``Authorization: Bearer``; the sidecar's (an answer's energy) sends none."""
        self.settings = settings
        self.url = settings.vllm_url
        self.timeout_s = settings.request_timeout_s
        self.requests_log = RequestLog.of(settings)
        self.sidecar = sidecar or httpx.AsyncClient(timeout=httpx.Timeout(2.0))  # no vLLM key: not the sidecar's
        self._energy_paused_until = 0.0  # monotonic s: the sidecar cannot measure energy, or could not be reached
        self.http = http or httpx.AsyncClient(
            timeout=httpx.Timeout(self.timeout_s, connect=CONNECT_TIMEOUT_S), headers=settings.vllm_headers
        )
        self.openai = llm or AsyncOpenAI(
            base_url=f"{self.url}/v1",
            api_key=settings.vllm_client_key or "EMPTY",  # the SDK needs a value; vLLM without a key ignores it
            max_retries=0,
            timeout=self.timeout_s,
        )

    async def status(self) -> BackendStatus:
        """Fresh Ready/Loading/Down status with model, version and context length."""
        # the state file of the engine serving now: a blue/green switch moves it to the other slot's
        settings = self.settings
        return await current_status(self.http, self.url, settings.engine_state_file, settings.startup_timeout_s)

    def _finish(
        self, request_id: str, model: str | None, state: StreamState | None, prompt_tokens: int | None,
        error: errors.UiError | None,
    ) -> None:  # fmt: skip
        """Append the turn's ``requests.jsonl`` line (``source="ui"``), timed by the stream's :class:`StreamTimer`
        exactly as the benchmark times its rows (TTFT to the first content or reasoning text, total to the end)."""
        timer = state.timer if state is not None and state.timer.t0 is not None else None
        if timer is not None and timer.prompt_tokens is not None:
            prompt_tokens = timer.prompt_tokens
        status: Status = "cancelled" if error is not None and error.kind == "cancelled" else "error" if error else "ok"
        self.requests_log.append(RequestLogLine(
            ts=now_iso(), source="ui", request_id=request_id, model=model, prompt_tokens=prompt_tokens,
            completion_tokens=timer.completion_tokens if timer else None,
            ttft_ms=_round(timer.ttft_ms if timer else None), total_ms=_round(timer.e2e_ms() if timer else None),
            status=status, error=error.cause if error else None,
        ))  # fmt: skip

    async def run_turn(
        self,
        history: Sequence[ChatMessage],
        user_text: str,
        params: ChatParams,
        on_token: Callable[[str], Awaitable[None]],
        on_notice: Callable[[str], Awaitable[None]] | None = None,
    ) -> TurnResult:
        """Answer ``user_text`` after ``history``, streaming pieces to ``on_token``; logs one line in any case.

        ``on_notice`` receives the clamp notice (max_tokens lowered) before the request is sent, so the reader sees
        it at once rather than under a finished answer.

        Raises:
            asyncio.CancelledError: the user pressed Stop or the chat session disconnected (the cancel message,
                :data:`errors.STOPPED` or :data:`errors.DISCONNECTED`, says which); logged as ``cancelled``, and the
                server request is aborted.
        """
        request_id = f"ui-{uuid.uuid4().hex[:16]}"
        status = await self.status()
        if not status.ready or status.model is None:
            unavailable = errors.backend_unavailable(status, self.url)
            self._finish(request_id, status.model, None, None, unavailable)
            return TurnResult(request_id, "", None, None, unavailable, status, history=list(history))
        model = status.model
        plan = await self._plan(model, list(history), user_text, params, status.max_model_len)
        if plan.error is not None:
            self._finish(request_id, model, None, plan.prompt_tokens, plan.error)
            return TurnResult(request_id, "", None, None, plan.error, status, history=list(history))
        notice = _joined(errors.trim_notice(plan.trimmed_turns, turn_count(plan.history), plan.max_model_len)
                         if plan.trimmed_turns else None, plan.notice)  # fmt: skip
        state = StreamState()
        try:
            if notice is not None and on_notice is not None:
                await on_notice(notice)
            kept = plan.history
            while True:
                messages = build_messages(kept, user_text, params.system_prompt)
                await stream_chat(self.openai, request_kwargs(model, messages, params, plan.max_tokens), on_token,
                                  state)  # fmt: skip
                retry = self._trimmed_after_refusal(state, kept, model)
                if retry is None:
                    break
                kept, state = retry, StreamState()  # vLLM refused the length (no /tokenize to check first)
            trimmed = plan.trimmed_turns + turn_count(plan.history) - turn_count(kept)
            if trimmed > plan.trimmed_turns:
                late = errors.trim_notice(trimmed, turn_count(kept), None)
                notice = _joined(late, plan.notice)
                if on_notice is not None:
                    await on_notice(late)
        except asyncio.CancelledError as exc:
            reason = exc.args[0] if exc.args else None
            self._finish(state.request_id or request_id, model, state, plan.prompt_tokens, errors.cancelled(reason))
            raise
        return await self._result(request_id, model, state, plan, notice, status, kept, trimmed)

    def _trimmed_after_refusal(
        self, state: StreamState, kept: list[ChatMessage], model: str
    ) -> list[ChatMessage] | None:
        """After vLLM refused the request as longer than its context (HTTP 400, nothing streamed) while older turns
        are still sent: the history without its older half (at least one turn), to send again; else None."""
        if state.error is None or state.text or not kept:
            return None
        mapped = errors.map_exception(state.error, model=model, url=self.url, status=None, partial=False,
                                      timeout_s=self.timeout_s)  # fmt: skip
        if mapped.kind != "context_too_long":
            return None
        return drop_oldest_turns(kept, max(1, turn_count(kept) // 2))

    async def _result(
        self, request_id: str, model: str, state: StreamState, plan: Plan, notice: str | None, status: BackendStatus,
        kept: list[ChatMessage], trimmed: int,
    ) -> TurnResult:  # fmt: skip
        """The turn's outcome once its stream ended: the error mapped, the timing, the log line."""
        request_id = state.request_id or request_id
        partial = bool(state.text.strip())
        error: errors.UiError | None = None
        if state.error is not None:
            status = await self.status()  # Loading vs Down after a connection error; a model switch after a 404
            error = errors.map_exception(state.error, model=model, url=self.url, status=status, partial=partial,
                                         timeout_s=self.timeout_s)  # fmt: skip
        elif state.invalid is not None:
            error = errors.malformed_stream(state.invalid, partial=partial)
        elif not state.timer.complete:
            error = errors.stream_cut(partial=partial)
        timer = state.timer
        timing = bounds = None
        if timer.t0 is not None and timer.end_s is not None and error is None:
            prompt_tokens = timer.prompt_tokens if timer.prompt_tokens is not None else plan.prompt_tokens
            split = timer.token_split()
            timing = compute_timing(
                timer.t0, timer.first_s, timer.end_s, prompt_tokens, timer.completion_tokens,
                first_answer_s=timer.first_answer_s, first_reasoning_s=timer.first_reasoning_s,
                reasoning_tokens=split[0] if split else None,
            )  # fmt: skip
            bounds = wall_bounds(timer.t0, timer.end_s, timer.clock(), time.time())
        self._finish(request_id, model, state, plan.prompt_tokens, error)
        return TurnResult(
            request_id, state.text, timing, notice, error, status, bounds, history=kept, trimmed_turns=trimmed
        )

    async def answer_energy(self, result: TurnResult) -> float | None:
        """The answer's energy from the sidecar, J (:func:`answer_energy`); None when not measured, and
        not asked for a while after the sidecar said it cannot measure energy or could not be reached."""
        if result.bounds is None or time.monotonic() < self._energy_paused_until:
            return None
        found = await answer_energy(self.sidecar, self.settings.sidecar_url, result.bounds,
                                    self.settings.gpu_sample_interval_s)  # fmt: skip
        if found.pause_s:
            self._energy_paused_until = time.monotonic() + found.pause_s
        return found.energy_j

    async def _plan(
        self, model: str, history: list[ChatMessage], user_text: str, params: ChatParams, max_model_len: int | None
    ) -> Plan:
        """max_tokens (clamped to UI_MAX_TOKENS and to what fits), its notice, the prompt size from vLLM's token
        count and the earlier turns that fit: the oldest turns are left out (:func:`ui.chat.drop_oldest_turns`)
        until the prompt leaves the answer the room :func:`ui.chat.answer_room_wanted` asks; or the context error
        when the message alone does not fit.

        Without a count (no /tokenize) only UI_MAX_TOKENS applies; if vLLM then refuses the length, older turns are
        trimmed and the request sent again (:meth:`_trimmed_after_refusal`).
        """
        kept, trimmed = history, 0
        while True:
            messages = build_messages(kept, user_text, params.system_prompt)
            counted = await count_tokens(self.http, self.url, model, messages)
            max_len = (counted.max_model_len if counted else None) or max_model_len
            if counted is None or not max_len:
                budget = plan_max_tokens(params.max_tokens, self.settings.ui_max_tokens)
                return Plan(max_tokens=budget.max_tokens, notice=errors.clamp_notice(budget), history=kept)
            room = max_len - counted.count
            if not kept or room >= answer_room_wanted(params.max_tokens, self.settings.ui_max_tokens, max_len):
                break
            kept, trimmed = drop_oldest_turns(kept, 1), trimmed + 1
        problem = check_context(counted.count, max_len, counted.count)  # kept is empty then: the message alone
        if problem is not None:
            error = errors.context_too_long(problem, model)
            return Plan(max_tokens=params.max_tokens, prompt_tokens=counted.count, error=error)
        budget = plan_max_tokens(params.max_tokens, self.settings.ui_max_tokens, counted.count, max_len)
        return Plan(max_tokens=budget.max_tokens, notice=errors.clamp_notice(budget), prompt_tokens=counted.count,
                    history=kept, trimmed_turns=trimmed, max_model_len=max_len)  # fmt: skip

    async def aclose(self) -> None:
        """Close the connection pools."""
        await self.http.aclose()
        await self.sidecar.aclose()
        await self.openai.close()
