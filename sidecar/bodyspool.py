"""Request bodies under hostile load: received to a spool file (memory up to :data:`SPOOL_MEMORY_BYTES`, disk
beyond), counted against the size limit as they arrive, bounded in time, admitted a few large ones at a time, and the
memory of a large one given back to the system afterwards.

The bounds (module constants, stated in ``docs/security.md``): a body must arrive within :data:`BODY_DEADLINE_S`
(a byte a second is cut, 408); at most :data:`LARGE_SPOOLS_AT_ONCE` bodies over :data:`LARGE_BODY_BYTES` are received
at once (disk, ``SIDECAR_MAX_BODY_MB`` each) and at most :data:`LARGE_WRITES_AT_ONCE` are handed to the app at once
(memory: a JSON body of N MiB is parsed in a few times N); the others wait up to :data:`ADMISSION_WAIT_S`, then 503
with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import gc
import tempfile
import time
from dataclasses import dataclass, field
from typing import IO

from starlette.types import Message, Receive

MIB = 1024 * 1024
SPOOL_MEMORY_BYTES = 1 * MIB  # a spooled body stays in memory up to this size, then moves to a temporary file
CHUNK_BYTES = 1 * MIB  # the replayed body is handed to the app in chunks of this size
LARGE_BODY_BYTES = 1 * MIB  # above this a body is "large": admitted through the semaphores below
LARGE_SPOOLS_AT_ONCE = 8  # large bodies being received at once (disk, not memory)
LARGE_WRITES_AT_ONCE = 2  # large bodies handed to the app at once (parsing costs memory)
ADMISSION_WAIT_S = 60.0  # how long a large body waits for its turn before 503
BODY_DEADLINE_S = 60.0  # the whole body must arrive within this (64 MiB: at least ~1.1 MB/s)
RETRY_AFTER_S = 5  # the Retry-After of a 503 for a full queue


class Refused(Exception):
    """The body is refused while it arrives: ``status`` (408, 413, 503), the ``detail`` text, extra ``headers``."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = headers or {}


class ClientGone(Exception):
    """The client disconnected before its body was complete."""


@dataclass
class Admission:
    """The two queues of large bodies (made in the serving event loop)."""

    spools: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(LARGE_SPOOLS_AT_ONCE))
    writes: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(LARGE_WRITES_AT_ONCE))


async def acquire(semaphore: asyncio.Semaphore, what: str) -> None:
    """Wait up to :data:`ADMISSION_WAIT_S` for ``semaphore``; :class:`Refused` 503 with ``Retry-After`` after."""
    try:
        await asyncio.wait_for(semaphore.acquire(), ADMISSION_WAIT_S)
    except TimeoutError:
        raise Refused(
            503, f"too many large {what} at once: try again in {RETRY_AFTER_S} s",
            {"Retry-After": str(RETRY_AFTER_S)},
        ) from None


class SpooledBody:
    """A request body received whole (to memory up to :data:`SPOOL_MEMORY_BYTES`, then to a temporary file)."""

    def __init__(self) -> None:
        self.file: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES)  # noqa: SIM115
        self.size_bytes = 0

    async def receive_all(
        self, receive: Receive, limit_bytes: int, admission: Admission, declared_bytes: int | None
    ) -> bool:
        """Read every ``http.request`` message of ``receive`` into the spool; True when a large-spool slot was
        taken (the caller releases ``admission.spools``).

        Raises:
            Refused: 413 past ``limit_bytes``, 408 past :data:`BODY_DEADLINE_S`, 503 when the large-spool queue
                stays full.
            ClientGone: the client disconnected first.
        """
        deadline = time.monotonic() + BODY_DEADLINE_S
        slot = False
        if declared_bytes is not None and declared_bytes > LARGE_BODY_BYTES:
            await acquire(admission.spools, "request bodies")
            slot = True
        try:
            more = True
            while more:
                left_s = deadline - time.monotonic()
                try:
                    message = await asyncio.wait_for(receive(), max(left_s, 0.001))
                except TimeoutError:
                    raise Refused(408, f"request body not complete within {BODY_DEADLINE_S:g} s") from None
                if message["type"] == "http.disconnect":
                    raise ClientGone
                chunk = message.get("body", b"")
                self.size_bytes += len(chunk)
                if self.size_bytes > limit_bytes:
                    raise Refused(413, f"request body larger than {limit_bytes / MIB:g} MiB (SIDECAR_MAX_BODY_MB)")
                if not slot and self.size_bytes > LARGE_BODY_BYTES:
                    await acquire(admission.spools, "request bodies")
                    slot = True
                self.file.write(chunk)
                more = bool(message.get("more_body", False))
        except BaseException:
            if slot:
                admission.spools.release()
            raise
        self.file.seek(0)
        return slot

    def replay(self, receive: Receive) -> Receive:
        """A ``receive`` handing the spooled body to the app in :data:`CHUNK_BYTES` chunks, then the client's own
        messages (a disconnect)."""
        done = False

        async def replayed() -> Message:
            nonlocal done
            if done:
                return await receive()
            chunk = self.file.read(CHUNK_BYTES)
            done = self.file.tell() >= self.size_bytes
            return {"type": "http.request", "body": chunk, "more_body": not done}

        return replayed

    def close(self) -> None:
        """Delete the spool (memory or file)."""
        self.file.close()


def _malloc_trim() -> None:
    """glibc's ``malloc_trim(0)`` where it exists (no-op elsewhere)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return
    libc = ctypes.CDLL(name)
    trim = getattr(libc, "malloc_trim", None)
    if trim is not None:
        trim(0)


def give_back_memory() -> None:
    """After a large body: collect cycles and return freed heap pages to the system (glibc ``malloc_trim``), so
    the RSS of the sidecar falls back instead of staying at its peak."""
    gc.collect()
    with contextlib.suppress(OSError):  # not glibc
        _malloc_trim()
