"""Make variables checked against the settings: ``make benchmark CONCURENCY=4`` stops (exit 2) with "did you mean
CONCURRENCY?" instead of running the defaults without a word.

``python -m stack.makevars TARGET NAME ...`` gets the variables given on make's command line. A name close to a
setting's is refused (a typo), another unknown one passed with a note (``HF_HOME``), a setting of another command
refused naming where it goes; the environment is checked too (:func:`core.envtypos.env_typos`).
"""

from __future__ import annotations

import difflib
import sys

from core.envtypos import MAKEFILE_VARIABLES, env_typos, setting_names
from core.knobs.commands import COMMANDS, command, home, where_it_goes

READ_ONLY_BY = {
    "ARGS": ("benchmark-compose", "bench-router", "pin-images"),
    "A": ("compare",), "B": ("compare",), "NAME": ("baseline",), "REPORT": ("baseline",),
    "SINCE": ("logs-errors", "logs-slow", "logs-stats"), "JSON": ("logs-errors", "logs-slow", "logs-stats"),
    "THRESHOLD_MS": ("logs-slow",), "REPEATS": ("bench-engine",), "VARIANTS": ("bench-engine",),
}  # fmt: skip
"""Makefile variables only some targets read (elsewhere they would do nothing)."""

TARGETS = {"benchmark": "benchmark", "sweep": "benchmark", "benchmark-compose": "benchmark", "up": "stack"}
"""make target -> the command view whose settings it takes (``make up`` takes every setting)."""


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
    """Check the command-line variables and the environment; exit 2 with one line per problem, else 0."""
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
