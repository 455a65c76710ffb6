"""The stack's one settings object, read from the environment and ``.env`` (pydantic-settings).

Read it through :func:`get_settings`; variables are the field names upper-cased. Fields are defined by group in
:mod:`core.knobs`; this module adds the checks and properties across groups.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import sys
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

from pydantic import AliasChoices, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from core.distributions import lognormal_params
from core.knobs import (
    DEFAULT_MODEL,
    PROJECT_ROOT,
    SYNTHETIC_FALLBACK,
    ClusterKnobs,
    CostKnobs,
    FolderKnobs,
    SecurityKnobs,
    ServingKnobs,
)
from core.knobs.load_knobs import RANDOM_DATASET, BenchmarkKnobs, SweepKnobs
from core.parsing import option_values, parse_sweep

__all__ = [
    "DEFAULT_MODEL",
    "PROJECT_ROOT",
    "RANDOM_DATASET",
    "SERVICE_SECRETS",
    "SYNTHETIC_FALLBACK",
    "Settings",
    "describe_validation_error",
    "ensure_sidecar_token",
    "env_names",
    "get_settings",
    "secret_env_names",
    "service_env",
]


# pydantic orders inherited fields from the last base to the first: the groups are listed last-first so that the
# fields (and with them the flags, --help and the JSON schema) stay in the order serving, security, folders, benchmark,
# sweep (tests/unit/core/test_settings.py checks it). A group's own field validators live with its fields.
class Settings(
    CostKnobs, ClusterKnobs, SweepKnobs, BenchmarkKnobs, FolderKnobs, SecurityKnobs, ServingKnobs, BaseSettings
):
    """All knobs of the stack. Units are in the names; every field maps to one environment variable."""

    model_config = SettingsConfigDict(
        env_file=PROJECT_ROOT / ".env",
        env_file_encoding="utf-8",
        extra="ignore",
        case_sensitive=False,
        allow_inf_nan=False,  # RATE=nan, BURSTINESS=inf ... stop before load, naming the variable
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """pydantic-settings' sources in its order, blank names skipped (:func:`_blank_names_skipped`)."""
        for source in (env_settings, dotenv_settings):
            if isinstance(source, EnvSettingsSource):
                source.env_vars = _blank_names_skipped(source.env_vars, settings_cls)
        return init_settings, env_settings, dotenv_settings, file_secret_settings

    @model_validator(mode="before")
    @classmethod
    def _blank_is_unset(cls, data: object) -> object:
        """A blank value (empty or spaces) of any knob from any source is unset: the default (compose's ``${X:-}``,
        ``make X=``, ``X=`` in ``.env``); it beats the sources below it."""
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if not _blank(value)}
        return data

    @model_validator(mode="after")
    def _one_model(self) -> Settings:
        """VLLM_MODEL_PATH is MODEL under the seed image's name; both set to different models is ambiguous."""
        if self.vllm_model_path:
            if self.model and self.model != self.vllm_model_path:
                raise ValueError(
                    f"MODEL={self.model} and VLLM_MODEL_PATH={self.vllm_model_path} name different models: set one"
                )
            self.model = self.vllm_model_path
        return self

    @model_validator(mode="after")
    def _load_shape_fits(self) -> Settings:
        """TRACE is the whole load shape and workload (the knobs it would contradict are refused); RATE_END ramps from
        RATE; multi-turn sessions run in the closed loop (a user waits for each answer)."""
        clashing = [name for name, on in (
            ("RATE", self.rate is not None), ("RATE_END", self.rate_end is not None), ("SWEEP", self.sweep),
            ("SESSION_TURNS", self.session_turns > 1), ("PREFIX_LEN", self.prefix_len is not None),
            ("DATASET=random", self.random_dataset)) if on and self.trace is not None]
        if clashing:
            raise ValueError(
                f"TRACE={self.trace} replays the trace's own schedule and lengths: unset {', '.join(clashing)}"
            )
        if self.rate_end is not None and self.rate is None:
            raise ValueError(f"RATE_END={self.rate_end:g} ramps from RATE: set RATE (the start rate) too")
        open_sweep = self.sweep is not None and parse_sweep(self.sweep)[0] != "concurrency"
        if self.max_in_flight is not None and self.rate is None and self.trace is None and not open_sweep:
            raise ValueError(
                f"MAX_IN_FLIGHT={self.max_in_flight} caps the open loop: set RATE (or an open-loop SWEEP); the closed "
                "loop's users are CONCURRENCY"
            )
        if self.prefix_count != 1 and self.prefix_len is None:  # else it would be ignored without a word
            raise ValueError(
                f"PREFIX_COUNT={self.prefix_count} counts shared prefixes of PREFIX_LEN tokens: set PREFIX_LEN too "
                "(e.g. --prefix-len 256 --prefix-count 4)"
            )
        if self.session_turns > 1 and self.sweep and parse_sweep(self.sweep)[0] == "auto":
            raise ValueError(
                "SESSION_TURNS > 1 with SWEEP=auto: auto's open-loop points are request rates, a conversation's rate "
                "is of conversations; sweep concurrency:1,2,4,... or rate:0.1,0.2,... (conversations/s) instead"
            )
        if self.session_followups != "auto" and self.session_turns <= 1:
            raise ValueError(
                f"SESSION_FOLLOWUPS={self.session_followups} says where a conversation's later turns come from: set "
                "SESSION_TURNS > 1 (e.g. --session-turns 4)"
            )
        if self.think_time is not None and self.session_turns <= 1:
            raise ValueError(
                f"THINK_TIME={self.think_time.text} pauses between the turns of a conversation: set SESSION_TURNS > 1 "
                "(e.g. --session-turns 4)"
            )
        return self

    @model_validator(mode="after")
    def _rates_send_requests(self) -> Settings:
        """An open-loop rate must send at least one request in DURATION, and a mean gap (1/rate) shorter than the
        watchdog (WATCHDOG_S, default REQUEST_TIMEOUT_S + 60)."""
        rates = [(f"RATE={self.rate:g}", self.rate)] if self.rate is not None else []
        if self.rate_end is not None:
            rates.append((f"RATE_END={self.rate_end:g}", self.rate_end))
        if self.sweep is not None:
            kind, loads = parse_sweep(self.sweep)
            rates += [(f"SWEEP rate {r:g}", r) for r in loads] if kind == "rate" else []
        watchdog_s = self.watchdog_s or self.request_timeout_s + 60.0
        for name, rate in rates:
            if self.duration is not None and rate * self.duration < 1:
                raise ValueError(
                    f"{name} req/s sends {rate * self.duration:.2g} requests on average in DURATION="
                    f"{self.duration:g} s, less than one: the run would measure nothing; raise it to at least "
                    f"{1 / self.duration:.3g} or lengthen DURATION"
                )
            if 1 / rate > watchdog_s:
                raise ValueError(
                    f"{name} req/s sends one request every {_span(1 / rate)} on average: the watchdog stops a run "
                    f"with no request finished for {watchdog_s:g} s (WATCHDOG_S); give a rate of at least "
                    f"{1 / watchdog_s:.3g} req/s"
                )
        return self

    @model_validator(mode="after")
    def _default_request_count(self) -> Settings:
        if self.requests is None and self.duration is None and self.trace is None:  # a trace: all its rows
            self.requests = 200
        return self

    @model_validator(mode="after")
    def _output_lengths_fit(self) -> Settings:
        """Sampled lengths need a log-normal of OUTPUT_LEN_MEAN and P95, and a cap not below the mean."""
        if self.fixed_max_tokens is None:
            lognormal_params(self.output_len_mean, self.output_len_p95)
            if self.output_len_cap < self.output_len_mean:
                raise ValueError(
                    f"OUTPUT_LEN_CAP={self.output_len_cap} is below OUTPUT_LEN_MEAN={self.output_len_mean:g}: most "
                    "sampled lengths would be cut to the cap and the mean never reached; raise the cap or lower the "
                    "mean"
                )
        return self

    # --- derived -------------------------------------------------------------------------------------
    @property
    def ignored_knobs(self) -> list[str]:
        """Knobs set but without effect beside another, as ``[WARN]`` texts: warnings, since e.g. ``REQUESTS`` in
        ``.env`` with ``--duration`` is a common switch to a time bound."""
        notes = []
        if (self.duration is not None and "requests" in self.model_fields_set and self.requests is not None
                and self.trace is None):  # a trace takes its first REQUESTS rows, then cuts them at DURATION
            notes.append(
                f"REQUESTS={self.requests} (--requests) is ignored: DURATION={self.duration:g} s (--duration) bounds "
                "the run; unset one of them to silence this"
            )
        if "concurrency" in self.model_fields_set and self.sweep is None and self.rate is not None:
            notes.append(
                f"CONCURRENCY={self.concurrency} (--concurrency) is ignored: RATE={self.rate:g} req/s (--request-rate) "
                "sends on its schedule whatever is in flight; to cap the requests in flight use "
                f"MAX_IN_FLIGHT={self.concurrency} (--max-concurrency {self.concurrency} beside --request-rate)"
            )
        if "concurrency" in self.model_fields_set and (self.sweep or "").startswith("concurrency:"):
            notes.append(
                f"CONCURRENCY={self.concurrency} (--concurrency) is ignored: SWEEP={self.sweep} (--sweep) sets each "
                "point's concurrency"
            )
        return notes

    @property
    def workload_file(self) -> Path:
        """The benchmark's dataset: DATASET or the bundled Chinese corpus."""
        return self.dataset or self.prompts_file

    @property
    def fixed_max_tokens(self) -> int | None:
        """Every request's max_tokens when fixed (OUTPUT_LEN=fixed or MAX_TOKENS alone; RANDOM_OUTPUT_LEN with
        DATASET=random); else None."""
        if self.random_dataset:
            return self.random_output_len
        if self.output_len == "fixed" or (self.output_len is None and "max_tokens" in self.model_fields_set):
            return self.max_tokens
        return None

    # --- security (derived) ---------------------------------------------------------------------------
    @property
    def vllm_api_keys(self) -> list[str]:
        """Every key vLLM accepts: VLLM_API_KEY first, then the values of ``--api-key`` in VLLM_EXTRA_ARGS."""
        keys = [self.vllm_api_key] if self.vllm_api_key else []
        with contextlib.suppress(ValueError):  # unbalanced quotes: the launcher refuses them
            keys += option_values(shlex.split(self.vllm_extra_args), "--api-key")
        return list(dict.fromkeys(key for key in keys if key))

    @property
    def vllm_client_key(self) -> str | None:
        """The key clients send to vLLM (the first of :attr:`vllm_api_keys`), None when vLLM needs none."""
        return next(iter(self.vllm_api_keys), None)

    @property
    def vllm_headers(self) -> dict[str, str]:
        """HTTP headers of every request to vLLM: ``Authorization: Bearer <key>`` when a key is set, else none."""
        key = self.vllm_client_key
        return {"Authorization": f"Bearer {key}"} if key else {}

    @property
    def sidecar_token_path(self) -> Path:
        """Where the sidecar token is kept: SIDECAR_TOKEN_FILE, else ``<RUN_DIR>/sidecar_token``."""
        return self.sidecar_token_file or self.run_dir / "sidecar_token"

    def sidecar_auth_token(self) -> str | None:
        """SIDECAR_TOKEN, else the first line of :attr:`sidecar_token_path`; None: neither."""
        if self.sidecar_token:
            return self.sidecar_token
        try:
            token = self.sidecar_token_path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return token or None

    @property
    def sidecar_hosts(self) -> list[str]:
        """Loopback, SIDECAR_HOST, SIDECAR_BASE_URL's host and SIDECAR_TRUSTED_HOSTS."""
        from urllib.parse import urlsplit

        hosts = ["127.0.0.1", "localhost", "::1"]
        if self.sidecar_host not in ("0.0.0.0", "::", ""):
            hosts.append(self.sidecar_host)
        if self.sidecar_base_url:
            try:
                named = urlsplit(self.sidecar_base_url).hostname
            except ValueError:
                named = None
            if named:
                hosts.append(named)
        return list(dict.fromkeys(hosts + self.sidecar_trusted_hosts))


