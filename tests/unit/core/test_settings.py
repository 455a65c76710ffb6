"""The settings object: defaults, parsing and readable errors for bad values."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from core.knobs import ClusterKnobs, CostKnobs, FolderKnobs, SecurityKnobs, ServingKnobs
from core.knobs.load_knobs import BenchmarkKnobs, SweepKnobs
from core.parsing import parse_duration_s
from core.settings import Settings, describe_validation_error


def make(**env: str) -> Settings:
    return Settings(_env_file=None, **env)  # type: ignore[call-arg,arg-type]


def test_defaults_match_the_seed() -> None:
    """Unset knobs give the seed's benchmark (50 users, 200 requests, 10 warmup) and ports."""
    s = make()
    assert (s.concurrency, s.requests, s.warmup, s.duration) == (50, 200, 10, None)
    assert (s.vllm_port, s.ui_port, s.sidecar_port, s.locust_web_port) == (8100, 8000, 8200, 8089)
    assert s.requested_model == "baidu/ERNIE-4.5-0.3B-PT" and not s.model_was_set


def test_environment_variables_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Upper-case environment variables set the fields."""
    monkeypatch.setenv("CONCURRENCY", "8")
    monkeypatch.setenv("MODEL", "synthetic:tiny")
    s = Settings(_env_file=None)  # type: ignore[call-arg]
    assert s.concurrency == 8 and s.model == "synthetic:tiny" and s.model_was_set


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90.0), ("90s", 90.0), ("1.5m", 90.0), ("2h", 7200.0), ("500ms", 0.5)]
)
def test_duration_formats(text: str, seconds: float) -> None:
    """Durations accept plain seconds and ms/s/m/h suffixes."""
    assert parse_duration_s(text) == pytest.approx(seconds)


def test_duration_disables_default_request_count() -> None:
    """With DURATION set, the run is time-bounded (no default REQUESTS)."""
    s = make(duration="30s")
    assert s.duration == 30.0 and s.requests is None


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"concurrency": "0"}, "CONCURRENCY=0"),
        ({"requests": "-1"}, "REQUESTS=-1"),
        ({"duration": "abc"}, "DURATION=abc"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], needle: str) -> None:
    """Each bad value produces a message that names the variable and its value."""
    with pytest.raises(ValidationError) as info:
        make(**env)
    assert needle in describe_validation_error(info.value)


def test_blank_model_counts_as_unset() -> None:
    """MODEL= (empty, as in a copied .env) means the default model."""
    assert not make(model="  ").model_was_set


def test_urls_dial_loopback_for_wildcard_bind() -> None:
    """A 0.0.0.0 bind address is dialled as 127.0.0.1; explicit base URLs win."""
    assert make(vllm_host="0.0.0.0").vllm_url == "http://127.0.0.1:8100"
    assert make(vllm_base_url="http://vllm:8100/").vllm_url == "http://vllm:8100"


def test_fields_keep_the_group_order() -> None:
    """Settings has exactly the groups' fields, group after group (serving, security, folders, benchmark, sweep,
    cluster, cost): the flags, ``--help`` and the schema list knobs in this order, whatever order pydantic merges the bases
    in."""
    groups = (ServingKnobs, SecurityKnobs, FolderKnobs, BenchmarkKnobs, SweepKnobs, ClusterKnobs, CostKnobs)
    assert list(Settings.model_fields) == [name for group in groups for name in group.model_fields]
    assert list(Settings.model_fields)[:2] == ["model", "vllm_model_path"]
    assert list(Settings.model_fields)[-1] == "energy_price_per_kwh"


def test_a_wildcard_bind_address_is_dialled_on_loopback() -> None:
    """``client_host``: one rule for every wildcard a bind knob takes (Locust's MASTER_BIND_HOST ``*`` included)."""
    from core.knobs import client_host

    assert [client_host(h) for h in ("0.0.0.0", "::", "", "*")] == ["127.0.0.1"] * 4
    assert client_host("10.0.0.5") == "10.0.0.5"
