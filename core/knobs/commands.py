"""Which command takes which knob: the settings views of the stack's commands.

Each :class:`Command` names its fields in ``--help`` groups and how users set them. A field has one *home* command
(``HOME``); given to another command it is refused saying where it goes (:func:`where_it_goes`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    """One command's settings view: its fields in ``--help`` groups (``((title, (field, ...)), ...)``, ``top`` the most
    used first), and how users call it; ``flags`` False: environment only."""

    key: str
    noun: str  # "a benchmark setting", as the refusal says it
    prog: str  # how users call it: ./run_benchmark.sh
    make: str  # the make target that takes the same knobs as variables: make benchmark
    groups: tuple[tuple[str, tuple[str, ...]], ...]
    top: tuple[str, ...] = ()
    flags: bool = True
    entry: str = ""  # the Python entry point behind prog, where it is not prog itself
    also: tuple[str, ...] = ()  # other commands with this view (make targets, modules)

    @property
    def fields(self) -> tuple[str, ...]:
        """Every field of the view, top ones first, each once."""
        names = [*self.top, *(name for _, names in self.groups for name in names)]
        return tuple(dict.fromkeys(names))


BENCHMARK = Command(
    key="benchmark",
    noun="a benchmark setting",
    prog="./run_benchmark.sh",
    make="make benchmark",
    entry="python -m loadgen.command.benchmark",
    also=("make sweep", "make benchmark-compose"),
    top=("concurrency", "requests", "duration", "rate", "max_in_flight", "warmup", "max_tokens", "dataset", "slo",
         "vllm_base_url"),
    groups=(
        ("load", ("concurrency", "rate", "max_in_flight", "requests", "duration", "warmup", "capacity_check",
                  "burstiness", "ramp_up_s", "rate_end", "session_turns", "session_followups", "think_time", "trace",
                  "trace_speed", "workers", "sweep", "sweep_rates", "repeat", "cooldown_s")),
        ("workload", ("dataset", "bench_model", "max_tokens", "output_len", "output_len_mean", "output_len_p95",
                      "output_len_cap", "ignore_eos", "temperature", "seed", "input_mix", "random_input_len",
                      "random_output_len", "prefix_len", "prefix_count", "tokenizer", "prompts_file")),
        ("SLO and gate", ("slo", "slo_attainment_pct", "gate", "gate_threshold_pct", "gate_error_rate_pp", "baseline",
                          "max_error_rate_pct", "client_overhead_max_pct", "junit_file", "summary_file")),
        ("load from several hosts", ("expect_workers", "expect_workers_timeout_s", "master_bind_host", "master_port",
                                     "worker", "master_host", "worker_runs", "load_host_name")),
        ("output", ("profile", "price_per_hour", "energy_price_per_kwh", "logs_dir", "requests_log_max_mb",
                    "requests_log_backups")),
        ("connection", ("vllm_base_url", "vllm_host", "vllm_port", "sidecar_base_url", "sidecar_host", "sidecar_port",
                        "sidecar_token_file", "run_dir", "request_timeout_s", "drain_s", "watchdog_s", "server_down_s",
                        "idle_wait_s")),
    ),
)

ENGINE = Command(
    key="engine",
    noun="an engine setting",
    prog="./start_vllm.sh",
    make="make up",
    entry="python -m stack.engine_switch",
    top=("vllm_model_path", "model", "kv_cache_gb", "vllm_max_model_len", "vllm_dtype", "vllm_extra_args",
         "served_model_name"),
    groups=(
        ("model", ("vllm_model_path", "model", "served_model_name", "hf_hub_offline", "hub_probe_timeout_s")),
        ("engine", ("kv_cache_gb", "vllm_max_model_len", "vllm_dtype", "vllm_extra_args",
                    "vllm_cpu_num_of_reserved_cpu", "vllm_cpu_omp_threads_bind", "engine_python")),
        ("switch", ("engine_switch", "switch_drain_timeout_s")),
        ("connection", ("startup_timeout_s",)),
    ),
)

UI = Command(
    key="ui",
    noun="a UI setting",
    prog="python -m ui.chainlit_launch",
    make="make up",
    groups=(
        ("chat", ("ui_system_prompt", "max_tokens", "ui_max_tokens", "temperature", "ui_status_interval_s",
                  "startup_timeout_s")),
        ("login", ("ui_username",)),
        ("output", ("logs_dir", "requests_log_max_mb", "requests_log_backups")),
        ("connection", ("ui_host", "ui_port", "vllm_base_url", "vllm_host", "vllm_port")),
    ),
)

SIDECAR = Command(
    key="sidecar",
    noun="a sidecar setting",
    prog="python -m sidecar.server",
    make="make up",
    groups=(
        ("sampling", ("gpu_sample_interval_s", "engine_metrics_interval_s", "peer_sidecars")),
        ("reports", ("reports_dir", "reports_keep", "reports_max_age_days", "logs_dir")),
        ("security", ("sidecar_token_file", "sidecar_trusted_hosts")),
        ("connection", ("sidecar_host", "sidecar_port", "sidecar_base_url", "vllm_base_url", "vllm_host", "vllm_port",
                        "run_dir")),
    ),
)

LOGS = Command(
    key="logs",
    noun="a log tools setting",
    prog="./log_analyze.sh",
    make="make logs-stats",
    entry="python -m logtools",
    also=("make logs-errors", "make logs-slow"),
    groups=(("files", ("logs_dir",)),),
)

STACK = Command(
    key="stack",
    noun="a stack setting",
    prog="make up",
    make="make up",
    entry="python -m stack.control up",
    flags=False,
    groups=(
        ("folders", ("logs_dir", "reports_dir", "models_dir", "run_dir", "prompts_file")),
        ("engine", ("vllm_host", "vllm_port", "vllm_log_max_mb", "vllm_log_backups", "vllm_log_to_file")),
        ("Locust web UI", ("locust_web_host", "locust_web_port", "locust_web_username", "locust_extra_args")),
        ("logs", ("requests_log_max_mb", "requests_log_backups")),
        ("GPU", ("gpu_devices", "gpu_headroom_gb", "engine_preflight")),
        ("replicas and router", ("replicas", "replica_port_base", "engine_urls", "router_policy", "replica_hosts")),
        ("containers", ("vllm_gpu_base", "container_uid", "container_gid")),
    ),
)

COMMANDS: tuple[Command, ...] = (BENCHMARK, ENGINE, UI, SIDECAR, LOGS, STACK)
"""Every command with knobs; the first that lists a field is its home unless :data:`HOME` says otherwise."""

HOME: dict[str, Command] = {
    # read by several commands; set where a user expects it
    "vllm_host": STACK, "vllm_port": STACK, "logs_dir": STACK, "run_dir": STACK, "prompts_file": STACK,
    "requests_log_max_mb": STACK, "requests_log_backups": STACK, "vllm_base_url": BENCHMARK,
    "sidecar_base_url": SIDECAR, "sidecar_host": SIDECAR, "sidecar_port": SIDECAR, "sidecar_token_file": SIDECAR,
    "max_tokens": BENCHMARK, "temperature": BENCHMARK, "startup_timeout_s": ENGINE,
}  # fmt: skip


def home(name: str) -> Command | None:
    """The command a field belongs to (None: no command shows it, an environment-only field)."""
    return HOME.get(name) or next((command for command in COMMANDS if name in command.fields), None)


def command(key: str) -> Command:
    """The view named ``key`` (``benchmark``, ``engine``, ``ui``, ``sidecar``, ``logs``, ``stack``).

    Raises:
        KeyError: no such command.
    """
    return {candidate.key: candidate for candidate in COMMANDS}[key]


def where_it_goes(name: str, flag: str, env: str, value: str | None, flag_value: bool = True) -> str:
    """``--kv-cache-gb is an engine setting: ./start_vllm.sh --kv-cache-gb 4, or KV_CACHE_GB=4 make up`` for field
    ``name`` typed as ``flag`` (``value``: what followed; ``flag_value=False``: an on/off flag)."""
    owner = home(name)
    shown = value if value not in (None, "") else "VALUE"
    as_flag = f"{flag} {shown}" if flag_value else flag
    if owner is None:
        return f"{flag} is no command's flag: set {env}={shown} in the environment or .env"
    as_env = f"{env}={shown} {owner.make}"
    if not owner.flags:
        return f"{flag} is {owner.noun}: {as_env}"
    return f"{flag} is {owner.noun}: {owner.prog} {as_flag}, or {as_env}"
