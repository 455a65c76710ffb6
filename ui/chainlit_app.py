"""Chainlit wiring of the chat UI (run it with ``python -m ui.chainlit_launch``); the logic is in sibling modules."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import logging
from typing import Any

import chainlit as cl
from chainlit.input_widget import NumberInput, Slider, TextInput
from chainlit.server import sio

from core.settings import get_settings
from ui import chat_errors as errors
from ui.answer_view import TokenCoalescer, answer_markdown, notice_markdown
from ui.chat import STARTERS, ChatMessage, ChatParams, append_turn, params_from_values
from ui.session import cancel_answer, quiet_stop
from ui.status import BackendStatus, header_markdown
from ui.turn import ChatBackend

for noisy in ("httpx", "httpx2"):  # one INFO line per status probe otherwise
    logging.getLogger(noisy).setLevel(logging.WARNING)

settings = get_settings()
backend = ChatBackend(settings)
DEFAULT_PARAMS = ChatParams(
    temperature=settings.temperature,
    top_p=1.0,
    max_tokens=min(settings.max_tokens, settings.ui_max_tokens),
    system_prompt=settings.ui_system_prompt,
)
SIDEBAR_TITLE = "vLLM status"
sio.on("stop")(quiet_stop)  # Stop leaves one message (the answer's own), not Chainlit's "Task manually stopped." too


async def show_status(status: BackendStatus) -> None:
    """Draw the header (model, backend, status) in the side panel when it changed."""
    if cl.user_session.get("status") == status:
        return
    cl.user_session.set("status", status)
    header = header_markdown(status)
    # A new key per content: with one fixed key Chainlit's frontend keeps the first elements it was sent.
    await cl.ElementSidebar.set_elements([cl.Text(name="status", content=header)], key=f"status-{hash(header)}")
    await cl.ElementSidebar.set_title(SIDEBAR_TITLE)


async def follow_status() -> None:
    """Re-probe vLLM periodically so the header follows Loading -> Ready, Down, and model switches."""
    while True:
        await asyncio.sleep(settings.ui_status_interval_s)
        with contextlib.suppress(Exception):
            await show_status(await backend.status())


@cl.set_starters
async def starters(user: cl.User | None = None) -> list[cl.Starter]:
    """Starter questions, the seed's first."""
    return [cl.Starter(label=label, message=message) for label, message in STARTERS]


@cl.on_chat_start
async def start() -> None:
    """New chat: empty history, the settings form, the header and its refresher."""
    cl.user_session.set("history", [])
    cl.user_session.set("params", DEFAULT_PARAMS)
    status = await backend.status()
    await cl.ChatSettings(
        [
            TextInput(id="system_prompt", label="System prompt", initial=DEFAULT_PARAMS.system_prompt, multiline=True),
            Slider(id="temperature", label="Temperature", initial=DEFAULT_PARAMS.temperature, min=0, max=2, step=0.1),
            Slider(id="top_p", label="top_p", initial=DEFAULT_PARAMS.top_p, min=0.05, max=1, step=0.05),
            NumberInput(
                id="max_tokens",
                label="max_tokens",
                initial=DEFAULT_PARAMS.max_tokens,
                description=(
                    f"Largest answer, tokens: at most {settings.ui_max_tokens:,} (UI_MAX_TOKENS) and what fits in "
                    f"the context ({status.max_model_len or '?'} tokens); a larger value is lowered when you send."
                ),
            ),
        ]
    ).send()
    await show_status(status)
    cl.user_session.set("status_task", asyncio.create_task(follow_status()))


@cl.on_settings_update
async def update_settings(values: dict[str, Any]) -> None:
    """Keep the chat's sampling parameters and system prompt."""
    cl.user_session.set("params", params_from_values(values, DEFAULT_PARAMS))


@cl.on_message
async def answer(message: cl.Message) -> None:
    """Stream the answer to ``message``; show timing (or the error) under it."""
    history: list[ChatMessage] = cl.user_session.get("history") or []
    params: ChatParams = cl.user_session.get("params") or DEFAULT_PARAMS
    reply = cl.Message(content="")
    stream = TokenCoalescer(reply.stream_token)
    notice: str | None = None

    async def show_notice(text: str) -> None:
        nonlocal notice
        notice = text
        await reply.stream_token(notice_markdown(text) + "\n\n")  # at once, before the answer's first token

    try:
        result = await backend.run_turn(history, message.content, params, stream.push, on_notice=show_notice)
    except asyncio.CancelledError as exc:
        reply.content = answer_markdown(stream.text, None, notice, errors.cancelled(exc.args[0] if exc.args else None))
        await reply.send()
        raise
    await show_status(result.status)
    # the turns the model saw: those trimmed to fit the context (result.notice says so) stay out from now on
    cl.user_session.set("history", append_turn(result.history, message.content, result.answer))
    reply.content = answer_markdown(result.answer, result.timing, result.notice, result.error)
    await reply.send()
    energy_j = await backend.answer_energy(result)  # after the answer is shown: the sidecar samples past its end
    if energy_j is not None and result.timing is not None:
        timing = dataclasses.replace(result.timing, energy_j=energy_j)
        reply.content = answer_markdown(result.answer, timing, result.notice, None)
        await reply.update()


@cl.on_chat_end
async def end() -> None:
    """The reader left (tab closed, network gone, New Chat): cancel the answer in flight, so vLLM aborts it, and
    the header refresher."""
    cancel_answer(cl.context.session, errors.DISCONNECTED)
    task = cl.user_session.get("status_task")
    if task is not None:
        task.cancel()


if settings.ui_password:
    password = settings.ui_password

    @cl.password_auth_callback
    async def login(username: str, given_password: str) -> cl.User | None:
        """Password login, enabled when UI_PASSWORD is set (constant-time compare)."""
        user_ok = hmac.compare_digest(username.encode(), settings.ui_username.encode())
        if user_ok and hmac.compare_digest(given_password.encode(), password.encode()):
            return cl.User(identifier=username, metadata={"provider": "password"})
        return None
