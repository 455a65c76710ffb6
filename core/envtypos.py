"""Make variables checked against the settings: ``make benchmark CONCURENCY=4`` stops (exit 2) with "did you mean
CONCURRENCY?" instead of running the defaults without a word.

``python -m stack.makevars TARGET NAME ...``: the Makefile passes the names of the variables given on make's command
line (``$(origin V)`` is ``command line``). An upper-case name that is no setting and no variable of the Makefile
is refused when it is close to a setting's name (a typo), and passed through with a note otherwise (``HF_HOME``); a
setting of another command is refused naming where it goes (``make benchmark KV_CACHE_GB=4``).

The environment is checked too (:func:`env_typos`: ``REPLICA=2 make up``, ``CONCURENCY=4 ./run_benchmark.sh``):
only a name one typo away from a setting's (two for names of 8 characters or more) is refused, so the many other
variables of a shell (``PATH``, ``HF_HOME``, vLLM's own ``VLLM_*``) pass untouched.
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Mapping

from core.knobs.commands import COMMANDS, command, home, where_it_goes
from core.settings import Settings

MAKEFILE_VARIABLES = frozenset(
    {"A", "B", "NAME", "REPORT", "ARGS", "SINCE", "JSON", "THRESHOLD_MS", "REPEATS", "VARIANTS", "PYTEST_ARGS",
     "APP_ENV_FILE", "EXTERNAL_VLLM_URL", "VLLM_TENSOR_PARALLEL_SIZE", "PUBLISH_HOST", "BUILD_CA_DIR", "SHELL"}
)  # fmt: skip
"""Variables the Makefile and the compose files read themselves (no settings)."""

READ_ONLY_BY = {
    "ARGS": ("benchmark-compose", "bench-router", "pin-images"),
    "A": ("compare",), "B": ("compare",), "NAME": ("baseline",), "REPORT": ("baseline",),
    "SINCE": ("logs-errors", "logs-slow", "logs-stats"), "JSON": ("logs-errors", "logs-slow", "logs-stats"),
    "THRESHOLD_MS": ("logs-slow",), "REPEATS": ("bench-engine",), "VARIANTS": ("bench-engine",),
}  # fmt: skip
"""Makefile variables only some targets read: given to another checked target they would do nothing (``make
benchmark ARGS="--concurrency 1"`` ran the default 50 users)."""

TARGETS = {"benchmark": "benchmark", "sweep": "benchmark", "benchmark-compose": "benchmark", "up": "stack"}
"""make target -> the command view whose settings it takes (``make up`` takes every setting)."""


def setting_names() -> dict[str, str]:
    """Every settings variable (aliases included) -> its field."""
    names: dict[str, str] = {}
    for name, info in Settings.model_fields.items():
        alias = info.validation_alias
        choices = getattr(alias, "choices", None) or [name]
        for choice in choices:
            if isinstance(choice, str):
                names[choice.upper()] = name
    return names


def typo_distance(a: str, b: str, bound: int | None = None) -> int:
    """Edits (insert, delete, replace, swap of two neighbours) between ``a`` and ``b`` (optimal string alignment).
    With ``bound``, any distance above it is returned as ``bound + 1`` as soon as a row of the table shows it (every
    command checks its whole environment at start-up: most names are far from every setting after a few letters)."""
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
    """The setting variable ``name`` looks like a typo of (one edit away; two for names of 8+ characters), or None:
    not upper case, a setting itself, a Makefile variable, the plural of a setting (``MODELS``: another program's
    list far more often than a typo of ``MODEL``), or like none of ours."""
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
    """One line per environment variable (default ``os.environ``; ``skip``: names already judged) that looks like a
    misspelt setting: ``REPLICA is no setting: did you mean REPLICAS? ...``."""
    known = setting_names()
    out = []
    for name in sorted((os.environ if environ is None else environ).keys() - skip):
        near = near_setting(name, known)
        if near:
            out.append(f"environment variable {name} is no setting: did you mean {near}? Set {near} instead (or "
                       f"unset {name} if it is meant for another program).")  # fmt: skip
    return out


def problems(target: str, variables: list[str]) -> tuple[list[str], list[str]]:
    """``(errors, notes)`` for the command-line variables of ``make target``: a misspelt setting or one of another
    command is an error; an unknown name not close to any setting is a note."""
    view = TARGETS.get(target)
    known = setting_names()
    errors: list[str] = []
    notes: list[str] = []
    for variable in variables:
        readers = READ_ONLY_BY.get(variable, (target,))
        if target in TARGETS and target not in readers:
            hint = ("give the benchmark's flags as settings (CONCURRENCY=1) or run ./run_benchmark.sh --concurrency 1"
                    if TARGETS[target] == "benchmark" else "give settings as VARIABLE=value")  # fmt: skip
            errors.append(f"{variable} is not read by make {target} (only by make {', '.join(readers)}): {hint}")
            continue
        if not variable.isupper() or variable in MAKEFILE_VARIABLES:
            continue
        field = known.get(variable)
        if field is None:
            near = difflib.get_close_matches(variable, sorted(known), n=1, cutoff=0.8)
            if near:
                errors.append(f"{variable} is no setting of make {target}: did you mean {near[0]}?")
            else:
                notes.append(f"{variable} is no setting; passed on to the environment as it is")
            continue
        if view is None or view == "stack":
            continue
        owner = home(field)
        if owner is not None and owner.key != view and field not in command(view).fields:
            flag = f"--{field.replace('_', '-')}"
            errors.append(f"{variable} is not read by make {target}: {where_it_goes(field, flag, variable, None)}")
    return errors, notes


def main(argv: list[str] | None = None) -> int:
    """Check the command-line variables and the environment; exit 2 with one line per problem, else 0 (notes
    printed)."""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(f"usage: python -m stack.makevars TARGET [NAME ...] (targets: {', '.join(TARGETS)}; views: "
              f"{', '.join(c.key for c in COMMANDS)})", file=sys.stderr)  # fmt: skip
        return 2
    errors, notes = problems(args[0], args[1:])
    errors += env_typos(skip=frozenset(args[1:]))  # make puts command-line variables in the environment too
    for note in notes:
        print(f"[INFO] {note}")
    for error in errors:
        print(f"[ERROR] {error}", file=sys.stderr)
    return 2 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
