"""Which of its two slots (``a``/``b``) each local replica serves from: ``RUN_DIR/engine_slots.json``
(``{"0": "b"}``), flipped by a blue/green switch. No record: every replica serves from ``a``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, cast

from core.atomicfile import atomic_write, read_json_object

Slot = Literal["a", "b"]
SLOTS: tuple[Slot, Slot] = ("a", "b")


def other(slot: Slot) -> Slot:
    """The slot a switch starts the new engine in."""
    return "b" if slot == "a" else "a"


def slot_suffix(slot: Slot) -> str:
    """``""`` for slot ``a`` (the names the stack always had), ``-b`` for slot ``b``."""
    return "" if slot == "a" else "-b"


def record_path(run_dir: Path) -> Path:
    """``RUN_DIR/engine_slots.json``."""
    return run_dir / "engine_slots.json"


def read_slots(run_dir: Path) -> dict[int, Slot]:
    """``{replica: slot}`` of the record; empty when there is none or it does not parse (every replica in ``a``)."""
    data = read_json_object(record_path(run_dir)) or {}
    return {int(key): cast(Slot, value) for key, value in data.items() if key.isdigit() and value in SLOTS}


def active_slot(run_dir: Path, replica: int = 0) -> Slot:
    """The slot local replica ``replica`` serves from (``a`` without a record)."""
    return read_slots(run_dir).get(replica, "a")


def write_slot(run_dir: Path, replica: int, slot: Slot) -> None:
    """Record atomically that ``replica`` now serves from ``slot``.

    Raises:
        OSError: RUN_DIR is not writable.
    """
    slots = read_slots(run_dir)
    slots[replica] = slot
    atomic_write(record_path(run_dir), json.dumps({str(k): v for k, v in sorted(slots.items())}) + "\n")


def clear_slots(run_dir: Path) -> None:
    """Forget the record (``make up`` starts every replica in ``a``)."""
    record_path(run_dir).unlink(missing_ok=True)