def _blank(value: object) -> bool:
    """Whether ``value`` is a blank string (empty or whitespace only): "not given" for every knob."""
    return isinstance(value, str) and not value.strip()


def env_names(name: str, info: FieldInfo) -> list[str]:
    """The environment variables of a field: its name upper-cased, and its alias choices (e.g. VLLM_MODEL_PATH)."""
    alias = info.validation_alias
    if isinstance(alias, AliasChoices):
        return [str(choice).upper() for choice in alias.choices if isinstance(choice, str)]
    return [name.upper()]


def _blank_names_skipped(env: Mapping[str, str | None], settings_cls: type[BaseSettings]) -> dict[str, str | None]:
    """``env`` (names lower-cased) without a knob's blank names where another of its names is set (``GPU_DEVICES=``
    beside ``CUDA_VISIBLE_DEVICES=1`` reads 1)."""
    out = dict(env)
    for field, info in settings_cls.model_fields.items():
        names = [n.lower() for n in env_names(field, info)]
        if any(n in out and not _blank(out[n]) for n in names):
            for n in names:
                if n in out and _blank(out[n]):
                    del out[n]
    return out


SERVICE_SECRETS: dict[str, frozenset[str]] = {
    "vllm": frozenset({"HF_TOKEN", "VLLM_API_KEY"}),
    "ui": frozenset({"VLLM_API_KEY", "UI_PASSWORD", "UI_AUTH_SECRET"}),
    "sidecar": frozenset({"VLLM_API_KEY", "SIDECAR_TOKEN"}),
    "locust": frozenset({"VLLM_API_KEY", "SIDECAR_TOKEN", "LOCUST_WEB_PASSWORD"}),
}
"""The secrets each service needs (every other secret variable is removed from its environment; compose files give
each container only these)."""


