"""Command-line flags generated from the settings object: every knob has one definition, its field.

``--concurrency 32`` sets ``concurrency``; flags win over the environment and ``.env``. Each command shows the knobs of
its view (:mod:`core.knobs.commands`); another command's knob exits 2 naming where it goes. ``json_schema_extra``:
``cli`` (extra names, or False: environment only), ``cli_flags`` (replacing names), ``cli_const`` (bare flag's value).
``--max-concurrency`` keeps ``vllm bench serve``'s meaning: MAX_IN_FLIGHT with a rate, else CONCURRENCY.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import UnionType
from typing import Any, NoReturn, Union, get_args, get_origin

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from core.envtypos import env_typos
from core.knobs.commands import Command, where_it_goes
from core.settings import PROJECT_ROOT, Settings, describe_validation_error, env_names

MAX_CONCURRENCY = "--max-concurrency"
"""vllm bench serve's flag: MAX_IN_FLIGHT with a rate (or an open-loop sweep), else CONCURRENCY."""


def _extra(info: FieldInfo) -> dict[str, Any]:
    extra = info.json_schema_extra
    return extra if isinstance(extra, dict) else {}


def flag_fields() -> Iterator[tuple[str, FieldInfo]]:
    """Settings fields that have flags (everything but secrets and internal fields)."""
    for name, info in Settings.model_fields.items():
        if info.repr is not False and _extra(info).get("cli") is not False:
            yield name, info


def flags_of(name: str, info: FieldInfo) -> list[str]:
    """``--rate`` plus the field's aliases (``--request-rate``); ``cli_flags`` replaces the whole list."""
    extra = _extra(info)
    if extra.get("cli_flags"):
        return [str(flag) for flag in extra["cli_flags"]]
    return [f"--{name.replace('_', '-')}", *(str(a) for a in extra.get("cli") or [])]


def shown_default(info: FieldInfo) -> str:
    """The default as help and the reference show it: the field's ``shown_default``, else ``unset`` or the value
    (folders relative to the project)."""
    value = _extra(info).get("shown_default") or info.get_default(call_default_factory=True)
    if value is None or value == {} or value == "" or value == []:
        return "unset"
    if isinstance(value, Path) and value.is_relative_to(PROJECT_ROOT):
        return str(value.relative_to(PROJECT_ROOT))
    return str(value)


def is_bool(info: FieldInfo) -> bool:
    """An on/off knob (``--flag/--no-flag``)."""
    return info.annotation is bool or bool in get_args(info.annotation)


HELP_WIDTH = 120
"""Columns of ``--help``: the width the descriptions (module docstrings) are wrapped to."""

SHORT_HELP: dict[str, str] = {
    # one --help line for knobs whose first clause would wrap at 120 columns or says less than this line (the
    # whole description is in docs/reference.md)
    "tokenizer": "Model folder sizing prompts without /tokenize",
    "think_time": "Pause before each next turn, e.g. exponential:2s",
    "trace": "Replay this BurstGPT CSV / Mooncake JSONL trace",
    "slo_attainment_pct": "A sweep point's least share in SLO, %",
    "gate_threshold_pct": "Gate: largest worse change, %",
    "client_overhead_max_pct": "Flag a client adding more than this, %",
    "profile": "Torch-profile the measured window",
    "price_per_hour": "Hardware price, USD/h: 2.5/gpu or 12/host",
    "drain_s": "After DURATION, time to finish, s",
    "server_down_s": "End the run after this long of connection failures, s",
    "idle_wait_s": "Wait up to this long for a busy vLLM, s",
}


def short_help(name: str, info: FieldInfo) -> str:
    """The first clause of a field's description, or its :data:`SHORT_HELP` line."""
    if name in SHORT_HELP:
        return SHORT_HELP[name]
    text = info.description or name.replace("_", " ")
    bare = re.sub(r"\s\([^()]*\)", "", text)
    return re.split(r"(?<!e\.g)\.\s|;\s", bare, maxsplit=1)[0].rstrip(".;")


def _metavar(info: FieldInfo) -> str:
    union = get_origin(info.annotation) in (Union, UnionType)
    kinds = set(get_args(info.annotation)) if union else {info.annotation}
    if int in kinds and float not in kinds:
        return "N"
    if float in kinds:
        return "X"
    if Path in kinds:
        return "PATH"
    return "TEXT"


