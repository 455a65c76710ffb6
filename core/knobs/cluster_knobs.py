"""Settings fields of the serving hardware: engine replicas behind vLLM's router (docs/cluster.md), load from several
hosts (docs/benchmarking.md) and what serving costs (docs/energy.md); groups of :class:`core.settings.Settings`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from core.cost import parse_price
from core.knobs import Knobs, from_text


class ClusterKnobs(Knobs):
    """Engine replicas behind vLLM's router, and load workers on other hosts."""

    # --- engine replicas behind vLLM's router (docs/cluster.md) -------------------------------------------------
    replicas: int = Field(default=1, ge=0, le=64)
    """vLLM engines `make up` runs on this host; above 1 (or with ENGINE_URLS) vllm-router listens on VLLM_PORT in
    front of them. 0: router only (ENGINE_URLS needed)."""
    replica_port_base: int = Field(default=8110, ge=1, le=65535)
    """With the router: local replica K listens on REPLICA_PORT_BASE+K; the router's Prometheus port is the next one
    after the last replica."""
    engine_urls: str | None = None
    """Comma-separated URLs of vLLM engines on other hosts (http://host:port,...) the router also sends to."""
    router_policy: str | None = None
    """vllm-router --policy (round_robin, cache_aware, power_of_two, ...); unset: the router's own."""
    replica_hosts: str | None = None
    """Comma-separated host names of the local replicas 0..REPLICAS-1 (compose: vllm,vllm-1,...); unset: VLLM_HOST
    on this host."""
    peer_sidecars: str | None = None
    """Comma-separated sidecars on other GPU hosts (http://gpu2:8200,...; dns+http://name:8200: every address of a
    headless Service) whose GPU memory this sidecar adds to each report, asked with SIDECAR_TOKEN."""
    engine_replica: int = Field(default=0, ge=0, json_schema_extra={"cli": False})
    """Which local replica this engine process is (set by `make up` per replica; not a user knob)."""
    engine_slot: Literal["a", "b"] | None = Field(default=None, json_schema_extra={"cli": False})
    """Which of its two slots this engine process runs in (set by `make up` per program; not a user knob). Unset:
    the slot that serves now (core.slots)."""

    # --- model switch and restart (./start_vllm.sh, docs/models.md) ---------------------------------------------
    engine_switch: Literal["auto", "blue-green", "restart"] = "auto"
    """How ./start_vllm.sh replaces vLLM: blue-green starts the new engine beside the running one behind the router
    on VLLM_PORT and swaps them with no request lost; restart stops it first (down for a whole start); auto:
    blue-green where this host holds both engines, else restart (said with the figures). At `make up`: restart runs
    one engine on VLLM_PORT without the router in front."""
    switch_drain_timeout_s: float = Field(default=300.0, ge=0)
    """How long a blue/green switch lets the old engine finish the requests it still serves before stopping it
    (those still running then are cut, counted and said), s."""

    # --- load from several hosts ---------------------------------------------------------------------------------
    expect_workers: int = Field(default=0, ge=0)
    """Load workers on other hosts the benchmark waits for before any load (each runs ./run_benchmark.sh --worker
    --master-host THIS_HOST); 0: this host only."""
    expect_workers_timeout_s: float = Field(default=120.0, gt=0)
    """How long the benchmark waits for EXPECT_WORKERS to join, s."""
    master_bind_host: str = "0.0.0.0"
    """With EXPECT_WORKERS: the address the Locust master listens on for workers (0.0.0.0: every interface)."""
    master_port: int = Field(default=5557, ge=1, le=65535)
    """With EXPECT_WORKERS or --worker: the Locust master's port."""
    worker: bool = False
    """Run this host as a load worker of a benchmark on MASTER_HOST (no report here; rows go to the master)."""
    master_host: str | None = None
    """--worker: the host running the benchmark."""
    worker_runs: int = Field(default=1, ge=0)
    """--worker: how many runs in a row this worker joins (a SWEEP's points or REPEAT's runs: one each); 0: every
    run until no master answers for 5 minutes (Locust's connect retries)."""
    load_host_name: str | None = None
    """The name this host's rows carry (default: its host name)."""


class CostKnobs(Knobs):
    """The prices reports turn into USD per million tokens (the benchmark records them in each report's config).
    Unset: no cost."""

    # normalised spelling (2.5/gpu); a bare number is refused (GPU or host?)
    price_per_hour: Annotated[str | None, from_text(lambda text: parse_price(text).text)] = None
    """The serving hardware's price, US dollars per hour of each GPU (2.5/gpu) or of each serving host (12/host);
    reports then give USD per million output and total tokens. Unset: no cost."""
    energy_price_per_kwh: float | None = Field(default=None, ge=0)
    """Electricity, US dollars per kWh; reports with an energy figure then give its cost per million tokens beside
    the hardware's."""
