"""Every knob is validated before load, naming the variable; datasets accept a BOM, ShareGPT JSONL and role/content."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from core.settings import Settings, describe_validation_error
from loadtest.dataset import load_dataset


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
    ],
)
def test_bad_knob_stops_with_its_name(env: dict[str, str], named: str) -> None:
    """A non-finite, out-of-range or contradictory value is refused, and the message names the variable."""
    with pytest.raises(ValidationError) as caught:
        Settings(_env_file=None, **env)  # type: ignore[call-arg, arg-type]
    assert named in describe_validation_error(caught.value)


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
    from core.cli import parse
    from loadtest.bench import parser

    both = Settings(_env_file=None, duration="30", requests=10)  # type: ignore[call-arg, arg-type]
    assert len(both.ignored_knobs) == 1 and "REQUESTS=10" in both.ignored_knobs[0]
    assert "DURATION=30 s" in both.ignored_knobs[0]
    assert Settings(_env_file=None, duration="30").ignored_knobs == []  # type: ignore[call-arg, arg-type]
    assert Settings(_env_file=None, requests=10).ignored_knobs == []  # type: ignore[call-arg]
    monkeypatch.setenv("REQUESTS", "200")
    _, settings = parse(parser(), ["--duration", "30"])
    assert settings.duration == 30 and "REQUESTS=200" in settings.ignored_knobs[0]
