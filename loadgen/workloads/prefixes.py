"""Shared prefixes (PREFIX_LEN, PREFIX_COUNT): K distinct texts of N tokens, one put before every prompt, so
requests share a system prompt or document the way vLLM's ``--prefix-repetition-*`` and GuideLLM's
``prefix_tokens``/``prefix_count`` set up — the case where vLLM's prefix caching pays.

Request number ``k`` carries prefix ``k mod K`` at the start of its first message, followed by a blank line; the
prompt's own tokens follow, so the prompt grows by the prefix (as GuideLLM's ``prefix_tokens`` adds to the prompt).
Each prefix is random token ids from the ids the server's tokenizer gives the bundled corpus, decoded by the server
and trimmed or extended until it is exactly N tokens as plain text (``POST /tokenize``; at the seam with the
template or the prompt a token may merge, so a prompt's count can differ by one); a server without a usable
``/tokenize`` gives way to a local tokenizer (:mod:`loadgen.workloads.tokenizing`). The prefixes are written once per
model, length, count and seed to ``logs/datasets/prefixes_….json`` (a JSON list), which every Locust process reads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from core.atomicfile import atomic_write
from core.report_schema import BenchmarkConfig
from loadgen.errors import BenchError
from loadgen.workloads.randomdata import MAX_ADJUSTMENTS, token_pool
from loadgen.workloads.tokenizing import PromptTokenizer
from loadgen.workloads.workload import WorkItem

SEPARATOR = "\n\n"


def sized_text(tok: PromptTokenizer, pool: np.ndarray, rng: np.random.Generator, tokens: int) -> str:
    """A random text of exactly ``tokens`` tokens as the server tokenizes plain text.

    Raises:
        BenchError: the count did not settle (the message gives the numbers).
    """
    ids = [int(i) for i in rng.choice(pool, tokens)]
    count = None
    for _ in range(MAX_ADJUSTMENTS):
        text = tok.text(ids)
        count = len(tok.ids(text))
        if count == tokens:
            return text
        gap = tokens - count
        ids = ids + [int(i) for i in rng.choice(pool, gap)] if gap > 0 else ids[: max(1, len(ids) + gap)]
    raise BenchError(f"PREFIX_LEN={tokens}: could not size a prefix to {tokens} tokens (last count {count})")


def prefixes_file(plan: BenchmarkConfig, logs_dir: Path, corpus: Path,
                  open_tokenizer: Callable[[], PromptTokenizer]) -> Path:
    """Write (once) and return the JSON list of ``plan``'s shared prefixes (``prefix_count`` texts of
    ``prefix_len_tokens`` tokens, seeded by SEED), sized with the tokenizer ``open_tokenizer`` opens (only when the
    file is not there yet).

    Raises:
        BenchError: no tokenizer is usable, or a prefix cannot be sized.
        ValueError: the plan has no prefixes.
    """
    length, count = plan.prefix_len_tokens, plan.prefix_count or 1
    if length is None:
        raise ValueError("not a PREFIX_LEN plan (prefix_len_tokens unset)")
    safe_model = re.sub(r"[^A-Za-z0-9_.-]+", "_", plan.model)
    path = logs_dir / "datasets" / f"prefixes_{safe_model}_len{length}_k{count}_seed{plan.seed}.json"
    if path.exists():
        return path
    tok = open_tokenizer()
    try:
        pool = token_pool(tok, corpus)
        rng = np.random.default_rng([plan.seed, 1])  # apart from DATASET=random's stream of the same seed
        texts = [sized_text(tok, pool, rng, length) for _ in range(count)]
    finally:
        tok.close()
    atomic_write(path, json.dumps(texts, ensure_ascii=False) + "\n")
    return path


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
