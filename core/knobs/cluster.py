"""Settings fields of load from several hosts: a benchmark's master waiting for load workers on other hosts, and the
worker side of it (a group of :class:`core.settings.Settings`; docs/benchmarking.md, "Load from several hosts").

A plain pydantic model: the environment and ``.env`` are read by the settings object, which inherits these fields.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class ClusterKnobs(BaseModel):
    """The master's wait for remote load workers, where it listens, and a worker's own side."""

    expect_workers: int = Field(
        default=0,
        ge=0,
        description="Load workers on other hosts the benchmark waits for before any load (each runs "
        "./run_benchmark.sh --worker --master-host THIS_HOST); 0: this host only.",
    )
    expect_workers_timeout_s: float = Field(
        default=120.0, gt=0, description="How long the benchmark waits for EXPECT_WORKERS to join, s."
    )
    master_bind_host: str = Field(
        default="0.0.0.0",
        description="With EXPECT_WORKERS: the address the Locust master listens on for workers (0.0.0.0: every "
        "interface).",
    )
    master_port: int = Field(
        default=5557, ge=1, le=65535, description="With EXPECT_WORKERS or --worker: the Locust master's port."
    )
    worker: bool = Field(
        default=False,
        description="Run this host as a load worker of a benchmark on MASTER_HOST (no report here; rows go to the "
        "master).",
    )
    master_host: str | None = Field(default=None, description="--worker: the host running the benchmark.")
    load_host_name: str | None = Field(
        default=None, description="The name this host's rows carry (default: its host name)."
    )
