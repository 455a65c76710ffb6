"""Chainlit session plumbing: the answer in flight ends with its reader, and Stop leaves one message.

Chainlit (2.12) runs each ``on_message`` as ``session.current_task``. When the websocket session ends (tab closed,
network gone, New Chat) it calls ``on_chat_end`` at once but lets the task run on, so an answer nobody reads would
keep vLLM busy until ``max_tokens``; :func:`cancel_answer` ends it (the HTTP stream closes, vLLM aborts the request).
Its own ``stop`` handler posts "Task manually stopped." before cancelling, next to the app's own "Stopped" answer;
:func:`quiet_stop` is the same handler without that message (Chainlit's ``socket.stop`` minus one line).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from ui.chat_errors import STOPPED

log = logging.getLogger(__name__)


class HasCurrentTask(Protocol):
    """What :func:`cancel_answer` needs of a Chainlit session."""

    current_task: asyncio.Task[Any] | None


def cancel_answer(session: HasCurrentTask, reason: str) -> bool:
    """Cancel the session's running task with ``reason`` as the cancel message (read by the turn to log why).

    Returns:
        True when a running task was cancelled; False when none was running.
    """
    task = session.current_task
    cancelled = task is not None and not task.done() and task.cancel(reason)
    log.info("%s: %s", reason, "answer cancelled" if cancelled else "no answer running")
    return cancelled


async def quiet_stop(sid: str) -> None:
    """Socket.IO ``stop`` handler: cancel the answer (``reason`` :data:`errors.STOPPED`) and run ``@cl.on_stop``,
    without Chainlit's extra "Task manually stopped." message (the answer itself says Stopped)."""
    # Imported here: Chainlit's config module reads (and creates) .chainlit/ in the working folder on import, which
    # only the running app should do; the rest of this module is tested without it.
    from chainlit.config import config
    from chainlit.context import init_ws_context
    from chainlit.session import WebsocketSession

    session = WebsocketSession.get(sid)
    if session is None:
        return
    init_ws_context(session)
    cancel_answer(session, STOPPED)
    if config.code.on_stop:
        await config.code.on_stop()
