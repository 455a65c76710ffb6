"""Build-time pages of the documentation site (run by the ``mkdocs-gen-files`` plugin, see ``mkdocs.yml``).

- ``reference.md``: every knob of the one settings object (``core.settings.Settings``), grouped by the knob group
  that defines it (``core/knobs/``), with its flags, environment variables, default and description — generated from
  the fields, never hand-written, so ``make docs`` (and ``make lint``, which builds the site with ``--strict``)
  always shows what the code accepts.
- ``benchmarks.md`` and ``changelog.md``: ``benchmarks/README.md`` and ``CHANGELOG.md``, which live outside
  ``docs/`` beside what they describe.
"""

from __future__ import annotations

import sys
from pathlib import Path

import mkdocs_gen_files

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from core.cli import env_names, flag_fields, flags_of  # noqa: E402
from core.settings import Settings  # noqa: E402

_HEADER = ["| environment | flags | default | meaning |", "|---|---|---|---|"]


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _default(info) -> str:  # type: ignore[no-untyped-def]
    value = info.get_default(call_default_factory=True)
    if value is None or value in ({}, "", []):
        return "unset"
    if isinstance(value, Path):
        return str(value.relative_to(ROOT)) if value.is_relative_to(ROOT) else str(value)
    return str(value)


def reference_markdown() -> str:
    """The settings reference as Markdown: one table per knob group, in the settings' own order."""
    with_flags = dict(flag_fields())
    lines = [
        "# Settings reference",
        "",
        "Generated from `core/settings.py` and `core/knobs/` when the site is built. Each knob is an environment",
        "variable (also read from `.env` and given as a make variable: `make benchmark CONCURRENCY=8`) and, unless",
        "it is a secret, a command-line flag. Units are in the names: `_s` seconds, `_ms` milliseconds, `_gb` GiB,",
        "`_mb` MiB, `_pct` percent.",
        "",
    ]
    seen: set[str] = set()
    for group in Settings.__mro__[1:]:
        own = [name for name in getattr(group, "__annotations__", {}) if name in Settings.model_fields]
        own = [name for name in own if name not in seen]
        if not own or not group.__module__.startswith("core."):
            continue
        doc = (group.__doc__ or "").strip().splitlines()[0] if group.__doc__ else ""
        lines += [f"## {group.__name__}", "", doc, "", *_HEADER]
        for name in own:
            seen.add(name)
            info = Settings.model_fields[name]
            flags = ", ".join(f"`{f}`" for f in flags_of(name, info)) if name in with_flags else "environment only"
            envs = ", ".join(f"`{e}`" for e in env_names(name, info))
            lines.append(f"| {envs} | {flags} | `{_cell(_default(info))}` | {_cell(info.description or '')} |")
        lines.append("")
    rest = [name for name in Settings.model_fields if name not in seen]
    if rest:
        lines += ["## Across groups", "", *_HEADER]
        for name in rest:
            info = Settings.model_fields[name]
            flags = ", ".join(f"`{f}`" for f in flags_of(name, info)) if name in with_flags else "environment only"
            envs = ", ".join(f"`{e}`" for e in env_names(name, info))
            lines.append(f"| {envs} | {flags} | `{_cell(_default(info))}` | {_cell(info.description or '')} |")
    return "\n".join(lines) + "\n"


with mkdocs_gen_files.open("reference.md", "w") as out:
    out.write(reference_markdown())
for source, page in (("benchmarks/README.md", "benchmarks.md"), ("CHANGELOG.md", "changelog.md")):
    with mkdocs_gen_files.open(page, "w") as out:
        out.write((ROOT / source).read_text(encoding="utf-8"))


def _site_links(markdown: str) -> str:
    """README links as the site sees them: ``docs/x.md`` is ``x.md``; files outside ``docs/`` are generated pages."""
    return (markdown.replace("](docs/", "](").replace("](benchmarks/README.md)", "](benchmarks.md)")
            .replace("](CHANGELOG.md)", "](changelog.md)")
            .replace("settings reference (generated: `make docs`)", "[settings reference](reference.md)"))


with mkdocs_gen_files.open("index.md", "w") as out:
    out.write(_site_links((ROOT / "README.md").read_text(encoding="utf-8")))
