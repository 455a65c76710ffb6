"""Series and comparison files in ``reports/``: ``benchmark_series_<ts>`` / ``benchmark_compare_<ts>`` with their
Markdown and HTML, written the way reports are (:mod:`sidecar.reports.store`: no clobbering, attachments first,
the JSON last) and listed tolerantly (a corrupt file is skipped with a warning)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from pydantic import BaseModel, ValidationError

from core.redact import redact_json
from sidecar.reports.store import _write_new

log = logging.getLogger(__name__)
Model = TypeVar("Model", bound=BaseModel)
ATTACHMENTS = {".md": "markdown_file", ".html": "html_file"}


class ResultStore(Generic[Model]):
    """Files ``<prefix>_YYYYMMDD_HHMMSS[_n].json`` (+ ``.md``, ``.html``) of one pydantic type under ``root``.

    Args:
        id_field: the model's id field (``series_id``, ``compare_id``); ``id_re`` validates ids.
        redact: applied to every file written: to each string value of the JSON (so masking never breaks it) and to
            the whole text of the attachments.
    """

    def __init__(
        self,
        root: Path,
        model: type[Model],
        prefix: str,
        id_field: str,
        id_re: re.Pattern[str],
        redact: Callable[[str], str] | None = None,
    ) -> None:
        self.root = root
        self.model = model
        self.prefix = prefix
        self.id_field = id_field
        self.id_re = id_re
        self._redact = redact or (lambda text: text)

    def validate_id(self, result_id: str) -> str:
        """``result_id`` when it is one of this store's ids (no paths, no traversal).

        Raises:
            ValueError: anything else.
        """
        if not isinstance(result_id, str) or not self.id_re.fullmatch(result_id):  # whole: no trailing newline
            raise ValueError(f"{result_id!r} is not an id of the form {self.prefix}_YYYYMMDD_HHMMSS")
        return result_id

    def write(self, result: Model, render: Callable[[Model], dict[str, str]]) -> Path:
        """Write ``result`` under its id (``_2``, ``_3`` ... when taken) with the files ``render`` makes from its
        final version (``{".md": text, ".html": text}``); returns the JSON's path.

        Raises:
            OSError: the folder is not writable (nothing of this result stays behind).
        """
        self.root.mkdir(parents=True, exist_ok=True)
        base = str(getattr(result, self.id_field))
        for n in range(1, 1000):
            result_id = base if n == 1 else f"{base}_{n}"
            update = {self.id_field: result_id, **{f: f"{result_id}{s}" for s, f in ATTACHMENTS.items()}}
            final = result.model_copy(update=update)
            written: list[Path] = []
            try:
                for suffix, text in render(final).items():
                    path = self.root / f"{result_id}{suffix}"
                    if not _write_new(path, self._redact(text).encode("utf-8")):
                        break
                    written.append(path)
                else:
                    path = self.root / f"{result_id}.json"
                    data = redact_json(final.model_dump(mode="json"), self._redact)
                    if _write_new(path, (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")):
                        return path
            except BaseException:
                for leftover in written:
                    leftover.unlink(missing_ok=True)
                raise
            for leftover in written:
                leftover.unlink(missing_ok=True)
        raise RuntimeError(f"could not find a free {self.prefix} id")

    def get(self, result_id: str) -> Model:
        """One result by id.

        Raises:
            ValueError: invalid id. FileNotFoundError: no such result.
        """
        path = self.root / f"{self.validate_id(result_id)}.json"
        return self.model.model_validate_json(path.read_bytes())

    def list(self) -> list[Model]:
        """Every valid result, oldest first (by id, which is its time)."""
        out = []
        for path in sorted(self.root.glob(f"{self.prefix}_*.json")):
            try:
                out.append(self.model.model_validate_json(path.read_bytes()))
            except (OSError, ValueError, ValidationError) as exc:
                log.warning("skipping %s: not a valid %s (%s)", path.name, self.prefix, str(exc).splitlines()[0])
        return out
