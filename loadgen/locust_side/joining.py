"""Load workers on other hosts joining a benchmark (pure; the messaging is :mod:`loadgen.locust_side.remote`).

- **Who may join**: the worker answers the master's nonce with ``HMAC-SHA256(token, nonce|client id)`` (:func:`proof`,
  checked in constant time by :func:`verify`), proving the sidecar token without sending it.
- **Clocks**: each challenge is an NTP-style probe, ``offset = tw − (t0 + t1) / 2`` (worker minus master, off by at
  most half the round trip); the shortest of :data:`PROBES` round trips wins. Latencies need no correction; rows'
  Unix times reach the master as ``t − offset``, and the worker starts its schedule at ``start_at + offset``.
- **Rows** travel in batches (:class:`RowBatcher`), the last before the worker's "done" on the same connection.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from core.records import RequestRecord

PROBES = 3
BATCH_ROWS = 200
BATCH_S = 0.25


def host_name(configured: str | None) -> str:
    """The name this host's rows carry: LOAD_HOST_NAME, else the host name."""
    return configured or socket.gethostname()


def nonce() -> str:
    """A fresh challenge (128 random bits, hex)."""
    return secrets.token_hex(16)


def proof(token: str, challenge: str, client_id: str) -> str:
    """The worker's answer to ``challenge``: HMAC-SHA256 over the challenge and its client id, keyed by the token."""
    return hmac.new(token.encode(), f"{challenge}|{client_id}".encode(), hashlib.sha256).hexdigest()


def verify(token: str, challenge: str, client_id: str, answer: str) -> bool:
    """Whether ``answer`` proves the token for this challenge and client (constant-time comparison)."""
    return hmac.compare_digest(proof(token, challenge, client_id), str(answer))


@dataclass(frozen=True)
class ClockProbe:
    """One probe: the master's send (``t0``) and receive (``t1``) times, the worker's answer time (``tw``); Unix s."""

    t0: float
    tw: float
    t1: float

    @property
    def rtt_s(self) -> float:
        """Round trip, s."""
        return self.t1 - self.t0

    @property
    def offset_s(self) -> float:
        """The worker's clock minus the master's, s (error at most ``rtt_s / 2``)."""
        return self.tw - (self.t0 + self.t1) / 2


def best_offset(probes: Sequence[ClockProbe]) -> ClockProbe:
    """The probe with the shortest round trip (the tightest bound on the offset).

    Raises:
        ValueError: no probe.
    """
    if not probes:
        raise ValueError("no clock probe")
    return min(probes, key=lambda p: p.rtt_s)


class RowBatcher:
    """Rows (JSON lines) handed to ``send(rows)`` (one Locust message) in batches of at most :data:`BATCH_ROWS` rows
    or :data:`BATCH_S` apart; ``clock``: monotonic seconds."""

    def __init__(self, send: Callable[[list[str]], None], clock: Callable[[], float]) -> None:
        self._send = send
        self._clock = clock
        self._rows: list[str] = []
        self._since = clock()
        self.sent = 0

    def add(self, row: str) -> None:
        """Queue one row; a full batch, or one older than :data:`BATCH_S`, is sent at once."""
        if not self._rows:
            self._since = self._clock()
        self._rows.append(row)
        if len(self._rows) >= BATCH_ROWS or self._clock() - self._since >= BATCH_S:
            self.flush()

    def due(self) -> bool:
        """Rows are waiting longer than :data:`BATCH_S` (a ticker flushes them)."""
        return bool(self._rows) and self._clock() - self._since >= BATCH_S

    def flush(self) -> None:
        """Send every queued row (nothing when none)."""
        if self._rows:
            rows, self._rows = self._rows, []
            self._send(rows)
            self.sent += len(rows)


def master_time_row(row_json: str, offset_s: float) -> str:
    """A row's Unix times moved from the worker's clock to the master's (``started_at``, ``scheduled_at``)."""
    record = RequestRecord.model_validate_json(row_json)
    update: dict[str, float] = {"started_at": record.started_at - offset_s}
    if record.scheduled_at is not None:
        update["scheduled_at"] = record.scheduled_at - offset_s
    return record.model_copy(update=update).model_dump_json()
