"""Per-message timing of a streamed answer: pure maths on monotonic timestamps, and the line shown under it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    """Timing of one streamed answer. Milliseconds; ``None`` where it cannot be known."""

    total_ms: float
    ttft_ms: float | None  # "Prompt" (the seed's label): request sent -> first content token (TTFT)
    gen_ms: float | None  # "Gen": first content token -> end of stream
    prompt_tokens: int | None
    completion_tokens: int | None
    tokens_per_s: float | None  # decode speed: tokens after the first, per second of Gen
    energy_j: float | None = None  # the engine's devices over the answer (the sidecar's GET /energy), J
    think_ms: float | None = None  # reasoning models: first reasoning token -> first answer token ("Think")
    answer_ms: float | None = None  # reasoning models: first answer token -> end of stream ("Answer")
    reasoning_tokens: int | None = None  # reasoning models: of completion_tokens, the reasoning ones


def compute_timing(
    start_s: float,
    first_token_s: float | None,
    end_s: float,
    prompt_tokens: int | None,
    completion_tokens: int | None,
    *,
    first_answer_s: float | None = None,
    first_reasoning_s: float | None = None,
    reasoning_tokens: int | None = None,
) -> Timing:
    """Timing from monotonic timestamps in seconds (request sent, first token of any kind or None, stream end).

    A reasoning model's answer (``first_reasoning_s`` given) splits Gen in two: ``think_ms`` from the first
    reasoning token to the first answer token (the rest of the stream when the answer never began), ``answer_ms``
    from the first answer token to the end.

    ``tokens_per_s`` is ``(completion_tokens - 1) / Gen``: the first token's time is in ``Prompt`` (TTFT), so it
    is not counted again. It is ``None`` when there are fewer than two tokens or no measurable Gen time.

    Raises:
        ValueError: timestamps out of order (end before start, or first token outside [start, end]).
    """
    if end_s < start_s:
        raise ValueError(f"end {end_s} is before start {start_s}")
    if first_token_s is not None and not start_s <= first_token_s <= end_s:
        raise ValueError(f"first token {first_token_s} is outside [{start_s}, {end_s}]")
    total_ms = (end_s - start_s) * 1000.0
    ttft_ms = None if first_token_s is None else (first_token_s - start_s) * 1000.0
    gen_ms = None if first_token_s is None else (end_s - first_token_s) * 1000.0
    tokens_per_s = None
    if gen_ms is not None and gen_ms > 0 and completion_tokens is not None and completion_tokens > 1:
        tokens_per_s = (completion_tokens - 1) / (gen_ms / 1000.0)
    think_ms = answer_ms = None
    if first_reasoning_s is not None:
        answer_at = first_answer_s if first_answer_s is not None else end_s
        think_ms = max(0.0, answer_at - first_reasoning_s) * 1000.0
        answer_ms = None if first_answer_s is None else (end_s - first_answer_s) * 1000.0
    return Timing(total_ms, ttft_ms, gen_ms, prompt_tokens, completion_tokens, tokens_per_s, think_ms=think_ms,
                  answer_ms=answer_ms, reasoning_tokens=reasoning_tokens)  # fmt: skip


NBSP = "\u00a0"  # joins the words of one field, so a narrow chat column wraps only between fields
FIELD_SEPARATOR = " | "
TIMING_LEGEND = (
    "Prompt = time to first token (queueing + reading the prompt) · Gen = first token to the end · "
    "tok/s = tokens after the first, per second of Gen"
)
REASONING_LEGEND = (
    "Prompt = time to the first token (thinking or answer) · Think = first thinking token to the answer's first "
    "token · Answer = the answer's first token to the end · tok/s = tokens after the first, per second of both"
)


ENERGY_LEGEND = (
    "Energy = what the engine's GPUs (or the host's CPU packages) used while the answer streamed, other chats "
    "included (docs/energy.md)"
)


def timing_legend(timing: Timing) -> str:
    """The legend under :func:`format_timing`'s line: :data:`TIMING_LEGEND`, or :data:`REASONING_LEGEND` for a
    reasoning model's answer; and the energy's when the line shows it."""
    legend = REASONING_LEGEND if timing.think_ms is not None else TIMING_LEGEND
    return legend + (f" · {ENERGY_LEGEND}" if timing.energy_j is not None else "")


def energy_text(energy_j: float) -> str:
    """``12.3 J``, ``1,234 J``, ``0.412 J``."""
    return f"{energy_j:,.0f} J" if energy_j >= 100 else f"{energy_j:.3g} J"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}ms"


def format_timing(timing: Timing) -> str:
    """``Total: 824ms | Prompt: 123ms | Gen: 701ms | 52.3 tok/s | Tokens: 19 in, 37 out``; a reasoning model's
    ``Total: 2400ms | Prompt: 120ms | Think: 1500ms | Answer: 780ms | 50.1 tok/s | Tokens: 19 in, 120 out (80
    thinking)``; ``| Energy: 12.3 J`` after either when the answer's energy was measured.

    ``Prompt`` is the seed's label for the time to first token (explained by :data:`TIMING_LEGEND`). The spaces
    inside a field are non-breaking (U+00A0), so the line never wraps mid-field (``512`` / ``out``).
    """
    parts = [f"Total: {_ms(timing.total_ms)}", f"Prompt: {_ms(timing.ttft_ms)}"]
    if timing.think_ms is not None:  # a reasoning model: thinking apart from the answer
        parts += [f"Think: {_ms(timing.think_ms)}", f"Answer: {_ms(timing.answer_ms)}"]
    else:
        parts.append(f"Gen: {_ms(timing.gen_ms)}")
    if timing.tokens_per_s is not None:
        parts.append(f"{timing.tokens_per_s:.1f} tok/s")
    prompt, completion = ("?" if n is None else str(n) for n in (timing.prompt_tokens, timing.completion_tokens))
    thought = f" ({timing.reasoning_tokens} thinking)" if timing.reasoning_tokens is not None else ""
    parts.append(f"Tokens: {prompt} in, {completion} out{thought}")
    if timing.energy_j is not None:
        parts.append(f"Energy: {energy_text(timing.energy_j)}")
    return FIELD_SEPARATOR.join(part.replace(" ", NBSP) for part in parts)
