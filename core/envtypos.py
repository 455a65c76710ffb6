"""Typos of setting names: a variable one typo (two from 8 characters) from a setting's is refused with
"did you mean ...?"; other variables pass. Every command checks its environment with :func:`env_typos`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from core.settings import Settings, env_names

MAKEFILE_VARIABLES = frozenset(
    {"A", "B", "NAME", "REPORT", "ARGS", "SINCE", "JSON", "THRESHOLD_MS", "REPEATS", "VARIANTS", "PYTEST_ARGS",
     "APP_ENV_FILE", "EXTERNAL_VLLM_URL", "VLLM_TENSOR_PARALLEL_SIZE", "PUBLISH_HOST", "BUILD_CA_DIR", "SHELL"}
)  # fmt: skip
"""Variables the Makefile and the compose files read themselves (no settings)."""


def setting_names() -> dict[str, str]:
    """Every settings variable (aliases included) -> its field."""
    return {env: name for name, info in Settings.model_fields.items() for env in env_names(name, info)}


def typo_distance(a: str, b: str, bound: int | None = None) -> int:
    """Optimal string alignment distance of ``a`` and ``b``; above ``bound`` returns ``bound + 1`` early."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], prev2[j - 2] + 1)
        if bound is not None and min(row) > bound and (not prev or min(prev) > bound):
            return bound + 1  # a swap reaches back two rows: both above the bound, no later cell can come back
        prev2, prev = prev, row
    return prev[-1] if bound is None else min(prev[-1], bound + 1)


def near_setting(name: str, known: Mapping[str, str] | None = None) -> str | None:
    """The setting variable ``name`` is a typo of, or None (not one, or a setting, make variable or plural)."""
    known = setting_names() if known is None else known
    if not name.isupper() or name in known or name in MAKEFILE_VARIABLES or len(name) < 4:
        return None
    if name.endswith("S") and name[:-1] in known:
        return None  # a plural (MODELS, SEEDS, DATASETS) is another program's list more often than our typo
    limit = 1 if len(name) < 8 else 2
    # names whose lengths differ by more than the limit are more edits apart: only the others are measured (every
    # command checks its whole environment at start-up, so this runs for each variable of the user's shell)
    near = [
        (distance, k)
        for k in known
        if abs(len(k) - len(name)) <= limit and (distance := typo_distance(name, k, limit)) <= limit
    ]
    return min(near)[1] if near else None


def env_typos(environ: Mapping[str, str] | None = None, skip: frozenset[str] = frozenset()) -> list[str]:
    """``REPLICA is no setting: did you mean REPLICAS? ...`` per misspelt variable of ``env`` not in ``skip``."""
    known = setting_names()
    out = []
    for name in sorted((os.environ if environ is None else environ).keys() - skip):
        near = near_setting(name, known)
        if near:
            out.append(f"environment variable {name} is no setting: did you mean {near}? Set {near} instead (or "
                       f"unset {name} if it is meant for another program).")  # fmt: skip
    return out
