"""The JSON Schema of everything the sidecar writes to ``reports/`` (``make schema`` -> ``reports/schema.json``).

The root is the benchmark report (:class:`core.report_schema.Report`), so a report validates against the file as
is; the series report and the A/B comparison are in its ``$defs`` (``#/$defs/SeriesReport``,
``#/$defs/ABComparison``), sharing the definitions they have in common with the report.
"""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import models_json_schema

from core.abcompare import ABComparison
from core.report_schema import Report
from core.series import SeriesReport


def json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12): :class:`Report` at the root, every result type in ``$defs``."""
    _, top = models_json_schema([(Report, "validation"), (SeriesReport, "validation"), (ABComparison, "validation")])
    defs: dict[str, Any] = dict(top["$defs"])
    root = dict(defs["Report"])
    root["$defs"] = defs
    return root
