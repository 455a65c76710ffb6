"""Make variables checked against the settings: ``make benchmark CONCURENCY=4`` stops (exit 2) with "did you mean
CONCURRENCY?" instead of running the defaults without a word.

``python -m core.makevars TARGET NAME ...``: the Makefile passes the names of the variables given on make's command
line (``$(origin V)`` is ``command line``). An upper-case name that is no setting and no variable of the Makefile
is refused when it is close to a setting's name (a typo), and passed through with a note otherwise (``HF_HOME``); a
setting of another command is refused naming where it goes (``make benchmark KV_CACHE_GB=4``).
"""

from __future__ import annotations

import difflib
import sys

from core.knobs.commands import COMMANDS, command, home, where_it_goes
from core.settings import Settings

MAKEFILE_VARIABLES = frozenset(
    {"A", "B", "NAME", "REPORT", "ARGS", "SINCE", "JSON", "THRESHOLD_MS", "REPEATS", "VARIANTS", "PYTEST_ARGS",
     "APP_ENV_FILE", "EXTERNAL_VLLM_URL", "VLLM_TENSOR_PARALLEL_SIZE", "PUBLISH_HOST", "BUILD_CA_DIR", "SHELL"}
)  # fmt: skip
"""Variables the Makefile and the compose files read themselves (no settings)."""

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


def problems(target: str, variables: list[str]) -> tuple[list[str], list[str]]:
    """``(errors, notes)`` for the command-line variables of ``make target``: a misspelt setting or one of another
    command is an error; an unknown name not close to any setting is a note."""
    view = TARGETS.get(target)
    known = setting_names()
    errors: list[str] = []
    notes: list[str] = []
    for variable in variables:
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
    """Check; exit 2 with one line per problem, else 0 (notes printed)."""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(f"usage: python -m core.makevars TARGET [NAME ...] (targets: {', '.join(TARGETS)}; views: "
              f"{', '.join(c.key for c in COMMANDS)})", file=sys.stderr)  # fmt: skip
        return 2
    errors, notes = problems(args[0], args[1:])
    for note in notes:
        print(f"[INFO] {note}")
    for error in errors:
        print(f"[ERROR] {error}", file=sys.stderr)
    return 2 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
