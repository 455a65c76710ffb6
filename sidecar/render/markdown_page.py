"""The Markdown writer of the page sections (``page_sections``): a run, a series, an A/B comparison; no plots."""

from __future__ import annotations

from collections.abc import Sequence

from core.report_schema import Report
from sidecar.render.page_sections import Paras, Plot, Section, Table, inline, report_sections

MARKS = {"b": "**{text}**", "code": "`{text}`", "a": "[{text}]({href})"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A GitHub-flavoured Markdown table (pipes in cells escaped)."""
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _block(block: Paras | Table) -> list[str]:
    if isinstance(block, Table):
        return table(block.header or ["Item", "Value"], block.rows)
    if block.style == "bullets":
        return [f"- {inline(item, MARKS)}" for item in block.items]
    prefix = "> " if block.style in ("quote", "warn") else ""
    return [line for item in block.items for line in ("", prefix + inline(item, MARKS))][1:]


def write_markdown(sections: Sequence[Section]) -> str:
    """The sections as one Markdown document; a section of plots only is left out."""
    lines: list[str] = []
    for s in sections:
        blocks = [_block(b) for b in s.blocks if not isinstance(b, Plot)]
        if s.blocks and not blocks:
            continue
        lines += ["#" * s.level + f" {s.title}", ""]
        lines += [line for block in blocks if block for line in [*block, ""]]
    return "\n".join(lines).rstrip("\n") + "\n"


def render_markdown(report: Report) -> str:
    """The report as Markdown."""
    return write_markdown(report_sections(report, []))

