"""Workloads: the bundled Chinese corpus or your own dataset, as chat messages with input-length buckets.

Formats (chosen by content; a UTF-8 byte-order mark is skipped):

- **Prompt JSONL** (the bundled ``loadgen/workloads/data/prompts_zh.jsonl``): one object per line with ``prompt``
  (str) or ``messages`` (OpenAI chat list ending with a user turn), plus optional ``id`` and ``task``.
- **ShareGPT JSON**: a list of ``{"id", "conversations": [{"from": "human"|"gpt"|"system", "value"}]}``, each the
  messages up to its last human turn; also one per line (JSONL) and with ``{"role", "content"}`` turns.

Invalid entries are **skipped and counted**; a file with no usable entry is an error. A run parses its dataset once
(:func:`dataset_of`) and hands the prompts to the Locust processes in its plan (:mod:`loadgen.plan`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

# Input-length buckets by characters of the whole conversation (CJK text: roughly 1-1.5 characters per token).
BUCKET_LIMITS_CHARS = {"short": 60, "medium": 600}
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}


class DatasetError(ValueError):
    """A dataset file is missing or holds no usable prompt; the message says which file and what to do."""


@dataclass(frozen=True)
class Prompt:
    """One workload item: chat messages, task type and input-length bucket."""

    prompt_id: str
    task: str
    messages: list[dict[str, str]]

    @property
    def chars(self) -> int:
        """Characters of all message contents."""
        return sum(len(m["content"]) for m in self.messages)

    @property
    def bucket(self) -> str:
        """``short`` (< 60 characters), ``medium`` (< 600) or ``long``."""
        if self.chars < BUCKET_LIMITS_CHARS["short"]:
            return "short"
        return "medium" if self.chars < BUCKET_LIMITS_CHARS["medium"] else "long"


@dataclass(frozen=True)
class Dataset:
    """Loaded prompts, how many entries were skipped, and the source file."""

    path: Path
    prompts: list[Prompt]
    skipped_at: tuple[int, ...] = ()
    """Where the skipped entries stand: line numbers (JSONL), or 1-based entry numbers (a JSON list: ``in_list``)."""
    in_list: bool = False

    @property
    def skipped(self) -> int:
        """How many entries were skipped."""
        return len(self.skipped_at)

    def skipped_text(self) -> str:
        """``2 unusable entries skipped (lines 2, 7)`` (the first 10 places named); empty when none was."""
        if not self.skipped:
            return ""
        where = "entries" if self.in_list else "lines"
        named = ", ".join(map(str, self.skipped_at[:10])) + (", …" if len(self.skipped_at) > 10 else "")
        return f"{self.skipped} unusable entr{'y' if self.skipped == 1 else 'ies'} skipped ({where} {named})"


def _valid_messages(messages: Any) -> list[dict[str, str]] | None:
    if not isinstance(messages, list) or not messages:
        return None
    out = []
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant"):
            return None
        if not isinstance(m.get("content"), str):
            return None
        out.append({"role": m["role"], "content": m["content"]})
    return out if out[-1]["role"] == "user" and out[-1]["content"].strip() else None


def _from_jsonl_line(line: str, number: int) -> Prompt | None:
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    if "conversations" in obj:  # ShareGPT as JSONL: one conversation per line
        return _from_sharegpt(obj, number - 1)
    if isinstance(obj.get("prompt"), str) and obj["prompt"].strip():
        messages: list[dict[str, str]] | None = [{"role": "user", "content": obj["prompt"]}]
    else:
        messages = _valid_messages(obj.get("messages"))
    if messages is None:
        return None
    return Prompt(str(obj.get("id", f"line-{number}")), str(obj.get("task", "unknown")), messages)


def _from_sharegpt(entry: Any, index: int) -> Prompt | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("conversations"), list):
        return None
    messages = []
    for turn in entry["conversations"]:
        if not isinstance(turn, dict):
            return None
        # ShareGPT's {"from", "value"}, or OpenAI-style {"role", "content"} as many exports write it
        value = turn.get("value", turn.get("content"))
        role = SHAREGPT_ROLES.get(str(turn.get("from", turn.get("role"))))
        if role is None or not isinstance(value, str):
            return None
        messages.append({"role": role, "content": value})
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
    valid = _valid_messages(messages[: last_user + 1])  # None without a user turn (an empty list)
    return None if valid is None else Prompt(str(entry.get("id", f"entry-{index}")), "sharegpt", valid)


def load_dataset(path: Path) -> Dataset:
    """Load a prompt JSONL or ShareGPT JSON file.

    Raises:
        DatasetError: missing file, unreadable text, or no usable entry (with the skip count).
    """
    if path.is_dir():
        raise DatasetError(f"dataset {path} is a folder: DATASET names one file (prompt JSONL or ShareGPT JSON)")
    if not path.is_file():
        raise DatasetError(f"dataset {path} not found: check the path (DATASET / --dataset, or PROMPTS_FILE / "
                           "--prompts-file for the default corpus)")
    try:
        text = path.read_text(encoding="utf-8-sig")  # a UTF-8 byte-order mark is not part of the first record
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"dataset {path} cannot be read as UTF-8 text: {exc}") from None
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            entries = json.loads(stripped)
        except ValueError as exc:
            raise DatasetError(f"dataset {path} looks like a JSON list but does not parse: {exc}") from None
        parsed = [(index + 1, _from_sharegpt(entry, index)) for index, entry in enumerate(entries)]
    else:
        lines = enumerate(text.splitlines(), start=1)
        parsed = [(number, _from_jsonl_line(line, number)) for number, line in lines if line.strip()]
    prompts = [p for _, p in parsed if p is not None]
    skipped_at = tuple(place for place, p in parsed if p is None)
    if not prompts:
        raise DatasetError(f"dataset {path} has no usable entry ({len(skipped_at)} skipped): expected prompt JSONL "
                           '(one {"prompt": ...} per line) or ShareGPT JSON ([{"conversations": [...]}])')
    return Dataset(path, prompts, skipped_at, stripped.startswith("["))


def dataset_of(path: Path) -> Dataset:
    """:func:`load_dataset` of ``path``, parsed once per process while the file is unchanged (inode, size, mtime).

    Raises:
        DatasetError: as :func:`load_dataset` (a failure is not remembered).
    """
    resolved = path.resolve()
    try:
        st = os.stat(resolved)
    except OSError:
        return load_dataset(path)  # the error names the path as given
    return _parsed(str(resolved), st.st_ino, st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=4)
def _parsed(path: str, _ino: int, _size: int, _mtime_ns: int) -> Dataset:
    return load_dataset(Path(path))


def forget_parsed() -> None:
    """Forget the datasets :func:`dataset_of` remembers (tests: a fresh process)."""
    _parsed.cache_clear()


def prompts_as_json(prompts: list[Prompt]) -> list[dict[str, object]]:
    """The prompts as JSON values (``id``, ``task``, ``messages``), as the plan carries them."""
    return [{"id": p.prompt_id, "task": p.task, "messages": p.messages} for p in prompts]


def prompts_from_json(values: object) -> list[Prompt]:
    """The prompts of :func:`prompts_as_json` back (written by the benchmark: trusted, not validated again).

    Raises:
        DatasetError: not a list of prompt objects.
    """
    if not isinstance(values, list):
        raise DatasetError("the plan's prompts are not a list: write the plan again (run the benchmark again)")
    try:
        return [Prompt(str(v["id"]), str(v["task"]), list(v["messages"])) for v in values]
    except (KeyError, TypeError) as exc:
        raise DatasetError(f"the plan's prompts are malformed ({exc}): run the benchmark again") from None
