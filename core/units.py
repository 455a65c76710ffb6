"""Units: one definition of the byte multiples. Fields named ``*_gb`` hold GiB (2**30 bytes), ``*_mb`` MiB."""

from __future__ import annotations

GIB = 1024**3
MIB = 1024**2
