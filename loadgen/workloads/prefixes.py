"""Shared prefixes (PREFIX_LEN, PREFIX_COUNT): K texts of N tokens, one before every prompt, as vLLM's
``--prefix-repetition-*`` and GuideLLM's ``prefix_tokens``/``prefix_count`` set up (where prefix caching pays).

Request ``k`` carries prefix ``k mod K`` and a blank line at the start of its first message (the prompt grows by
it). Each prefix is random corpus token ids sized to exactly N tokens of plain text (a token may merge at the seam;
:mod:`loadgen.workloads.randomdata`), written once per model, length, count and seed to
``logs/datasets/prefixes_….json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from core.report_schema import BenchmarkConfig
from loadgen.workloads.randomdata import exact_text, generated_path, write_once
from loadgen.workloads.tokenizing import PromptTokenizer
from loadgen.workloads.workload import WorkItem

SEPARATOR = "\n\n"


def prefixes_file(plan: BenchmarkConfig, logs_dir: Path, corpus: Path,
                  open_tokenizer: Callable[[], PromptTokenizer]) -> Path:
    """Write (once) and return the JSON list of ``plan``'s ``prefix_count`` prefixes of ``prefix_len_tokens`` tokens.

    Raises:
        BenchError: no tokenizer is usable, or a prefix cannot be sized.
        ValueError: the plan has no prefixes.
    """
    length, count = plan.prefix_len_tokens, plan.prefix_count or 1
    if length is None:
        raise ValueError("not a PREFIX_LEN plan (prefix_len_tokens unset)")

    def build(tok: PromptTokenizer, pool: np.ndarray) -> str:
        rng = np.random.default_rng([plan.seed, 1])  # apart from DATASET=random's stream of the same seed
        failure = f"PREFIX_LEN={length}: could not size a prefix to {length} tokens"
        texts = []
        for _ in range(count):  # random corpus ids, exactly ``length`` tokens as plain text
            ids = [int(i) for i in rng.choice(pool, length)]
            texts.append(exact_text(tok, pool, rng, ids, length, lambda text: len(tok.ids(text)), failure))
        return json.dumps(texts, ensure_ascii=False) + "\n"

    path = generated_path(logs_dir, "prefixes", plan, f"len{length}_k{count}_seed{plan.seed}.json")
    return write_once(path, corpus, open_tokenizer, build)


def load_prefixes(plan: BenchmarkConfig) -> list[str]:
    """The plan's prefixes (empty without PREFIX_LEN or before the file is written).

    Raises:
        ValueError: the file is not a JSON list of strings.
    """
    if not plan.prefix_file:
        return []
    texts = json.loads(Path(plan.prefix_file).read_text(encoding="utf-8"))
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise ValueError(f"{plan.prefix_file}: not a JSON list of prefix texts")
    return texts


def with_prefix(item: WorkItem, k: int, prefixes: list[str]) -> WorkItem:
    """``item`` with prefix ``k mod len(prefixes)`` before its first message's text (unchanged without prefixes)."""
    if not prefixes:
        return item
    messages = [dict(m) for m in item.prompt.messages]
    messages[0]["content"] = prefixes[k % len(prefixes)] + SEPARATOR + messages[0]["content"]
    return replace(item, prompt=replace(item.prompt, messages=messages))