def secret_env_names() -> frozenset[str]:
    """Environment names of every secret setting (the ``repr=False`` fields)."""
    return frozenset(name.upper() for name, info in Settings.model_fields.items() if info.repr is False)


def service_env(service: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) without the secrets the service does not need
    (:data:`SERVICE_SECRETS`).

    Raises:
        KeyError: an unknown service name.
    """
    keep = SERVICE_SECRETS[service]
    env = dict(os.environ if base is None else base)
    for name in secret_env_names() - keep:
        env.pop(name, None)
    return env


TOKEN_BYTES = 32
"""Random bytes of a generated sidecar token (43 URL-safe characters)."""


def ensure_token_file(path: Path) -> str:
    """The token in ``path``, a new random one written first (0600, exclusively) when missing or empty.

    Raises:
        OSError: the folder cannot be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(3):
        try:
            token = path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            token = ""
        if token:
            return token
        path.unlink(missing_ok=True)  # an empty file (a crash between create and write) is replaced
        token = secrets.token_urlsafe(TOKEN_BYTES)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue  # another process made it meanwhile: read theirs
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(token + "\n")
        return token
    raise OSError(f"could not create {path}")


def ensure_sidecar_token(settings: Settings) -> str:
    """SIDECAR_TOKEN when set, else SIDECAR_TOKEN_FILE's token (``run/sidecar_token`` in local mode), made when missing.

    Raises:
        OSError: the token file cannot be made.
    """
    return settings.sidecar_token or ensure_token_file(settings.sidecar_token_path)


