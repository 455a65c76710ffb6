"""Per-message timing of the chat UI: total / prompt (TTFT) / generation split and the line under the answer."""

from __future__ import annotations

import pytest

from ui.timing import NBSP, Timing, compute_timing, format_timing


def test_total_splits_into_prompt_and_generation() -> None:
    """Total = Prompt (request -> first token) + Gen (first token -> end), in milliseconds."""
    timing = compute_timing(10.0, 10.123, 10.824, prompt_tokens=19, completion_tokens=36)
    assert timing.total_ms == pytest.approx(824.0)
    assert timing.ttft_ms == pytest.approx(123.0)
    assert timing.gen_ms == pytest.approx(701.0)
    assert timing.ttft_ms is not None and timing.gen_ms is not None
    assert timing.ttft_ms + timing.gen_ms == pytest.approx(timing.total_ms)


def test_tokens_per_second_counts_tokens_after_the_first() -> None:
    """Decode speed is (completion_tokens - 1) / Gen: the first token belongs to the prompt phase."""
    timing = compute_timing(0.0, 0.5, 1.5, prompt_tokens=10, completion_tokens=101)
    assert timing.tokens_per_s == pytest.approx(100.0)


@pytest.mark.parametrize("completion_tokens", [None, 0, 1])
def test_tokens_per_second_unknown_without_two_tokens(completion_tokens: int | None) -> None:
    """With fewer than two tokens (or no usage) there is no decode speed to report."""
    timing = compute_timing(0.0, 0.5, 1.0, prompt_tokens=10, completion_tokens=completion_tokens)
    assert timing.tokens_per_s is None


def test_tokens_per_second_unknown_when_gen_is_zero() -> None:
    """A stream that ends at its first token has no measurable generation time."""
    assert compute_timing(0.0, 1.0, 1.0, prompt_tokens=3, completion_tokens=5).tokens_per_s is None


def test_no_first_token_leaves_prompt_and_gen_unknown() -> None:
    """Without any content token only the total is known."""
    timing = compute_timing(1.0, None, 1.25, prompt_tokens=None, completion_tokens=None)
    assert timing.total_ms == pytest.approx(250.0)
    assert timing.ttft_ms is None
    assert timing.gen_ms is None


@pytest.mark.parametrize(("start", "first", "end"), [(2.0, None, 1.0), (1.0, 0.5, 2.0), (1.0, 3.0, 2.0)])
def test_out_of_order_timestamps_raise(start: float, first: float | None, end: float) -> None:
    """End before start, or a first token outside the request, is a programming error."""
    with pytest.raises(ValueError):
        compute_timing(start, first, end, prompt_tokens=1, completion_tokens=1)


def test_format_matches_the_seed_layout() -> None:
    """The line reads ``Total: 824ms | Prompt: 123ms | Gen: 701ms`` followed by speed and token counts."""
    line = format_timing(compute_timing(0.0, 0.123, 0.824, prompt_tokens=19, completion_tokens=36)).replace(NBSP, " ")
    assert line.startswith("Total: 824ms | Prompt: 123ms | Gen: 701ms | ")
    assert "49.9 tok/s" in line
    assert line.endswith("Tokens: 19 in, 36 out")


def test_format_shows_unknowns_plainly() -> None:
    """Unknown values read ``n/a`` and ``?`` instead of breaking the line."""
    timing = Timing(
        total_ms=5.0, ttft_ms=None, gen_ms=None, prompt_tokens=None, completion_tokens=None, tokens_per_s=None
    )
    assert format_timing(timing).replace(NBSP, " ") == "Total: 5ms | Prompt: n/a | Gen: n/a | Tokens: ? in, ? out"


def test_line_breaks_only_between_fields() -> None:
    """Breakable spaces sit only around the ``|`` separators; within a field (``512 out``) they do not break."""
    line = format_timing(compute_timing(0.0, 0.2, 30.0, prompt_tokens=216, completion_tokens=512))
    fields = line.split(" | ")
    assert len(fields) == 5 and all(" " not in field for field in fields)
    assert fields[-1] == f"Tokens:{NBSP}216{NBSP}in,{NBSP}512{NBSP}out"
