"""Replicas behind vLLM's router: ports, URLs, device splits, shares and imbalance (pure functions of the settings)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

from core.enginestate import EngineState, write_engine_state
from core.fingerprint import fingerprint_fields, fingerprint_of
from core.replicas import (
    as_started,
    check_cluster,
    cluster_record,
    engine_url,
    front_in_use,
    imbalance_percent,
    record_cluster,
    replica_port,
    replicas,
    router_fields,
    router_in_use,
    router_metrics_port,
    serving_engine,
    shares_percent,
    split_devices,
)
from core.report_schema import BenchmarkConfig, Environment
from core.settings import Settings
from core.slots import write_slot


def make(**values: Any) -> Settings:
    """Settings from ``values`` only (no .env; a run folder of their own, so no stack's cluster record is read)."""
    values.setdefault("run_dir", Path(tempfile.mkdtemp(prefix="replicas-run-")))
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def test_one_replica_is_todays_stack() -> None:
    """REPLICAS=1 without ENGINE_URLS and no stack recorded (compose, a remote server): no router, the one engine on
    VLLM_PORT, no router fields in the config."""
    settings = make(vllm_port=8100)
    assert not router_in_use(settings) and not front_in_use(settings)
    assert replica_port(settings, 0) == 8100 and engine_url(settings) == settings.vllm_url
    assert [(r.name, r.url, r.local) for r in replicas(settings)] == [("vllm", settings.vllm_url, True)]
    assert router_fields(settings) == {}
    assert check_cluster(settings) is None


def test_make_up_puts_the_router_in_front_of_one_engine_in_its_serving_slot(tmp_path: Path) -> None:
    """`make up` (ENGINE_SWITCH=auto) records the router in front of the one engine: slot a on REPLICA_PORT_BASE,
    slot b after the router's metrics port; after a switch to b the engine's URL, /metrics URL, log, state and
    request files are slot b's; still a single engine for the reports (no router fields)."""
    settings = make(run_dir=tmp_path, vllm_port=8100, replica_port_base=9000)
    record_cluster(settings)
    assert front_in_use(settings) and not router_in_use(settings) and router_fields(settings) == {}
    assert replica_port(settings, 0) == 9000 and replica_port(settings, 0, "b") == 9002
    assert router_metrics_port(settings) == 9001
    assert engine_url(settings) == "http://127.0.0.1:9000" and settings.vllm_url == "http://127.0.0.1:8100"
    assert (settings.vllm_log_file.name, settings.engine_state_file.name) == ("vllm.log", "engine_state.json")
    write_slot(tmp_path, 0, "b")
    assert [r.url for r in replicas(settings)] == ["http://127.0.0.1:9002"] and engine_url(settings).endswith(":9002")
    assert (settings.vllm_log_file.name, settings.engine_state_file.name, settings.engine_request_file.name) == (
        "vllm-b.log", "engine_state-b.json", "engine_request-b.json")
    own = settings.model_copy(update={"engine_slot": "a"})  # an engine process names its own slot's files
    assert own.vllm_log_file.name == "vllm.log"
    assert engine_url(settings.model_copy(update={"vllm_base_url": "http://elsewhere:1"})) == "http://elsewhere:1"


def test_engine_switch_restart_at_make_up_keeps_the_engine_on_vllm_port(tmp_path: Path) -> None:
    """`ENGINE_SWITCH=restart make up`: no router, the engine on VLLM_PORT — whatever ENGINE_SWITCH later commands
    give; a record written before fronts existed means no front either."""
    record_cluster(make(run_dir=tmp_path, engine_switch="restart", vllm_port=8100))
    later = make(run_dir=tmp_path, engine_switch="blue-green", vllm_port=8100)
    assert not front_in_use(later) and replica_port(later, 0) == 8100
    cluster_record(later).write_text(json.dumps({"replicas": 1}))
    assert not front_in_use(later)


def test_the_slot_b_ports_must_be_free_of_the_services() -> None:
    """The ports a switch starts the new engines on are checked at `make up` like the replicas' own."""
    why = check_cluster(make(replica_port_base=8198, sidecar_port=8200))
    assert why is not None and "8200 (SIDECAR_PORT)" in why


def test_replicas_get_consecutive_ports_and_remote_engines_follow() -> None:
    """REPLICAS=3 on REPLICA_PORT_BASE=9000: replicas on 9000-9002, router metrics on 9003, then ENGINE_URLS."""
    settings = make(replicas=3, replica_port_base=9000, vllm_host="0.0.0.0",
                    engine_urls="http://gpu2:8000/, http://gpu3:8000")  # fmt: skip
    assert router_in_use(settings)
    assert [replica_port(settings, k) for k in range(3)] == [9000, 9001, 9002]
    assert router_metrics_port(settings) == 9003
    assert [(r.name, r.url, r.index) for r in replicas(settings)] == [
        ("vllm", "http://127.0.0.1:9000", 0), ("vllm-1", "http://127.0.0.1:9001", 1),
        ("vllm-2", "http://127.0.0.1:9002", 2), ("remote-0", "http://gpu2:8000", None),
        ("remote-1", "http://gpu3:8000", None)]  # fmt: skip
    fields = router_fields(settings)
    assert fields["replicas"] == 5 and fields["router_policy"] == "cache_aware" and fields["router_version"]


def test_engine_urls_alone_put_the_router_in_front() -> None:
    """ENGINE_URLS with REPLICAS=1: the router fronts the local engine and the remote one; ROUTER_POLICY recorded."""
    settings = make(engine_urls="http://other:8000", router_policy="round_robin")
    assert router_in_use(settings) and len(replicas(settings)) == 2
    assert router_fields(settings)["router_policy"] == "round_robin"


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"replicas": 0}, "REPLICAS=0 runs the router only"),
        ({"engine_urls": "gpu2:8000"}, "is no URL"),
        ({"replicas": 2, "replica_port_base": 8199, "sidecar_port": 8200}, "8200 (SIDECAR_PORT)"),
        ({"replicas": 2, "replica_port_base": 65535}, "top of the port range"),
    ],
)
def test_bad_clusters_are_refused_with_the_reason(values: dict[str, Any], words: str) -> None:
    """No engine, a URL without its scheme, a replica port on another service's, ports past 65535: each named."""
    why = check_cluster(make(**values))
    assert why is not None and words in why


