"""TRACE: the trace's rows as token-exact prompts (written once by the benchmark, ``logs/datasets/trace_….jsonl``: a
prompt JSONL with each row's ``max_tokens`` and ``at_s``, the plan's ``dataset_file``) and as the Locust processes'
schedule and requests. Each prompt's chat is exactly the row's input length, sized as DATASET=random does (a row
shorter than the template is raised to one token above it); a Mooncake row starts with its ``hash_ids`` blocks,
drawn once per id (seeded by SEED), so rows naming the same ids share vLLM's prefix cache as in the trace.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from core.report_schema import BenchmarkConfig
from loadgen.workloads.dataset import Prompt
from loadgen.workloads.randomdata import exact_chat_text, generated_path, write_once
from loadgen.workloads.tokenizing import PromptTokenizer
from loadgen.workloads.trace import BLOCK_TOKENS, TraceRow
from loadgen.workloads.workload import WorkItem


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
            prompt = exact_chat_text(tok, pool, rng, ids, total, "TRACE")
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
