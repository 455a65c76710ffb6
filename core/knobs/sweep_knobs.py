"""Settings fields of load shapes, sweeps, repeats and the gate (a group of :class:`core.settings.Settings`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from core.distributions import ThinkTime, parse_think_time
from core.knobs import Knobs, from_text
from core.parsing import parse_sweep, validate_name


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
