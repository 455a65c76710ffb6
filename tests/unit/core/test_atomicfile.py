"""core.atomicfile: whole-file replacement with a temporary file of its own per writer."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from core.atomicfile import atomic_write


def test_writers_of_one_file_never_collide_and_a_reader_sees_a_whole_file(tmp_path: Path) -> None:
    """Two writers of one plan file (two benchmarks, or a thread each) used to share ``plan.tmp``: one renamed the
    other's half-written file or found it gone. Each writer now has its own temporary file."""
    path = tmp_path / "sub" / "plan.json"
    bodies = {name: name * 200_000 for name in ("a", "b")}
    errors: list[BaseException] = []

    def write(body: str) -> None:
        try:
            for _ in range(30):
                atomic_write(path, body)
                assert path.read_text() in bodies.values()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(body,)) for body in bodies.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert [p.name for p in path.parent.iterdir()] == ["plan.json"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_a_failed_rename_leaves_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(src: str, dst: object) -> None:
        raise PermissionError(13, "refused", str(dst))

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(PermissionError):
        atomic_write(tmp_path / "state.json", b"{}")
    assert list(tmp_path.iterdir()) == []