def _knob_flags() -> dict[str, tuple[str, FieldInfo]]:
    """Every flag of every knob (``--no-x`` of on/off ones too) -> (field, info)."""
    table: dict[str, tuple[str, FieldInfo]] = {}
    for name, info in flag_fields():
        for flag in flags_of(name, info):
            table[flag] = (name, info)
            if is_bool(info):
                table["--no-" + flag.removeprefix("--")] = (name, info)
    table[MAX_CONCURRENCY] = ("concurrency", Settings.model_fields["concurrency"])
    return table


class CliError(ValueError):
    """A flag or an environment variable has a bad value; the message names each one."""


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """One line per flag (``--rate, --request-rate X``), help filled to 120 columns whatever the terminal."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=30, width=HELP_WIDTH)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n".join(textwrap.fill(part, width, initial_indent=indent, subsequent_indent=indent,
                                       break_on_hyphens=False, break_long_words=False)
                         for part in text.splitlines())  # fmt: skip

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings or action.nargs == 0:
            return super()._format_action_invocation(action)
        return ", ".join(action.option_strings) + " " + self._format_args(action, action.dest.upper())


class KnobParser(argparse.ArgumentParser):
    """A parser of one command's knobs: usage errors exit 2 naming the flag, another command's knob exits 2 saying where
    it goes, a misspelt flag gets a suggestion."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"[ERROR] {message} (see --help)\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        argv = list(sys.argv[1:] if args is None else args)
        problem = refusal(argv, {flag for action in self._actions for flag in action.option_strings})
        if problem:
            self.print_usage(sys.stderr)
            self.exit(2, f"[ERROR] {problem}\n")
        return super().parse_known_args(argv, namespace)


VLLM_MEANING = {"--model": "--serve-model"}
"""Flags ``vllm serve`` users type for what a command of ours names otherwise (``--model`` is the benchmark's model
name, as in ``vllm bench serve``; the engine's commands take the model to serve as ``--serve-model``)."""


def refusal(argv: list[str], own: set[str]) -> str | None:
    """Why the first flag of ``argv`` not in ``own`` is refused; None when every flag is the command's."""
    knobs = _knob_flags()
    for index, token in enumerate(argv):
        if token == "--":
            break
        if not token.startswith("--"):
            continue
        flag, eq, inline = token.partition("=")
        if flag in own:
            continue
        if flag in knobs:
            name, info = knobs[flag]
            env = env_names(name, info)[0]
            if is_bool(info):
                return where_it_goes(name, flag, env, "0" if flag.startswith("--no-") else "1", flag_value=False)
            value = inline if eq else (argv[index + 1] if index + 1 < len(argv) else None)
            refused = where_it_goes(name, flag, env, value)
            ours = VLLM_MEANING.get(flag)
            if ours in own:  # ``vllm serve --model X``'s meaning, under this command's own name
                refused += f"; to serve a model with this command: {ours} {value or 'VALUE'}"
            return refused
        near = difflib.get_close_matches(flag, sorted(own), n=1, cutoff=0.75)
        if near:
            return f"unrecognized argument {flag}: did you mean {near[0]}?"
        named = _report_field_flags().get(flag)
        if named in own:
            return f"unrecognized argument {flag}: the report's {flag[2:].replace('-', '_')} is set by {named}"
    return None


UNIT_SUFFIXES = ("_requests", "_req_per_sec", "_tokens", "_s")
"""Unit suffixes a report's config field adds to its knob's name (``warmup_requests`` is WARMUP's figure)."""


def _report_field_flags() -> dict[str, str]:
    """``--<report config field>`` -> its knob's flag (``--warmup-requests`` -> ``--warmup``)."""
    from core.report_setup import BenchmarkConfig

    knobs = dict(flag_fields())
    table: dict[str, str] = {}
    for field in BenchmarkConfig.model_fields:
        for suffix in UNIT_SUFFIXES:
            knob = field.removesuffix(suffix)
            if knob != field and knob in knobs and field not in knobs:
                table["--" + field.replace("_", "-")] = flags_of(knob, knobs[knob])[0]
                break
    return table


