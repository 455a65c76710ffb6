"""The load generator's field groups of :class:`core.settings.Settings`: one benchmark run's load and workload
(:class:`BenchmarkKnobs`), and load shapes, sweeps, repeats and the gate (:class:`SweepKnobs`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from core.distributions import ThinkTime, parse_think_time
from core.knobs import Knobs, from_text
from core.parsing import parse_duration_s, parse_mix, parse_slo, parse_sweep, validate_name

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


class SweepKnobs(Knobs):
    """Open-loop caps and ramps, synthetic lengths, multi-turn sessions, sweeps and repeats, the baseline gate."""

    # --- load shapes, sweeps and repeats (make sweep SWEEP=auto; make benchmark REPEAT=3) -----------------
    max_in_flight: int | None = Field(default=None, ge=1)
    """Open loop: at most this many requests in flight (vllm bench serve's --max-concurrency with --request-rate);
    an arrival waits for a free slot and the wait counts in its latencies."""
    rate_end: float | None = Field(default=None, gt=0, json_schema_extra={"cli": ["--ramp-up-end-rps"]})
    """Open loop: ramp the arrival rate linearly from RATE to this over the run (DURATION, else REQUESTS), req/s."""
    random_input_len: int = Field(default=1024, ge=1)
    """DATASET=random: prompt tokens of every request as the server counts them (chat template included; sized with
    its /tokenize, else TOKENIZER's)."""
    random_output_len: int = Field(default=128, ge=1)
    """DATASET=random: output tokens every request asks for (max_tokens)."""
    prefix_len: int | None = Field(default=None, ge=1)
    """Shared prefixes: tokens of the prefix put before every prompt (vLLM's prefix_repetition, GuideLLM's
    prefix_tokens); unset: none."""
    prefix_count: int = Field(default=1, ge=1)
    """Shared prefixes: distinct prefixes of PREFIX_LEN tokens; request k carries prefix k mod this."""
    tokenizer: str | None = None
    """DATASET=random, PREFIX_LEN and TRACE size prompts with the server's /tokenize; against a server without one
    (another engine, a gateway) they use this: a local folder with the served model's tokenizer.json and chat
    template (or a Hugging Face id in the local cache). Unset: the folder the stack's engine serves the model from,
    when it serves it."""
    session_turns: int = Field(default=1, ge=1, le=100)
    """Turns per conversation, at most: each later turn carries the model's earlier answers; a dataset of multi-turn
    conversations (ShareGPT) plays their real follow-up turns, one of single prompts draws its follow-ups from the
    workload (SESSION_FOLLOWUPS); RATE: conversations arriving per second (docs/workloads.md)."""
    session_followups: Literal["auto", "dataset", "drawn"] = "auto"
    """Conversations: where the later turns come from: dataset (each entry's own follow-up user turns; a session
    ends with its conversation), drawn (another workload prompt's user message each) or auto (dataset when most
    entries are multi-turn conversations)."""
    think_time: Annotated[ThinkTime | None, NoDecode, from_text(parse_think_time)] = None
    """Conversations: the user's pause after an answer before the next turn: 2s (fixed), exponential:2s or
    lognormal:2s[:sigma] (mean 2 s); unset: none."""
    trace: Path | None = None
    """Replay this timestamped trace (BurstGPT CSV or Mooncake JSONL) on its recorded schedule, with token-exact
    prompts of its input lengths and its output lengths (docs/workloads.md)."""
    trace_speed: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    """TRACE: replay this many times faster than recorded (2: twice as fast, 0.5: half)."""
    sweep: str | None = Field(default=None, json_schema_extra={"cli_const": "auto"})
    """Load sweep: auto (synchronous, maximum throughput, SWEEP_RATES open-loop rates between), concurrency:1,2,4,8
    or rate:0.5,1,2 (--sweep alone: auto)."""
    sweep_rates: int = Field(default=2, ge=1, le=20)
    """SWEEP=auto: open-loop rates spread between its two measured points."""
    repeat: int = Field(default=1, ge=1, le=100)
    """Runs of each load point; 2 or more give 95% confidence intervals."""
    cooldown_s: float = Field(default=5.0, ge=0)
    """Pause between the runs of a sweep or repeat, s."""
    slo_attainment_pct: float = Field(default=95.0, gt=0, le=100)
    """A sweep point meets the SLO when at least this share of its requests meets every bound, %."""

    # --- reports (make benchmark GATE=v0.2.1 GATE_THRESHOLD_PCT=5; make baseline NAME=v0.2.1) ---------------
    gate: str | None = None
    """Regression gate: fail the benchmark (exit 3) when it is worse than this named baseline."""
    baseline: str | None = None
    """Mark this run's report as the named baseline (as `make baseline NAME=` does afterwards)."""
    gate_threshold_pct: float = Field(default=5.0, ge=0)
    """Gate tolerance: largest throughput drop / p99 latency rise / energy-per-output-token rise (where both runs
    measured energy) allowed, %."""
    # an error rate cannot rise by more than 100 points: a larger tolerance would never gate
    gate_error_rate_pp: float = Field(default=1.0, ge=0, le=100)
    """Gate tolerance: largest error-rate rise over the baseline, percentage points."""

    junit_file: Path | None = Field(default=None, json_schema_extra={"cli": ["--junit"]})
    """Write the gate's result as JUnit XML here (one test case per gated metric; docs/ci.md)."""
    summary_file: Path | None = Field(default=None, json_schema_extra={"cli": ["--summary"]})
    """Write a Markdown step summary of the run and its gate here (default: $GITHUB_STEP_SUMMARY)."""
    github_step_summary: Path | None = Field(default=None, json_schema_extra={"cli": False})
    """Set by GitHub Actions: the step summary file, appended to when SUMMARY_FILE is unset."""

    @field_validator("gate", "baseline")
    @classmethod
    def _valid_gate(cls, value: str | None) -> str | None:
        """GATE and BASELINE must be baseline names (:func:`core.parsing.validate_name`)."""
        return None if value is None else validate_name(value)

    @field_validator("sweep")
    @classmethod
    def _valid_sweep(cls, value: str | None) -> str | None:
        """SWEEP must parse (:func:`core.parsing.parse_sweep`); kept as written, without blanks."""
        if value is None:
            return None
        parse_sweep(value)
        return value.strip().replace(" ", "")

    @property
    def sweep_spec(self) -> tuple[str, list[float]] | None:
        """SWEEP parsed: ``(kind, loads)``, or None without a sweep."""
        return parse_sweep(self.sweep) if self.sweep else None
