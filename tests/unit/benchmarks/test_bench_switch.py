"""The switch benchmark's figures from its stream's answers (pure)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from bench_switch import Answer, figures


def answer(sent: float, ttft: float | None, model: str = "a", ok: bool = True, cut: bool = False) -> Answer:
    """An answer sent at ``sent`` whose first token came ``ttft`` s later."""
    first = None if ttft is None else sent + ttft
    return Answer(sent, first, sent + 2, ok, cut, model if ok or cut else None, None if ok else "x")


def test_figures_count_failures_cuts_gaps_and_the_time_to_the_new_model() -> None:
    """Only answers sent in the window count; the gap is between successful first tokens (a failed request leaves
    a hole); the time to the new model runs from the command to its first token."""
    answers = [answer(0.0, 0.5), answer(0.5, 0.5), answer(1.0, None, ok=False), answer(1.5, 2.0, cut=True, ok=False),
               answer(2.0, 0.4, model="b"), answer(2.5, 0.5, model="b"), answer(9.0, 0.5, model="b")]
    f = figures(answers, 0.0, 5.0, "b")
    assert (f.requests, f.failed, f.cut) == (6, 1, 1)
    assert f.longest_gap_s == 1.4 and f.slowest_ttft_s == 0.5  # 1.0 -> 2.4: the failed and the cut left a hole
    assert f.to_new_model_s == 2.4
    assert figures(answers, 0.0, 5.0, "b", new_after_s=2.2).to_new_model_s == 3.0  # sent after the swap only
    assert figures(answers, 0.0, 5.0, "c").to_new_model_s is None