def test_devices_split_contiguously() -> None:
    """GPUs or cores split into contiguous groups, the first groups one larger; fewer devices than replicas refused."""
    assert split_devices(["0", "1", "2", "3"], 2) == ["0,1", "2,3"]
    assert split_devices(["0", "1", "2", "3", "4"], 2) == ["0,1,2", "3,4"]
    assert split_devices(["0", "1"], 2) == ["0", "1"]
    with pytest.raises(ValueError, match="cannot be split"):
        split_devices(["0"], 2)


def test_shares_and_imbalance() -> None:
    """Even spread: 0 % imbalance; all on one of two: 100 %; 30/10: 50 %; nothing sent: None."""
    assert imbalance_percent([20, 20]) == 0.0
    assert imbalance_percent([40, 0]) == 100.0
    assert imbalance_percent([30, 10]) == pytest.approx(50.0)
    assert imbalance_percent([0, 0]) is None and imbalance_percent([]) is None
    assert shares_percent([30, 10]) == [75.0, 25.0]
    assert shares_percent([0, 0]) == [None, None]


def test_router_fields_join_the_fingerprint_only_with_the_router() -> None:
    """A single-engine config keeps the fingerprint fields it had; the router's replicas, policy and version are part
    of it when set, so a run behind the router never compares with a single engine's."""
    env = Environment()
    base = {"concurrency": 4, "max_tokens": 8, "dataset": "d.jsonl", "vllm_url": "http://x", "model": "m",
            "warmup_requests": 0, "temperature": 0.0, "seed": 1}
    single = BenchmarkConfig(**{**base, **router_fields(make())})
    clustered = BenchmarkConfig(**{**base, **router_fields(make(replicas=2, router_policy="round_robin"))})
    assert "replicas" not in fingerprint_fields(single, env)
    fields = fingerprint_fields(clustered, env)
    assert fields["replicas"] == 2 and fields["router_policy"] == "round_robin" and fields["router_version"]
    assert fingerprint_of(fields) != fingerprint_of(fingerprint_fields(single, env))


