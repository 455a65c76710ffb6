"""Remote load workers' pure parts (loadgen/locust_side/joining.py): the token proof, the clock offset, row batches."""

from __future__ import annotations

import pytest

from core.records import RequestRecord
from loadgen.locust_side.joining import (
    BATCH_ROWS,
    BATCH_S,
    ClockProbe,
    RowBatcher,
    best_offset,
    master_time_row,
    nonce,
    proof,
    verify,
)


def test_the_proof_holds_only_for_the_token_the_challenge_and_the_client() -> None:
    challenge = nonce()
    answer = proof("tok", challenge, "worker-a")
    assert verify("tok", challenge, "worker-a", answer)
    assert not verify("other", challenge, "worker-a", answer)
    assert not verify("tok", nonce(), "worker-a", answer)  # a replayed answer to an older challenge
    assert not verify("tok", challenge, "worker-b", answer)  # another client's answer
    assert "tok" not in answer and len(answer) == 64
    assert nonce() != nonce()


def test_the_offset_is_the_workers_clock_minus_the_masters_within_half_the_round_trip() -> None:
    # worker clock 2.5 s ahead; 10 ms each way: t0=100 (master), tw=100.010+2.5 (worker), t1=100.020 (master)
    probe = ClockProbe(t0=100.0, tw=102.51, t1=100.02)
    assert probe.offset_s == pytest.approx(2.5)
    assert probe.rtt_s == pytest.approx(0.02)
    # asymmetric paths: the error stays within rtt/2
    skewed = ClockProbe(t0=100.0, tw=100.019 + 2.5, t1=100.02)
    assert abs(skewed.offset_s - 2.5) <= skewed.rtt_s / 2


def test_the_tightest_probe_is_kept() -> None:
    probes = [ClockProbe(0.0, 5.2, 0.4), ClockProbe(1.0, 6.01, 1.02), ClockProbe(2.0, 7.1, 2.1)]
    assert best_offset(probes) is probes[1]
    with pytest.raises(ValueError):
        best_offset([])


def test_rows_go_in_batches_and_none_is_left_behind() -> None:
    sent: list[list[str]] = []
    now = [0.0]
    batcher = RowBatcher(sent.append, lambda: now[0])
    for i in range(BATCH_ROWS + 3):
        batcher.add(f"row{i}")
    assert [len(b) for b in sent] == [BATCH_ROWS]
    assert not batcher.due()
    now[0] += BATCH_S
    assert batcher.due()
    batcher.flush()
    assert [len(b) for b in sent] == [BATCH_ROWS, 3] and batcher.sent == BATCH_ROWS + 3
    batcher.flush()  # nothing queued: nothing sent
    assert len(sent) == 2


def test_a_rows_times_move_to_the_masters_clock() -> None:
    row = RequestRecord(request_id="r1", started_at=1000.0, scheduled_at=999.5, ok=True).model_dump_json()
    moved = RequestRecord.model_validate_json(master_time_row(row, 2.5))
    assert moved.started_at == pytest.approx(997.5) and moved.scheduled_at == pytest.approx(997.0)
    closed = RequestRecord(request_id="r2", started_at=10.0, ok=True).model_dump_json()
    assert RequestRecord.model_validate_json(master_time_row(closed, -1.0)).scheduled_at is None
