"""DATASET=random: prompts of exactly RANDOM_INPUT_LEN tokens as the server counts them, chat template included
(``usage.prompt_tokens``; ``vllm bench serve --dataset-name random``), and the sizing PREFIX_LEN and TRACE share.

Each prompt is random ids of the corpus's ordinary tokens (no shared prefix), decoded, counted as a chat and trimmed
or extended until exact, by :mod:`loadgen.workloads.tokenizing`; written once per model, length, count and seed to
``logs/datasets/random_….jsonl``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

from core.atomicfile import atomic_write
from core.report_schema import BenchmarkConfig
from loadgen.errors import BenchError
from loadgen.workloads.dataset import dataset_of
from loadgen.workloads.tokenizing import PromptTokenizer

MAX_ADJUSTMENTS = 12
DEFAULT_PROMPTS = 256  # duration-bounded runs cycle through this many
CORPUS_CHARS = 20_000  # of the bundled corpus, tokenized once for the pool of ordinary token ids


def sized_prompt(tok: PromptTokenizer, pool: np.ndarray, rng: np.random.Generator, total_tokens: int) -> str:
    """A random text whose one-message chat is exactly ``total_tokens`` tokens.

    Raises:
        BenchError: the template alone is longer, or the count did not settle.
    """
    overhead = tok.chat_count("")
    if total_tokens <= overhead:
        raise BenchError(f"RANDOM_INPUT_LEN={total_tokens} is not above the chat template's own {overhead} tokens: "
                         "choose more")
    ids = [int(i) for i in rng.choice(pool, total_tokens - overhead)]
    return exact_chat_text(tok, pool, rng, ids, total_tokens, "DATASET=random")


def exact_text(tok: PromptTokenizer, pool: np.ndarray, rng: np.random.Generator, ids: list[int], tokens: int,
               count: Callable[[str], int], failure: str) -> str:
    """A text starting with (the decoding of) ``ids`` that ``count`` finds exactly ``tokens`` long: the last ids are
    trimmed, or random ones from ``pool`` appended, at most :data:`MAX_ADJUSTMENTS` times (a merge across the seam
    can skip a count).

    Raises:
        BenchError: the count did not settle (``failure``, then the last count).
    """
    found = None
    for _ in range(MAX_ADJUSTMENTS):
        text = tok.text(ids)
        found = count(text)
        if found == tokens:
            return text
        gap = tokens - found
        ids = ids + [int(i) for i in rng.choice(pool, gap)] if gap > 0 else ids[: max(1, len(ids) + gap)]
    raise BenchError(f"{failure} (last count {found})")


def exact_chat_text(tok: PromptTokenizer, pool: np.ndarray, rng: np.random.Generator, ids: list[int],
                    total_tokens: int, knob: str) -> str:
    """:func:`exact_text` for a one-message chat of ``total_tokens`` tokens as the server counts it.

    Raises:
        BenchError: the count did not settle (names ``knob``, the wanted and the last count).
    """
    failure = f"{knob}: could not size a prompt to {total_tokens} tokens"
    return exact_text(tok, pool, rng, ids, total_tokens, tok.chat_count, failure)


def token_pool(tok: PromptTokenizer, corpus: Path) -> np.ndarray:
    """The distinct token ids of the first :data:`CORPUS_CHARS` characters of ``corpus`` as the server tokenizes
    them: ordinary tokens to build prompts of exact lengths from (shape ``(n,)``, int64)."""
    text = "".join(p.messages[-1]["content"] for p in dataset_of(corpus).prompts)[:CORPUS_CHARS]
    return np.unique(np.asarray(tok.ids(text), dtype=np.int64))


def generated_path(logs_dir: Path, kind: str, plan: BenchmarkConfig, tail: str) -> Path:
    """``logs/datasets/<kind>_<model>_<tail>``, the model's name made safe for a file name."""
    return logs_dir / "datasets" / f"{kind}_{re.sub(r'[^A-Za-z0-9_.-]+', '_', plan.model)}_{tail}"


def write_once(path: Path, corpus: Path, open_tokenizer: Callable[[], PromptTokenizer],
               build: Callable[[PromptTokenizer, np.ndarray], str]) -> Path:
    """Write ``build(tokenizer, corpus token pool)`` to ``path`` unless it is there (only then is a tokenizer opened).

    Raises:
        BenchError: as ``open_tokenizer`` or ``build`` raise it.
    """
    if not path.exists():
        tok = open_tokenizer()
        try:
            text = build(tok, token_pool(tok, corpus))
        finally:
            tok.close()
        atomic_write(path, text)
    return path


def random_prompts_file(plan: BenchmarkConfig, logs_dir: Path, corpus: Path,
                        open_tokenizer: Callable[[], PromptTokenizer], count: int | None = None) -> Path:
    """Write (once) and return the prompt JSONL of ``plan``'s random dataset: ``count`` prompts (default REQUESTS
    plus warmup, or 256 for duration-bounded runs) of ``plan.input_len_tokens`` tokens each.

    Raises:
        BenchError: no tokenizer is usable, or a prompt cannot be sized.
    """
    total = plan.input_len_tokens
    if total is None:
        raise ValueError("not a DATASET=random plan (input_len_tokens unset)")
    count = count or ((plan.requests + plan.warmup_requests) if plan.requests else DEFAULT_PROMPTS)

    def build(tok: PromptTokenizer, pool: np.ndarray) -> str:
        rng = np.random.default_rng(plan.seed)
        lines = [json.dumps({"id": f"random-{i}", "task": "random", "prompt": sized_prompt(tok, pool, rng, total)},
                            ensure_ascii=False) for i in range(count)]  # fmt: skip
        return "\n".join(lines) + "\n"

    path = generated_path(logs_dir, "random", plan, f"in{total}_n{count}_seed{plan.seed}.jsonl")
    return write_once(path, corpus, open_tokenizer, build)
