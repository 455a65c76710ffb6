"""Every knob is a flag generated from the settings fields; flags and environment variables mean the same thing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from core.flags import build_parser, flag_fields, flags_of, parse
from core.knobs.commands import BENCHMARK
from core.settings import PROJECT_ROOT, Settings
from loadgen.command.benchmark import parser as bench_parser
from loadgen.plan import bench_config


def run_bench(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loadgen.command.benchmark", *argv], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PROJECT_ROOT)})


def test_help_lists_the_benchmarks_knobs_only_with_their_defaults() -> None:
    """`python -m loadgen.command.benchmark --help` names each knob of the benchmark's view with its default; no knob of another
    command."""
    out = run_bench("--help")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())  # argparse wraps help lines
    fields = dict(flag_fields())
    for name in BENCHMARK.fields:
        assert flags_of(name, fields[name])[0] in text, name
    assert "--report-from" in text and "Concurrent users [50]" in text
    assert "--kv-cache-gb" not in text and "--ui-port" not in text and "--vllm-dtype" not in text
    assert all(name in BENCHMARK.fields for name, info in fields.items() if flags_of(name, info)[0] in out.stdout)


def test_secrets_and_internal_fields_have_no_flag() -> None:
    """Tokens and passwords are read from the environment only (a flag would show in `ps`)."""
    names = {name for name, _ in flag_fields()}
    assert not {"hf_token", "ui_password", "ui_auth_secret", "locust_plan_file"} & names


@pytest.mark.parametrize(
    ("argv", "named"),
    [(["--bogus"], "unrecognized arguments: --bogus"), (["--concurrency", "0"], "--concurrency=0"),
     (["--duration", "soon"], "--duration=soon"), (["--input-mix", "short:nan"], "--input-mix=short:nan")],
)
def test_unknown_flag_or_bad_value_exits_2_naming_it(argv: list[str], named: str) -> None:
    """An unknown flag or a value that does not validate stops with exit 2 and names the flag."""
    out = run_bench(*argv)
    assert out.returncode == 2 and named in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def settings_by_env(monkeypatch: pytest.MonkeyPatch, **env: str) -> Settings:
    for name in Settings.model_fields:
        monkeypatch.delenv(name.upper(), raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return Settings(_env_file=None)  # type: ignore[call-arg]


def settings_by_flags(monkeypatch: pytest.MonkeyPatch, *argv: str) -> Settings:
    for name in Settings.model_fields:
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.setitem(Settings.model_config, "env_file", None)
    return parse(bench_parser(), list(argv))[1]


def test_a_flag_and_its_environment_variable_give_the_same_report_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--concurrency 32 --duration 60 ...` and CONCURRENCY=32 DURATION=60 ... record the same config."""
    flags = settings_by_flags(monkeypatch, "--concurrency", "32", "--duration", "60", "--rate", "2.5", "--seed", "7",
                              "--ignore-eos", "--max-tokens", "64", "--input-mix", "short:1,long:1",
                              "--slo", "ttft_ms<=500", "--burstiness", "0.5")
    env = settings_by_env(monkeypatch, CONCURRENCY="32", DURATION="60", RATE="2.5", SEED="7", IGNORE_EOS="1",
                          MAX_TOKENS="64", INPUT_MIX="short:1,long:1", SLO="ttft_ms<=500", BURSTINESS="0.5")
    assert bench_config(flags, "m") == bench_config(env, "m")
    assert bench_config(flags, "m").concurrency == 32 and bench_config(flags, "m").duration_s == 60.0


def test_flags_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """With CONCURRENCY=8 in the environment, --concurrency 32 is what runs."""
    monkeypatch.setenv("CONCURRENCY", "8")
    monkeypatch.setitem(Settings.model_config, "env_file", None)
    assert parse(bench_parser(), ["--concurrency", "32"])[1].concurrency == 32
    assert parse(bench_parser(), [])[1].concurrency == 8


def test_vllm_bench_serve_aliases_and_the_seed_model_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """--max-concurrency, --request-rate, --num-prompts, --base-url, --model, --seed, --ignore-eos, --dataset-path
    mean what they mean in `vllm bench serve` (--max-concurrency with a rate caps the requests in flight);
    VLLM_MODEL_PATH is MODEL."""
    s = settings_by_flags(monkeypatch, "--max-concurrency", "4", "--request-rate", "3", "--num-prompts", "9",
                          "--base-url", "http://h:1", "--model", "lora-a", "--seed", "5", "--ignore-eos",
                          "--dataset-path", "/data/x.jsonl")
    assert (s.concurrency, s.max_in_flight, s.rate, s.requests, s.vllm_url, s.bench_model, s.seed, s.ignore_eos) == (
        50, 4, 3.0, 9, "http://h:1", "lora-a", 5, True)
    assert str(s.dataset) == "/data/x.jsonl"
    assert settings_by_env(monkeypatch, VLLM_MODEL_PATH="/models/qwen").model == "/models/qwen"
    with pytest.raises(ValueError, match="name different models"):
        settings_by_env(monkeypatch, VLLM_MODEL_PATH="/models/qwen", MODEL="other")


def test_parser_has_no_duplicate_flag() -> None:
    """Building the parser checks every flag is unique (argparse raises on a clash)."""
    build_parser("x", "y")


def test_max_tokens_help_says_what_a_default_run_records() -> None:
    """--help does not promise 128 to the benchmark: a run without MAX_TOKENS samples lengths up to OUTPUT_LEN_CAP
    and records that cap as max_tokens (1024); MAX_TOKENS=N alone is recorded as N. 128 is the UI's default."""
    from core.flags import knob_help
    from core.settings import Settings
    from loadgen.plan import bench_config

    info = Settings.model_fields["max_tokens"]
    line = knob_help("max_tokens", info)
    assert "[benchmark: unset, sampled up to OUTPUT_LEN_CAP; UI: 128]" in line and "[128]" not in line
    default = Settings(_env_file=None)  # type: ignore[call-arg]
    assert bench_config(default, "m").max_tokens == default.output_len_cap == 1024
    assert bench_config(Settings(_env_file=None, max_tokens=64), "m").max_tokens == 64  # type: ignore[call-arg]


def test_help_shows_a_module_docstring_without_its_rest_markup() -> None:
    """``./start_vllm.sh --help`` once showed ````./start_vllm.sh```` and ``:mod:`engine.bluegreen```: the description
    reads as plain text, the names kept."""
    description = "``./start_vllm.sh``: behind the router, :mod:`engine.bluegreen`, ``ENGINE_SWITCH=restart``."
    text = build_parser("./start_vllm.sh", description).format_help()
    assert "./start_vllm.sh: behind the router, engine.bluegreen, ENGINE_SWITCH=restart." in " ".join(text.split())
    assert "`" not in text.split("options:")[0]
