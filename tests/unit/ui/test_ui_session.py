"""The chat session's answer ends with its reader: cancelling Chainlit's running task with a reason."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from ui import chat_errors as errors
from ui.session import cancel_answer


@dataclass
class Session:
    """The one attribute of Chainlit's ``WebsocketSession`` that :func:`cancel_answer` uses."""

    current_task: asyncio.Task[Any] | None = None


def test_running_answer_is_cancelled_with_the_reason() -> None:
    """A running task is cancelled, and the reason arrives as the CancelledError's message."""

    async def go() -> str | None:
        started = asyncio.Event()

        async def answer() -> None:
            started.set()
            await asyncio.sleep(3600)

        session = Session(asyncio.create_task(answer()))
        await started.wait()
        assert cancel_answer(session, errors.DISCONNECTED) is True
        try:
            await session.current_task  # type: ignore[misc]
        except asyncio.CancelledError as exc:
            return exc.args[0] if exc.args else None
        return "not cancelled"

    assert asyncio.run(go()) == errors.DISCONNECTED


def test_nothing_to_cancel_without_a_running_answer() -> None:
    """No task, or a finished one, is left alone."""

    async def go() -> tuple[bool, bool]:
        done = asyncio.create_task(asyncio.sleep(0))
        await done
        return cancel_answer(Session(None), errors.STOPPED), cancel_answer(Session(done), errors.STOPPED)

    assert asyncio.run(go()) == (False, False)
