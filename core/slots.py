"""Which of its two slots each local engine replica serves from: the record a blue/green switch flips.

Behind the router on VLLM_PORT (the stack's *front*, :func:`core.replicas.front_in_use`) each local replica K has
two slots, ``a`` and ``b``, each its own supervisord program, port, log and state file (``vllm``/``vllm-b``,
``vllm.log``/``vllm-b.log``, ``engine_state.json``/``engine_state-b.json``). A switch starts the new engine in the
slot that is not serving, puts it behind the router, drains and stops the old one, then records the new slot here:
``RUN_DIR/engine_slots.json`` = ``{"0": "b"}``. Every reader of "the engine" (the UI, the sidecar, ``make status``,
the benchmark) names its files through :attr:`core.knobs.folders_knobs.FolderKnobs.replica_suffix`, which reads this
record, so they all follow the swap. No record (``make up`` writes none, or compose): every replica serves from
``a``. One reader and one writer; pure apart from the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, cast

from core.atomicfile import atomic_write

Slot = Literal["a", "b"]
SLOTS: tuple[Slot, Slot] = ("a", "b")
RECORD_NAME = "engine_slots.json"


def other(slot: Slot) -> Slot:
    """The slot a switch starts the new engine in."""
    return "b" if slot == "a" else "a"


def slot_suffix(slot: Slot) -> str:
    """``""`` for slot ``a`` (the names the stack always had), ``-b`` for slot ``b``."""
    return "" if slot == "a" else "-b"


def record_path(run_dir: Path) -> Path:
    """``RUN_DIR/engine_slots.json``."""
    return run_dir / RECORD_NAME


def read_slots(run_dir: Path) -> dict[int, Slot]:
    """``{replica: slot}`` of the record; empty when there is none or it does not parse (every replica in ``a``)."""
    try:
        data = json.loads(record_path(run_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    out: dict[int, Slot] = {}
    for key, value in data.items():
        if isinstance(key, str) and key.isdigit() and value in SLOTS:
            out[int(key)] = cast(Slot, value)
    return out


def active_slot(run_dir: Path, replica: int = 0) -> Slot:
    """The slot local replica ``replica`` serves from (``a`` without a record)."""
    return read_slots(run_dir).get(replica, "a")


def write_slot(run_dir: Path, replica: int, slot: Slot) -> None:
    """Record that ``replica`` now serves from ``slot`` (atomically: readers see the old record or the new one).

    Raises:
        OSError: RUN_DIR is not writable.
    """
    slots = read_slots(run_dir)
    slots[replica] = slot
    atomic_write(record_path(run_dir), json.dumps({str(k): v for k, v in sorted(slots.items())}) + "\n")


def clear_slots(run_dir: Path) -> None:
    """Forget the record (``make up`` starts every replica in ``a``)."""
    record_path(run_dir).unlink(missing_ok=True)