def describe_validation_error(exc: ValidationError, from_cli: set[str] | frozenset[str] = frozenset()) -> str:
    """One line per bad variable: ``CONCURRENCY=0: ...`` (``--concurrency=0: ...`` if in ``from_cli``)."""
    lines = []
    for err in exc.errors():
        field = ".".join(str(part) for part in err["loc"])
        name = f"--{field.replace('_', '-')}" if field in from_cli else field.upper() or "settings"
        value = err.get("input")
        if isinstance(value, dict):
            shown = ""  # a model-level check: its message names the variables
        elif isinstance(value, str) and not value.isprintable():
            shown = f"={value!r}"  # a trailing newline or a control character is shown, not printed
        else:
            shown = f"={value}"
        lines.append(f"  {name}{shown}: {err['msg']}")
    where = "command line, environment, .env or make variables" if from_cli else "environment, .env or make variables"
    return f"Invalid configuration ({where}):\n" + "\n".join(lines)


def _span(seconds: float) -> str:
    """A long time span in words: ``400 s``, ``2.8 h``, ``31.7 years``."""
    for unit, size in (("years", 365.25 * 86400), ("days", 86400.0), ("h", 3600.0)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once.

    Raises:
        SystemExit: code 2, after a message on stderr naming each bad variable.
    """
    try:
        return Settings()
    except ValidationError as exc:
        print(f"[ERROR] {describe_validation_error(exc)}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
