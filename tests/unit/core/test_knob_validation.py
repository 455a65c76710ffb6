"""Every knob is validated before load, naming the variable; datasets accept a BOM, ShareGPT JSONL and role/content."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from core.settings import PROJECT_ROOT, Settings, describe_validation_error
from loadgen.workloads.dataset import load_dataset


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"input_mix": "short:nan"}, "INPUT_MIX"),
        ({"input_mix": "short:inf,long:1"}, "INPUT_MIX"),
        ({"input_mix": "short:-1"}, "INPUT_MIX"),
        ({"input_mix": "short:1,short:2"}, "INPUT_MIX"),
        ({"rate": "nan"}, "RATE"),
        ({"rate": "inf"}, "RATE"),
        ({"rate": "0"}, "RATE"),
        ({"burstiness": "inf"}, "BURSTINESS"),
        ({"burstiness": "0"}, "BURSTINESS"),
        ({"temperature": "nan"}, "TEMPERATURE"),
        ({"output_len_p95": "100"}, "OUTPUT_LEN_P95"),  # P95 below the mean
        ({"output_len_p95": "1e9"}, "OUTPUT_LEN_P95"),  # no log-normal has it
        ({"slo": "ttft_ms<=500,ttft_ms<=300"}, "SLO"),
        ({"slo": "ttft_ms<=nan"}, "SLO"),
        ({"gate": "v1\n"}, "GATE"),
        ({"max_error_rate_pct": "150"}, "MAX_ERROR_RATE_PCT"),
        ({"duration": "-5"}, "DURATION"),
        # values that parse but cannot mean anything
        ({"slo": "ttft_ms<=0"}, "SLO"),
        ({"slo": "e2e_ms<=500,tpot_ms<=0"}, "SLO"),
        ({"duration": "0.0001ms"}, "DURATION"),
        ({"duration": "500ms"}, "DURATION"),
        ({"rate": "1e-9"}, "RATE"),  # with the default REQUESTS: one request in 31 years, the watchdog stops first
        ({"rate": "0.01", "duration": "60"}, "RATE"),  # 0.6 requests expected in the window
        ({"rate": "1", "rate_end": "1e-9"}, "RATE_END"),
        ({"sweep": "rate:1e-6,2"}, "SWEEP"),
        ({"rate": "0.001", "watchdog_s": "120", "requests": "5"}, "RATE"),
        ({"watchdog_s": "0.001"}, "WATCHDOG_S"),
        ({"gate_error_rate_pp": "150"}, "GATE_ERROR_RATE_PP"),
        ({"output_len_cap": "10"}, "OUTPUT_LEN_CAP"),  # below the sampled mean (120)
        ({"gpu_sample_interval_s": "1e-9"}, "GPU_SAMPLE_INTERVAL_S"),
        ({"engine_metrics_interval_s": "0.000001"}, "ENGINE_METRICS_INTERVAL_S"),
        ({"ui_status_interval_s": "0"}, "UI_STATUS_INTERVAL_S"),
        ({"slo_attainment_pct": "0"}, "SLO_ATTAINMENT_PCT"),
        ({"max_error_rate_pct": "-1"}, "MAX_ERROR_RATE_PCT"),
        ({"concurrency": "0"}, "CONCURRENCY"),
        ({"requests": "0"}, "REQUESTS"),
        ({"request_timeout_s": "0"}, "REQUEST_TIMEOUT_S"),
        ({"repeat": "0"}, "REPEAT"),
        ({"prefix_count": "4"}, "PREFIX_COUNT"),  # without PREFIX_LEN it would be ignored
    ],
)
def test_bad_knob_stops_with_its_name(env: dict[str, str], named: str) -> None:
    """A non-finite, out-of-range or contradictory value is refused, and the message names the variable."""
    with pytest.raises(ValidationError) as caught:
        Settings(_env_file=None, **env)  # type: ignore[call-arg, arg-type]
    assert named in describe_validation_error(caught.value)


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({"SLO": "ttft_ms<=0"}, "can never be met"),
        ({"RATE": "1e-9"}, "one request every 31.7 years"),
        ({"RATE": "0.01", "DURATION": "60"}, "less than one"),
        ({"DURATION": "0.0001ms"}, "too short to measure anything"),
    ],
)
def test_meaningless_values_exit_2_before_any_load(env: dict[str, str], reason: str) -> None:
    """`python -m loadgen.command.benchmark` with a value that cannot mean anything exits 2 naming the knob and why, before
    it reaches any server (VLLM_BASE_URL points nowhere)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RATE", "SLO", "DURATION", "REQUESTS"))}
    done = subprocess.run(
        [sys.executable, "-m", "loadgen.command.benchmark"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120,
        env={**base, "VLLM_BASE_URL": "http://127.0.0.1:9", **env},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    knob = next(iter(env))
    assert knob in done.stderr and reason in done.stderr, done.stderr


def test_rates_that_send_requests_are_kept() -> None:
    """A slow rate that still sends requests in the run (0.05 req/s over 60 s: 3 expected) passes, as does a
    one-request-a-minute rate with the default watchdog (360 s)."""
    assert Settings(_env_file=None, rate=0.05, duration="60").rate == 0.05  # type: ignore[call-arg, arg-type]
    assert Settings(_env_file=None, rate=1 / 60).rate == pytest.approx(1 / 60)  # type: ignore[call-arg]
    assert Settings(_env_file=None, slo="ttft_ms<=0.5").slo == {"ttft_ms": 0.5}  # type: ignore[call-arg, arg-type]


def test_fixed_lengths_skip_the_lognormal_check() -> None:
    """MAX_TOKENS alone means fixed lengths: the sampled-length shape is not checked then."""
    assert Settings(_env_file=None, max_tokens=64, output_len_p95=10).fixed_max_tokens == 64  # type: ignore[call-arg]


def test_bom_jsonl_keeps_its_first_record(tmp_path: Path) -> None:
    """A JSONL file that starts with a UTF-8 byte-order mark loses no record."""
    path = tmp_path / "bom.jsonl"
    lines = [json.dumps({"prompt": f"问题 {i}"}, ensure_ascii=False) for i in range(3)]
    path.write_bytes("\ufeff".encode() + "\n".join(lines).encode())
    dataset = load_dataset(path)
    assert (len(dataset.prompts), dataset.skipped) == (3, 0)


def test_bom_json_list_parses(tmp_path: Path) -> None:
    """A ShareGPT JSON list with a byte-order mark parses."""
    path = tmp_path / "bom.json"
    data = [{"conversations": [{"from": "human", "value": "你好"}]}]
    path.write_bytes("\ufeff".encode() + json.dumps(data, ensure_ascii=False).encode())
    assert len(load_dataset(path).prompts) == 1


def test_sharegpt_jsonl_and_role_content_turns(tmp_path: Path) -> None:
    """ShareGPT conversations one per line, with from/value or role/content turns, are all read."""
    path = tmp_path / "sharegpt.jsonl"
    rows = [
        {"conversations": [{"from": "human", "value": "一"}, {"from": "gpt", "value": "答"}, {"from": "human", "value": "二"}]},
        {"conversations": [{"role": "system", "content": "sys"}, {"role": "user", "content": "三"}]},
        {"conversations": [{"role": "assistant", "content": "no user turn"}]},
    ]
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    dataset = load_dataset(path)
    assert [p.messages[-1]["content"] for p in dataset.prompts] == ["二", "三"]
    assert dataset.prompts[0].messages[1] == {"role": "assistant", "content": "答"}
    assert dataset.skipped == 1


def test_requests_beside_duration_is_a_warning_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--duration 30 --requests 10`` (or REQUESTS from the environment with a CLI duration) runs, time-bounded,
    with a warning naming both knobs; DURATION alone or REQUESTS alone warns of nothing."""
    from core.flags import parse
    from loadgen.command.benchmark import parser

    both = Settings(_env_file=None, duration="30", requests=10)  # type: ignore[call-arg, arg-type]
    assert len(both.ignored_knobs) == 1 and "REQUESTS=10" in both.ignored_knobs[0]
    assert "DURATION=30 s" in both.ignored_knobs[0]
    assert Settings(_env_file=None, duration="30").ignored_knobs == []  # type: ignore[call-arg, arg-type]
    assert Settings(_env_file=None, requests=10).ignored_knobs == []  # type: ignore[call-arg]
    monkeypatch.setenv("REQUESTS", "200")
    _, settings = parse(parser(), ["--duration", "30"])
    assert settings.duration == 30 and "REQUESTS=200" in settings.ignored_knobs[0]


def test_concurrency_beside_a_rate_or_a_concurrency_sweep_is_a_warning() -> None:
    """``--concurrency 4 --request-rate 2``: the open loop ignores the concurrency (it does not cap what is in flight)
    and says so, naming the knob that does; so does ``--concurrency 3 --sweep concurrency:1,2``. A rate with
    ``--max-concurrency`` (MAX_IN_FLIGHT), a rate alone, or an automatic sweep's CONCURRENCY warn of nothing."""
    from core.flags import parse
    from loadgen.command.benchmark import parser

    _, with_rate = parse(parser(), ["--concurrency", "4", "--request-rate", "2"])
    assert len(with_rate.ignored_knobs) == 1, with_rate.ignored_knobs
    assert "CONCURRENCY=4" in with_rate.ignored_knobs[0] and "--max-concurrency 4" in with_rate.ignored_knobs[0]
    _, capped = parse(parser(), ["--max-concurrency", "8", "--request-rate", "4"])
    assert capped.max_in_flight == 8 and capped.ignored_knobs == []
    assert Settings(_env_file=None, rate=2).ignored_knobs == []  # type: ignore[call-arg]
    _, swept = parse(parser(), ["--concurrency", "3", "--sweep", "concurrency:1,2"])
    assert len(swept.ignored_knobs) == 1 and "SWEEP=concurrency:1,2" in swept.ignored_knobs[0]
    assert Settings(_env_file=None, concurrency=4, sweep="auto").ignored_knobs == []  # type: ignore[call-arg]
