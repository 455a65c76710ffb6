"""Settings fields of a benchmark run: load, workload, output lengths, limits (a group of
:class:`core.settings.Settings`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from core.knobs import Knobs, from_text
from core.parsing import parse_duration_s, parse_mix, parse_slo

RANDOM_DATASET = "random"  # DATASET=random: token-exact synthetic prompts
# The shortest measured window: one streamed LLM answer takes longer than this, so a shorter DURATION measures no
# complete request and its rates are noise.
MIN_DURATION_S = 1.0


class BenchmarkKnobs(Knobs):
    """One benchmark run's load (closed or open loop), its workload and output lengths, and when it stops or fails."""

    # --- benchmark (make benchmark CONCURRENCY=.. REQUESTS=.. DURATION=.. WARMUP=.. MAX_TOKENS=..) -------
    concurrency: int = Field(default=50, ge=1)
    """Concurrent users (closed loop); vllm bench serve's --max-concurrency alone sets it."""
    requests: int | None = Field(default=None, ge=1, json_schema_extra={"cli": ["--num-prompts"]})
    """Measured requests; default 200 unless DURATION."""
    duration: Annotated[float | None, NoDecode] = None
    """Measured window, e.g. 60s, 5m."""
    warmup: int = Field(default=10, ge=0)
    """Warmup requests, excluded from statistics."""
    max_tokens: int = Field(
        default=128,
        ge=1,
        json_schema_extra={"shown_default": "benchmark: unset, sampled up to OUTPUT_LEN_CAP; UI: 128"},
    )
    """Fixed output length of every benchmark request / the UI's default answer length (the benchmark without it
    samples lengths up to OUTPUT_LEN_CAP, and its report records that cap as max_tokens)."""
    output_len: Literal["lognormal", "fixed"] | None = None
    """Benchmark output lengths: sampled (default) or MAX_TOKENS each; MAX_TOKENS=N alone means fixed."""
    output_len_mean: float = Field(default=120.0, gt=0)
    """Sampled output length: mean, tokens."""
    output_len_p95: float = Field(default=280.0, gt=0)
    """Sampled output length: 95th percentile, tokens."""
    output_len_cap: int = Field(default=1024, ge=1)
    """Largest sampled output length, tokens."""
    ignore_eos: bool = False
    """Ask for exactly max_tokens (ignore_eos + min_tokens)."""
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    rate: float | None = Field(default=None, gt=0, json_schema_extra={"cli": ["--request-rate"]})
    """Open loop: mean arrivals per second (unset: closed loop)."""
    burstiness: float = Field(default=1.0, gt=0)
    """Open loop: gamma shape of arrival gaps (1 = Poisson)."""
    ramp_up_s: float = Field(default=0.0, ge=0)
    """Closed loop: seconds to start all users."""
    workers: int | None = Field(default=None, ge=1)
    """Load-generating Locust processes (N > 1: a master and N workers); unset: from the machine's cores and the
    load asked for."""
    dataset: Path | None = Field(default=None, json_schema_extra={"cli": ["--dataset-path", "--dataset-name"]})
    """Prompt JSONL or ShareGPT JSON/JSONL, or random (token-exact synthetic prompts, see RANDOM_INPUT_LEN);
    default: the bundled corpus."""
    input_mix: Annotated[dict[str, float] | None, NoDecode, from_text(parse_mix)] = None
    """Input-length bucket weights, e.g. short:0.3,medium:0.5,long:0.2."""
    slo: Annotated[dict[str, float], NoDecode, from_text(parse_slo)] = Field(default_factory=dict)
    """Goodput SLOs, e.g. ttft_ms<=500,e2e_ms<=2000."""
    request_timeout_s: float = Field(default=300.0, gt=0)
    capacity_check: bool = True
    """Refuse users the warm-up shows would time out (loadgen/orchestrate/measured_run.py)."""
    seed: int = 0
    profile: bool = False
    """make benchmark PROFILE=1: torch-profile the measured window."""
    bench_model: str | None = Field(default=None, json_schema_extra={"cli": ["--model"]})
    """Model the benchmark measures (an id of /v1/models); default: SERVED_MODEL_NAME, MODEL, or the only model
    served (several served and none chosen: the run stops and lists them)."""
    drain_s: float = Field(default=30.0, ge=0)
    """When DURATION ends, how long requests in flight may still finish before they are cancelled (counted as
    incomplete), s."""
    watchdog_s: float | None = Field(default=None, ge=1)  # below 1 s it would stop a run before its first answer
    """Stop a run in which no request finishes for this long, s (default REQUEST_TIMEOUT_S + 60)."""
    server_down_s: float = Field(default=5.0, gt=0)
    """End the run early when every request fails at the connection level (refused, reset, DNS; not an HTTP error
    answer) or is answered that the run's model is not served (a switch to another model) for this long with no
    success in between: vLLM stopped answering, s (exit 6)."""
    idle_wait_s: float = Field(default=60.0, ge=0)
    """Before each run, wait up to this long for vLLM to finish the requests it is running or holding (another
    client's, or a stopped run's not yet aborted: vllm:num_requests_running + waiting, summed over the engines),
    printing the figure; still busy after it, the run is refused (exit 2), s. 0: no check."""
    max_error_rate_pct: float | None = Field(default=None, ge=0, le=100)
    """Fail the run (exit 5) when its error rate is above this, %."""
    client_overhead_max_pct: float = Field(default=10.0, ge=0)
    """Flag a run whose client adds more than this share to the server's own mean TTFT, ITL or E2E (vLLM's /metrics
    histograms over the window), %."""
    locust_plan_file: Path | None = Field(default=None, json_schema_extra={"cli": False})
    """Internal: the run plan the benchmark writes for its Locust processes (unset: these settings)."""

    @field_validator("duration", mode="before")
    @classmethod
    def _parse_duration(cls, value: object) -> object:
        """DURATION text (60, 60s, 5m, 1h) -> seconds, at least :data:`MIN_DURATION_S`."""
        if value is None:
            return None
        seconds = parse_duration_s(str(value))
        if seconds < MIN_DURATION_S:
            raise ValueError(
                f"a measured window of {seconds:g} s is too short to measure anything (one streamed answer takes "
                f"longer): give at least {MIN_DURATION_S:g}s, e.g. 60s"
            )
        return seconds

    @property
    def random_dataset(self) -> bool:
        """DATASET=random: synthetic prompts of exactly RANDOM_INPUT_LEN tokens (``vllm bench serve``'s random)."""
        return self.dataset is not None and str(self.dataset) == RANDOM_DATASET