def _add_knob(group: argparse._ArgumentGroup, name: str, info: FieldInfo) -> None:
    flags = flags_of(name, info)
    help_text = knob_help(name, info).replace("%", "%%")
    const = _extra(info).get("cli_const")  # ``--sweep`` alone means ``--sweep auto``
    if is_bool(info):
        group.add_argument(*flags, dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
    else:
        group.add_argument(*flags, dest=name, default=None, metavar=_metavar(info), help=help_text,
                           nargs="?" if const else None, const=str(const) if const else None)  # fmt: skip


def knob_help(name: str, info: FieldInfo) -> str:
    """A flag's help line: its short help and ``[default; VARIABLE]`` (the variable when not the flag in capitals)."""
    env = env_names(name, info)[0]
    if env == flags_of(name, info)[0].removeprefix("--").replace("-", "_").upper():
        env = ""  # the rule the epilog states
    default = shown_default(info)
    shown = "; ".join(part for part in (default if default != "unset" else "", env) if part)
    return f"{short_help(name, info)} [{shown}]" if shown else short_help(name, info)


EPILOG = ("[default] where there is one. Each flag is also an environment, .env and make variable: the flag in "
          "capitals (--max-tokens: MAX_TOKENS) unless [named]; flags win. Full descriptions: docs/reference.md "
          "(python -m stack.config_reference).")


def build_parser(prog: str, description: str, view: Command | None = None) -> KnobParser:
    """A parser with one option per knob of ``view`` (None: every knob), the most used first. ``description`` (a module
    docstring) is shown without its reST markup (``x`` and :mod:`x` read as x)."""
    parser = KnobParser(
        prog=prog,
        usage=f"{prog} [--KNOB VALUE ...]",
        description=re.sub(r"(?::[a-z]+:)?`{1,2}~?([^`]+?)`{1,2}", r"\1", description),
        formatter_class=_Formatter,
        epilog=EPILOG,
    )
    fields = dict(flag_fields())
    groups = [("most used", view.top), *view.groups] if view else [("settings", tuple(fields))]
    capped = view is not None and "max_in_flight" in view.fields  # --max-concurrency beside --concurrency
    done: set[str] = set()
    for title, names in groups:
        todo = [name for name in names if name not in done and name in fields]
        if not todo and not (title == "load" and capped):
            continue
        group = parser.add_argument_group(title, None if view else "every knob")
        for name in todo:
            _add_knob(group, name, fields[name])
            done.add(name)
            if name == "concurrency" and capped:
                group.add_argument(MAX_CONCURRENCY, dest="max_concurrency", default=None, metavar="N",
                                   help="vllm bench serve's: with a rate MAX_IN_FLIGHT, else "
                                   "CONCURRENCY")  # fmt: skip
    return parser


def given(args: argparse.Namespace) -> dict[str, Any]:
    """The knobs set on the command line, as typed."""
    return {name: getattr(args, name) for name, _ in flag_fields() if getattr(args, name, None) is not None}


def _open_loop(flags: dict[str, Any]) -> bool:
    """Whether ``flags`` run the open loop (where ``--max-concurrency`` means MAX_IN_FLIGHT)."""
    try:
        settings = Settings(**flags)
    except ValidationError:
        return flags.get("rate") is not None
    spec = settings.sweep_spec
    return settings.rate is not None or settings.trace is not None or (spec is not None and spec[0] != "concurrency")


def settings_from(args: argparse.Namespace) -> Settings:
    """Settings from the environment and ``.env``, overridden by the flags in ``args``.

    Raises:
        CliError: a value does not validate; the message names the flag (``--concurrency=0``) or the variable.
    """
    flags = given(args)
    cap = getattr(args, "max_concurrency", None)
    if cap is not None:
        target = "max_in_flight" if _open_loop(flags) else "concurrency"
        if target in flags and str(flags[target]) != str(cap):
            other = "--max-in-flight" if target == "max_in_flight" else "--concurrency"
            raise CliError(f"{MAX_CONCURRENCY} {cap} and {other} {flags[target]} set the same knob: give one")
        flags[target] = cap
    try:
        return Settings(**flags)
    except ValidationError as exc:
        raise CliError(describe_validation_error(exc, from_cli=set(flags))) from None


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> tuple[argparse.Namespace, Settings]:
    """Parse ``argv`` and build the settings; a bad value or a misspelt variable exits 2 with the message."""
    args = parser.parse_args(argv)
    typos = env_typos()
    if typos:
        parser.exit(2, "".join(f"[ERROR] {line}\n" for line in typos))
    try:
        return args, settings_from(args)
    except CliError as exc:
        parser.print_usage(sys.stderr)
        parser.exit(2, f"[ERROR] {exc}\n")


def flag_environment(args: argparse.Namespace) -> dict[str, str]:
    """The flags given as environment variables (on/off as 1/0), for a child process that re-reads its settings."""
    return {
        env_names(name, Settings.model_fields[name])[0]: str(int(value)) if isinstance(value, bool) else str(value)
        for name, value in given(args).items()
    }
