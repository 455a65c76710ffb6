"""The capacity check (loadgen/orchestrate/measured_run.py): the warm-up's prefill rate decides whether the first wave of a closed-loop
load gets its first tokens within REQUEST_TIMEOUT_S, with the figures of the three hosts measured."""

from __future__ import annotations

from core.records import RequestRecord
from loadgen.orchestrate.measured_run import warmup_capacity


def _warmup(prefill_tok_per_s: float, prompt_tokens: int = 365, at_once: int = 10, itl_ms: float = 60.0,
            output_tokens: int = 120) -> list[RequestRecord]:  # fmt: skip
    """``at_once`` requests sent together at t=0 to an engine prefilling one prompt after another."""
    rows = []
    for i in range(at_once):
        ttft_ms = (i + 1) * prompt_tokens / prefill_tok_per_s * 1000
        rows.append(RequestRecord(request_id=f"w{i}", phase="warmup", started_at=1000.0, ok=True, ttft_ms=ttft_ms,
                                  e2e_ms=ttft_ms + output_tokens * itl_ms, prompt_tokens=prompt_tokens,
                                  output_tokens=output_tokens))  # fmt: skip
    return rows[::-1]  # rows are appended as requests end, not as they were sent


def test_the_avx512_host_serves_the_seed_load() -> None:
    """330 prompt tok/s: 50 users of 365-token prompts get their last first token after ≈ 55 s: no refusal, no
    warning at the 300 s timeout."""
    capacity = warmup_capacity(_warmup(330), 10, 50, 300)
    assert capacity is not None
    assert round(capacity.prefill_tok_per_s) == 330 and round(capacity.first_wave_ttft_s) == 55
    assert capacity.refusal() is None and capacity.warning() is None


def test_an_engine_emulating_bf16_is_refused_with_the_load_it_can_serve() -> None:
    """41 prompt tok/s (AVX2, bfloat16): ≈ 445 s for the last first token at 50 users, over 300 s: refused, naming
    --concurrency 16 (half the timeout) and the knobs."""
    capacity = warmup_capacity(_warmup(41), 10, 50, 300)
    assert capacity is not None
    refusal = capacity.refusal()
    assert refusal is not None and "about 445 s" in refusal and "--concurrency 16" in refusal
    assert "--request-timeout" in refusal and "CAPACITY_CHECK=0" in refusal
    assert capacity.servable_users == 16
    assert warmup_capacity(_warmup(41), 10, 16, 300).refusal() is None  # type: ignore[union-attr]


def test_a_first_wave_near_the_timeout_is_a_warning() -> None:
    """159 prompt tok/s (AVX2, float32): ≈ 115 s at 50 users passes; at 100 users ≈ 230 s warns (over half the
    timeout) without refusing."""
    assert warmup_capacity(_warmup(159), 10, 50, 300).warning() is None  # type: ignore[union-attr]
    capacity = warmup_capacity(_warmup(159), 10, 100, 300)
    assert capacity is not None and capacity.refusal() is None
    assert capacity.warning() is not None and "expect timeouts" in (capacity.warning() or "")


def test_only_the_requests_sent_together_measure_the_prefill() -> None:
    """WARMUP=10 at CONCURRENCY=2 sends two at a time: the rate is of the first two sent, not of all ten."""
    rows = _warmup(100, at_once=2) + [r.model_copy(update={"started_at": 2000.0 + i, "request_id": f"x{i}"})
                                      for i, r in enumerate(_warmup(100, at_once=8))]  # fmt: skip
    capacity = warmup_capacity(rows, 2, 2, 300)
    assert capacity is not None and round(capacity.prefill_tok_per_s) == 100 and capacity.at_once == 2


def test_a_warmup_that_cannot_tell_gives_no_verdict() -> None:
    """Fewer than two answers with prompt tokens and a first token: no estimate (the load is sent as asked)."""
    assert warmup_capacity(_warmup(100)[:1], 10, 50, 300) is None
    failed = [r.model_copy(update={"ok": False}) for r in _warmup(100)]
    assert warmup_capacity(failed, 10, 50, 300) is None
    unsized = [r.model_copy(update={"prompt_tokens": None}) for r in _warmup(100)]
    assert warmup_capacity(unsized, 10, 50, 300) is None
