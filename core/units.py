"""Units: one definition of the byte multiples. Fields named ``*_gb`` hold GiB (2**30 bytes), ``*_mb`` MiB."""

from __future__ import annotations

GIB = 1024**3
MIB = 1024**2


def quantity(value: float | None, unit: str = "") -> str:
    """``0.412 J``, ``12.3 W``, ``5,120 J`` (three significant digits, whole numbers from 100 on), ``n/a``."""
    if value is None:
        return "n/a"
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return f"{text} {unit}".rstrip()


def usd(value: float | None) -> str:
    """``$1.23``, ``$0.000412`` (three significant digits below a cent), ``n/a``."""
    if value is None:
        return "n/a"
    return f"${value:,.2f}" if value >= 0.01 else f"${value:.3g}"


def pct(value: float | None) -> str:
    """``+12%`` (whole percent from 10 % up), ``+1.5%`` below; ``n/a`` for None."""
    if value is None:
        return "n/a"
    return f"{value:+.0f}%" if abs(value) >= 10 else f"{value:+.1f}%"
