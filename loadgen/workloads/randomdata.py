"""Token-exact prompts as the server counts them, written once by the benchmark under ``logs/datasets/``.

- **DATASET=random**: prompts of exactly RANDOM_INPUT_LEN tokens, chat template included (``usage.prompt_tokens``;
  ``vllm bench serve --dataset-name random``): random ids of the corpus's ordinary tokens (no shared prefix),
  decoded, counted as a chat and trimmed or extended until exact, by :mod:`loadgen.workloads.tokenizing`; one file
  per model, length, count and seed (``random_….jsonl``).
- **Shared prefixes** (PREFIX_LEN, PREFIX_COUNT): K texts of N tokens, one before every prompt, as vLLM's
  ``--prefix-repetition-*`` and GuideLLM's ``prefix_tokens``/``prefix_count`` set up (where prefix caching pays).
  Request ``k`` carries prefix ``k mod K`` and a blank line at the start of its first message (the prompt grows by
  it); each prefix is random corpus ids sized to exactly N tokens of plain text (a token may merge at the seam), one
  file per model, length, count and seed (``prefixes_….json``).
- **TRACE**: the trace's rows as a prompt JSONL with each row's ``max_tokens`` and ``at_s`` (``trace_….jsonl``, the
  plan's ``dataset_file``), and as the Locust processes' schedule and requests. Each prompt's chat is exactly the
  row's input length (a row shorter than the template is raised to one token above it); a Mooncake row starts with
  its ``hash_ids`` blocks, drawn once per id (seeded by SEED), so rows naming the same ids share vLLM's prefix cache
  as in the trace.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from core.atomicfile import atomic_write
from core.report_schema import BenchmarkConfig
from loadgen.errors import BenchError
from loadgen.workloads.dataset import Prompt, dataset_of
from loadgen.workloads.tokenizing import PromptTokenizer
from loadgen.workloads.trace import BLOCK_TOKENS, TraceRow
from loadgen.workloads.workload import WorkItem

MAX_ADJUSTMENTS = 12
DEFAULT_PROMPTS = 256  # duration-bounded runs cycle through this many
CORPUS_CHARS = 20_000  # of the bundled corpus, tokenized once for the pool of ordinary token ids


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
        overhead = tok.chat_count("")
        if total <= overhead:
            raise BenchError(f"RANDOM_INPUT_LEN={total} is not above the chat template's own {overhead} tokens: "
                             "choose more")
        failure = f"DATASET=random: could not size a prompt to {total} tokens"
        texts = (exact_text(tok, pool, rng, [int(i) for i in rng.choice(pool, total - overhead)], total, tok.chat_count,
                            failure) for _ in range(count))
        lines = [json.dumps({"id": f"random-{i}", "task": "random", "prompt": text}, ensure_ascii=False)
                 for i, text in enumerate(texts)]
        return "\n".join(lines) + "\n"

    path = generated_path(logs_dir, "random", plan, f"in{total}_n{count}_seed{plan.seed}.jsonl")
    return write_once(path, corpus, open_tokenizer, build)


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


def row_ids(row: TraceRow, index: int, seed: int, pool: np.ndarray, blocks: dict[int, list[int]],
            wanted: int) -> list[int]:
    """The first ``wanted`` token ids of row ``index``: its hash blocks' ids (each drawn once, seeded by ``seed``
    and the id, kept in ``blocks``), then its own random ids (seeded by ``seed`` and ``index``)."""
    ids: list[int] = []
    for h in row.hash_ids:
        if h not in blocks:
            block_rng = np.random.default_rng([seed, 2, h])  # apart from the random and prefix streams of SEED
            blocks[h] = [int(i) for i in block_rng.choice(pool, BLOCK_TOKENS)]
        ids += blocks[h]
    if len(ids) < wanted:
        own = np.random.default_rng([seed, 3, index])
        ids += [int(i) for i in own.choice(pool, wanted - len(ids))]
    return ids[:wanted]


def trace_prompts_file(plan: BenchmarkConfig, rows: Sequence[tuple[float, TraceRow]], logs_dir: Path,
                       corpus: Path, open_tokenizer: Callable[[], PromptTokenizer]) -> tuple[Path, int]:
    """Write (once per model, trace content, row count and seed) the prompt JSONL of the replay's ``rows``; return
    it and how many rows were raised to the template's minimum.

    Raises:
        BenchError: no tokenizer is usable, or a prompt cannot be sized.
    """
    raised = 0

    def build(tok: PromptTokenizer, pool: np.ndarray) -> str:
        nonlocal raised
        overhead = tok.chat_count("")
        blocks: dict[int, list[int]] = {}
        lines = []
        for index, (_, row) in enumerate(rows):
            total = max(row.input_tokens, overhead + 1)
            raised += total != row.input_tokens
            rng = np.random.default_rng([plan.seed, 4, index])
            ids = row_ids(row, index, plan.seed, pool, blocks, total - overhead)
            failure = f"TRACE: could not size a prompt to {total} tokens"
            prompt = exact_text(tok, pool, rng, ids, total, tok.chat_count, failure)
            lines.append(json.dumps({
                "id": f"trace-{row.line}", "task": "trace", "prompt": prompt,
                "max_tokens": max(1, row.output_tokens), "at_s": row.at_s, "input_tokens": total,
            }, ensure_ascii=False))
        return "\n".join(lines) + "\n"

    tail = f"{(plan.trace_sha256 or 'x')[:12]}_n{len(rows)}_seed{plan.seed}.jsonl"
    return write_once(generated_path(logs_dir, "trace", plan, tail), corpus, open_tokenizer, build), raised


def trace_requests(plan: BenchmarkConfig) -> list[tuple[float, WorkItem]]:
    """The replay as a Locust process sends it: ``(s after the start / TRACE_SPEED, request)`` per row of the plan's
    trace prompts file (empty without TRACE).

    Raises:
        OSError: the file cannot be read. ValueError: a line is not one this module wrote.
    """
    if plan.trace_file is None or plan.dataset_file is None:
        return []
    speed = plan.trace_speed or 1.0
    entries = [json.loads(line) for line in Path(plan.dataset_file).read_text(encoding="utf-8").splitlines() if line]
    if not entries:
        raise ValueError(f"{plan.dataset_file}: no trace rows")
    start = float(entries[0]["at_s"])
    return [
        ((float(e["at_s"]) - start) / speed,
         WorkItem(Prompt(str(e["id"]), "trace", [{"role": "user", "content": str(e["prompt"])}]), int(e["max_tokens"])))
        for e in entries
    ]
