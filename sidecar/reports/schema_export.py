"""Export the report JSON Schema: ``python -m sidecar.reports.schema_export [--check] [--out PATH]``.

The root is :class:`core.report_schema.Report`; the series report and the A/B comparison are in its ``$defs``.
Writes ``reports/schema.json``; ``--check`` only compares and exits 1 when it is stale.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic.json_schema import models_json_schema

from core.atomicfile import atomic_write
from core.comparison import ABComparison
from core.report_schema import Report
from core.series_stats import SeriesReport
from core.settings import PROJECT_ROOT

DEFAULT_PATH = PROJECT_ROOT / "reports" / "schema.json"


def json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12): :class:`Report` at the root, every result type in ``$defs``."""
    _, top = models_json_schema([(Report, "validation"), (SeriesReport, "validation"), (ABComparison, "validation")])
    defs: dict[str, Any] = dict(top["$defs"])
    root = dict(defs["Report"])
    root["$defs"] = defs
    return root


def schema_text() -> str:
    """The schema as stable, diff-friendly JSON text (sorted keys, 2-space indent, final newline)."""
    return json.dumps(json_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_schema_if_changed(path: Path = DEFAULT_PATH) -> bool:
    """Write the schema to ``path`` atomically unless it already holds exactly that; True when written."""
    text = schema_text()
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text.encode("utf-8"))
    return True


def main(argv: list[str] | None = None) -> int:
    """Write (or with ``--check`` verify) the schema file; 0 when up to date or written, 1 when stale."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=DEFAULT_PATH, help=f"where to write (default {DEFAULT_PATH})")
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 when the file is stale")
    args = parser.parse_args(argv)
    if args.check:
        try:
            current = args.out.read_text(encoding="utf-8")
        except OSError:
            current = None
        if current != schema_text():
            print(f"[ERROR] {args.out} is stale: run `python -m sidecar.reports.schema_export`", file=sys.stderr)
            return 1
        print(f"[INFO] {args.out} is up to date")
        return 0
    written = write_schema_if_changed(args.out)
    print(f"[INFO] {'wrote' if written else 'unchanged:'} {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
