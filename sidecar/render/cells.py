"""Cell formatting shared by every table a human reads (pure): one way to write a number with its unit."""

from __future__ import annotations

from typing import Any

Row = tuple[str, str]


def fmt(value: Any, unit: str = "", digits: int = 2) -> str:
    """``1.23 GB`` style; ``n/a`` for None; integers and strings as they are."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    text = f"{value:.{digits}f}" if isinstance(value, float) else str(value)
    return f"{text} {unit}".rstrip()
