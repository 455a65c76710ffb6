"""DATASET=random: prompts of exactly RANDOM_INPUT_LEN tokens as the server counts them, for comparisons with
``vllm bench serve --dataset-name random``.

How they are sized (decided here, documented in the README): the figure is the **whole prompt the server
processes**, chat template included — what ``usage.prompt_tokens`` reports — not only the user text. Each prompt is
random token ids drawn from the ids the server's tokenizer gives the bundled corpus (so they decode to ordinary
text, no special tokens), decoded by the server (``POST /detokenize``), then counted as a chat (``POST /tokenize``
with ``messages``, the generation prompt added as the chat endpoint does) and trimmed or extended until the count
is exact. A server without a usable ``/tokenize`` (another engine, a gateway) gives way to the served model's
tokenizer from a local folder (:mod:`loadgen.workloads.tokenizing`). Random ids from the first token on mean no two
prompts share a prefix beyond the template (no prefix-cache hits). The prompts are written once per model, length,
count and seed to ``logs/datasets/random_….jsonl`` (a prompt JSONL), which every Locust process reads.
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
    """A random text whose one-message chat is exactly ``total_tokens`` tokens (see the module docstring).

    Raises:
        BenchError: the template alone is longer, or the count did not settle (the message gives the numbers).
    """
    overhead = tok.chat_count("")
    if total_tokens <= overhead:
        raise BenchError(
            f"RANDOM_INPUT_LEN={total_tokens} is not above the chat template's own {overhead} tokens: choose more"
        )
    ids = [int(i) for i in rng.choice(pool, total_tokens - overhead)]
    return exact_chat_text(tok, pool, rng, ids, total_tokens, "DATASET=random")


def exact_chat_text(tok: PromptTokenizer, pool: np.ndarray, rng: np.random.Generator, ids: list[int],
                    total_tokens: int, knob: str) -> str:
    """A text starting with (the decoding of) ``ids`` whose one-message chat is exactly ``total_tokens`` tokens as the
    server counts it: the last ids are trimmed, or random ones from ``pool`` appended, until the count is exact
    (at most :data:`MAX_ADJUSTMENTS` tries; a merge across the seam can skip a count, so it may take several).

    Raises:
        BenchError: the count did not settle (names ``knob``, the wanted and the last count).
    """
    count = None
    for _ in range(MAX_ADJUSTMENTS):
        text = tok.text(ids)
        count = tok.chat_count(text)
        if count == total_tokens:
            return text
        gap = total_tokens - count
        ids = ids + [int(i) for i in rng.choice(pool, gap)] if gap > 0 else ids[: max(1, len(ids) + gap)]
    raise BenchError(f"{knob}: could not size a prompt to {total_tokens} tokens (last count {count})")


def token_pool(tok: PromptTokenizer, corpus: Path) -> np.ndarray:
    """The distinct token ids of the first :data:`CORPUS_CHARS` characters of ``corpus`` as the server tokenizes
    them: ordinary tokens to build prompts of exact lengths from (shape ``(n,)``, int64)."""
    text = "".join(p.messages[-1]["content"] for p in dataset_of(corpus).prompts)[:CORPUS_CHARS]
    return np.unique(np.asarray(tok.ids(text), dtype=np.int64))


def random_prompts_file(plan: BenchmarkConfig, logs_dir: Path, corpus: Path,
                        open_tokenizer: Callable[[], PromptTokenizer], count: int | None = None) -> Path:
    """Write (once) and return the prompt JSONL of ``plan``'s random dataset: ``count`` prompts (default REQUESTS
    plus warmup, or 256 for duration-bounded runs) of ``plan.input_len_tokens`` tokens each, sized with the tokenizer
    ``open_tokenizer`` opens (only when the file is not there yet:
    :func:`loadgen.workloads.tokenizing.open_prompt_tokenizer`).

    Raises:
        BenchError: no tokenizer is usable, or a prompt cannot be sized.
    """
    total = plan.input_len_tokens
    if total is None:
        raise ValueError("not a DATASET=random plan (input_len_tokens unset)")
    count = count or ((plan.requests + plan.warmup_requests) if plan.requests else DEFAULT_PROMPTS)
    safe_model = re.sub(r"[^A-Za-z0-9_.-]+", "_", plan.model)
    path = logs_dir / "datasets" / f"random_{safe_model}_in{total}_n{count}_seed{plan.seed}.jsonl"
    if path.exists():
        return path
    tok = open_tokenizer()
    try:
        pool = token_pool(tok, corpus)
        rng = np.random.default_rng(plan.seed)
        lines = [
            json.dumps({"id": f"random-{i}", "task": "random", "prompt": sized_prompt(tok, pool, rng, total)},
                       ensure_ascii=False)
            for i in range(count)
        ]
    finally:
        tok.close()
    atomic_write(path, "\n".join(lines) + "\n")
    return path
