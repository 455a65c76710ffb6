"""Prompt workloads: the bundled Chinese corpus (JSONL with ``prompt`` and ``task``) turned into chat messages."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


class DatasetError(ValueError):
    """A dataset file is missing or holds no usable prompt; the message says which file and what to do."""


@dataclass(frozen=True)
class Prompt:
    """One workload item: chat messages plus its task type."""

    prompt_id: str
    task: str
    messages: list[dict[str, str]]


def load_jsonl_prompts(path: Path) -> tuple[list[Prompt], int]:
    """Read a JSONL file of ``{"prompt": str, "task"?: str, "id"?: str}`` lines.

    Returns:
        ``(prompts, skipped)``: invalid lines (not JSON, no ``prompt``) are skipped and counted, since one bad
        line in a large bring-your-own file should not stop a benchmark; the caller reports the count.

    Raises:
        DatasetError: the file is missing or has no valid line.
    """
    if not path.is_file():
        raise DatasetError(f"dataset {path} not found: check the path (PROMPTS_FILE)")
    prompts: list[Prompt] = []
    skipped = 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            text = obj["prompt"]
            if not isinstance(text, str) or not text.strip():
                raise KeyError("prompt")
        except (ValueError, KeyError, TypeError):
            skipped += 1
            continue
        prompts.append(
            Prompt(
                prompt_id=str(obj.get("id", f"line-{number}")),
                task=str(obj.get("task", "unknown")),
                messages=[{"role": "user", "content": text}],
            )
        )
    if not prompts:
        raise DatasetError(f"dataset {path} has no valid line ({skipped} skipped): expected JSONL with a 'prompt'")
    return prompts, skipped


def prompt_stream(prompts: list[Prompt], seed: int) -> Iterator[Prompt]:
    """Endless, deterministic sequence of prompts: a seeded shuffle, repeated."""
    rng = random.Random(seed)
    while True:
        order = prompts[:]
        rng.shuffle(order)
        yield from order
