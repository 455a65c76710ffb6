"""The synthetic model's build marker (``synthetic_model.json``) read whatever shape it has: only a JSON object with
the same spec hash means built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.synthetic import MARKER, is_built


@pytest.mark.parametrize(("marker", "built"), [
    ({"spec_hash": "abc"}, True),
    ({"spec_hash": "other"}, False),
    ({}, False),
    (["spec_hash", "abc"], False),  # before: TypeError out of `make up`
    ("abc", False),
    (None, False),
])  # fmt: skip
def test_a_marker_of_any_shape_is_read_without_raising(tmp_path: Path, marker: object, built: bool) -> None:
    """A list, a string or null in the marker is "not built" (rebuilt), never an exception."""
    (tmp_path / MARKER).write_text(json.dumps(marker))
    assert is_built(tmp_path, "abc") is built
    (tmp_path / MARKER).write_text("{cut")
    assert is_built(tmp_path, "abc") is False
