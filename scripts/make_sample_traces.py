"""Write the project's two small sample traces (made here, not downloaded) to loadgen/workloads/data/traces/:
a BurstGPT-format CSV and a Mooncake-format JSONL, seeded so a rerun writes the same bytes.

``.venvs/app/bin/python scripts/make_sample_traces.py``
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent.parent / "loadgen" / "workloads" / "data" / "traces"


def burstgpt(rows: int = 40, seed: int = 7) -> str:
    """BurstGPT columns; bursty arrivals (gamma gaps, shape 0.5, mean 0.25 s); short chats and longer API calls."""
    rng = np.random.default_rng(seed)
    lines = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    t = 0.0
    for i in range(rows):
        api = i % 4 == 3
        request = int(rng.integers(300, 900) if api else rng.integers(20, 300))
        response = 0 if i == 17 else int(rng.integers(4, 48))  # row 17: a failed request, as BurstGPT logs them
        lines.append(f"{t:.3f},{'GPT-4' if api else 'ChatGPT'},{request},{response},{request + response},"
                     f"{'API log' if api else 'Conversation log'}")
        t += float(rng.gamma(0.5, 0.5))
    return "\n".join(lines) + "\n"


def mooncake(rows: int = 32, seed: int = 11) -> str:
    """Mooncake fields; four documents of 1-3 shared 512-token blocks, each asked about several times with a
    question of its own (the last, partial block), Poisson arrivals (mean 0.3 s), ms timestamps."""
    rng = np.random.default_rng(seed)
    documents = [[0, 1], [2], [3, 4, 5], [6]]
    lines = []
    t_ms = 0
    next_id = 7
    for _ in range(rows):
        blocks = list(documents[int(rng.integers(len(documents)))])
        question = int(rng.integers(20, 400))
        length = len(blocks) * 512 + question
        blocks.append(next_id)  # the question's own block: no other row names it
        next_id += 1
        lines.append(json.dumps({"timestamp": t_ms, "input_length": length,
                                 "output_length": int(rng.integers(4, 40)), "hash_ids": blocks}))
        t_ms += int(rng.exponential(300))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "burstgpt_sample.csv").write_text(burstgpt(), encoding="utf-8")
    (OUT / "mooncake_sample.jsonl").write_text(mooncake(), encoding="utf-8")
    print(f"wrote {OUT}/burstgpt_sample.csv and {OUT}/mooncake_sample.jsonl")