def test_later_commands_see_the_cluster_make_up_started(tmp_path: Path) -> None:
    """`REPLICAS=2 ROUTER_POLICY=round_robin make up` records its knobs: a later `make status` or `make benchmark`
    without them sees both replicas and the real policy; a knob set there wins; no or a corrupt record, or a value
    the knob would refuse, changes nothing."""
    started = make(run_dir=tmp_path, replicas=2, router_policy="round_robin")
    record_cluster(started)
    later = make(run_dir=tmp_path)
    assert [r.name for r in replicas(later)] == ["vllm", "vllm-1"] and router_in_use(later)
    assert router_fields(later)["router_policy"] == "round_robin"
    assert as_started(later).replicas == 2 and later.replicas == 1  # the command's own object is not changed
    assert not router_in_use(make(run_dir=tmp_path, replicas=1))  # set here: wins over the record
    cluster_record(started).write_text("{not json")
    assert not router_in_use(make(run_dir=tmp_path))
    cluster_record(started).write_text(json.dumps(["a list"]))
    assert not router_in_use(make(run_dir=tmp_path))
    cluster_record(started).write_text(json.dumps({"replicas": "two", "router_policy": "round_robin"}))
    assert as_started(make(run_dir=tmp_path)).replicas == 1  # a value of another type or range is not taken
    assert as_started(make(run_dir=tmp_path)).router_policy == "round_robin"  # the others still are
    cluster_record(started).write_text(json.dumps({"replicas": 100}))
    assert as_started(make(run_dir=tmp_path)).replicas == 1
    cluster_record(started).unlink()
    assert not router_in_use(make(run_dir=tmp_path)) and router_fields(make(run_dir=tmp_path)) == {}


def test_replica_hosts_name_each_local_replica() -> None:
    """REPLICA_HOSTS (compose: one service per replica) gives each local replica its host; unset: VLLM_HOST."""
    settings = make(replicas=2, replica_hosts="vllm,vllm-1", replica_port_base=8110)
    assert [(r.name, r.url) for r in replicas(settings)] == [
        ("vllm", "http://vllm:8110"),
        ("vllm-1", "http://vllm-1:8111"),
    ]
    assert [r.url for r in replicas(make(replicas=2))] == ["http://127.0.0.1:8110", "http://127.0.0.1:8111"]


def test_the_serving_engine_changes_with_a_switch(tmp_path: Path) -> None:
    """Before and after a blue/green switch the serving engine differs (URL, pid, model): what a benchmark compares
    to tell that its window spans a switch."""
    settings = make(run_dir=tmp_path / "run", logs_dir=tmp_path / "logs", replica_port_base=9000)
    record_cluster(settings)
    for slot, pid, name in (("a", 11, "ernie-tiny-synthetic"), ("b", 22, "tiny")):
        own = settings.model_copy(update={"engine_slot": slot})
        write_engine_state(own.engine_state_file, EngineState(requested=name, source="synthetic", model_arg="/m",
                                                              served_name=name, pid=pid))  # fmt: skip
    before = serving_engine(settings)
    assert (before.url, before.pid, before.served_name) == ("http://127.0.0.1:9000", 11, "ernie-tiny-synthetic")
    write_slot(tmp_path / "run", 0, "b")
    after = serving_engine(settings)
    assert after != before and after.describe() == "tiny (pid 22 at http://127.0.0.1:9002)"
