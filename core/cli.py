"""Command-line flags generated from the settings object, so every knob has one definition: its field.

``--concurrency 32`` sets the field ``concurrency`` (environment ``CONCURRENCY``); flags win over the environment and
``.env`` (they are passed to :class:`~core.settings.Settings` as init values). A field lists extra flag names in
``json_schema_extra={"cli": [...]}`` — the aliases of ``vllm bench serve`` (``--max-concurrency``,
``--request-rate``, ``--num-prompts``, ``--base-url``, ``--model``, ``--dataset-path``), or replaces its flags with
``{"cli_flags": [...]}``, names the value of the bare flag with ``{"cli_const": VALUE}`` (``--sweep`` alone is
``--sweep auto``) — and is left out with
``{"cli": False}`` (secrets and internal fields: environment only, so they never show in ``ps``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn, get_args

from pydantic import AliasChoices, ValidationError
from pydantic.fields import FieldInfo

from core.settings import PROJECT_ROOT, Settings, describe_validation_error


def _extra(info: FieldInfo) -> dict[str, Any]:
    extra = info.json_schema_extra
    return extra if isinstance(extra, dict) else {}


def flag_fields() -> Iterator[tuple[str, FieldInfo]]:
    """Settings fields that have flags (everything but secrets and internal fields)."""
    for name, info in Settings.model_fields.items():
        if info.repr is False or _extra(info).get("cli") is False:
            continue
        yield name, info


def env_names(name: str, info: FieldInfo) -> list[str]:
    """The environment variables of a field: its name upper-cased, and its alias choices (e.g. VLLM_MODEL_PATH)."""
    alias = info.validation_alias
    if isinstance(alias, AliasChoices):
        return [str(choice).upper() for choice in alias.choices if isinstance(choice, str)]
    return [name.upper()]


def flags_of(name: str, info: FieldInfo) -> list[str]:
    """``--concurrency`` plus the field's aliases (``--max-concurrency``); ``cli_flags`` replaces the whole list
    (``model``, what vLLM serves, is ``--vllm-model-path``: ``--model`` is the benchmark's, as in ``vllm bench``)."""
    extra = _extra(info)
    if extra.get("cli_flags"):
        return [str(flag) for flag in extra["cli_flags"]]
    return [f"--{name.replace('_', '-')}", *(str(a) for a in extra.get("cli") or [])]


def _default_text(value: Any) -> str:
    if value is None or value == {} or value == "":
        return "unset"
    if isinstance(value, Path):
        return str(value.relative_to(PROJECT_ROOT)) if value.is_relative_to(PROJECT_ROOT) else str(value)
    return str(value)


def _is_bool(info: FieldInfo) -> bool:
    return info.annotation is bool or bool in get_args(info.annotation)


class CliError(ValueError):
    """A flag or an environment variable has a bad value; the message names each one."""


class KnobParser(argparse.ArgumentParser):
    """An argparse parser whose options are the settings fields; usage errors exit 2 naming the flag."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"[ERROR] {message} (see --help)\n")


def build_parser(prog: str, description: str) -> KnobParser:
    """A parser with one option per knob: ``--flag VALUE`` (``--flag/--no-flag`` for on/off knobs), each help line
    giving the description (units are in the names), the default and the environment variable."""
    parser = KnobParser(
        prog=prog,
        usage=f"{prog} [--KNOB VALUE ...]   (--help lists every knob, its default and its environment variable)",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    group = parser.add_argument_group(
        "settings", "every knob; flags win over the environment, .env and make variables (named after each help)"
    )
    for name, info in flag_fields():
        env = ", ".join(env_names(name, info))
        text = (info.description or name.replace("_", " ")).replace("%", "%%")
        help_text = f"{text} [default: {_default_text(info.get_default(call_default_factory=True))}; env {env}]"
        if _is_bool(info):
            group.add_argument(*flags_of(name, info), dest=name, action=argparse.BooleanOptionalAction,
                               default=None, help=help_text)
        elif _extra(info).get("cli_const"):  # ``--sweep`` alone means ``--sweep auto``
            group.add_argument(*flags_of(name, info), dest=name, default=None, metavar=name.upper(), help=help_text,
                               nargs="?", const=str(_extra(info)["cli_const"]))
        else:
            group.add_argument(*flags_of(name, info), dest=name, default=None, metavar=name.upper(), help=help_text)
    return parser


def given(args: argparse.Namespace) -> dict[str, Any]:
    """The knobs set on the command line (``None`` means not given)."""
    return {name: getattr(args, name) for name, _ in flag_fields() if getattr(args, name, None) is not None}


def settings_from(args: argparse.Namespace) -> Settings:
    """Settings from the environment and ``.env``, overridden by the flags in ``args``.

    Raises:
        CliError: a value does not validate; the message names the flag (``--concurrency=0``) or the variable.
    """
    flags = given(args)
    try:
        return Settings(**flags)
    except ValidationError as exc:
        raise CliError(describe_validation_error(exc, from_cli=set(flags))) from None


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> tuple[argparse.Namespace, Settings]:
    """Parse ``argv`` and build the settings; a bad flag value exits 2 with the message (as argparse does)."""
    args = parser.parse_args(argv)
    try:
        return args, settings_from(args)
    except CliError as exc:
        parser.print_usage(sys.stderr)
        parser.exit(2, f"[ERROR] {exc}\n")
