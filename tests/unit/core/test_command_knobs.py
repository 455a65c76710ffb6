"""Each command takes its own knobs: every flag a command shows changes what it hands on (the run plan, the engine
request and the launch it makes, the UI's child environment, the log tools' files), and every knob of another
command is refused with exit 2 naming where it goes."""

from __future__ import annotations

import argparse
import itertools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from core.flags import MAX_CONCURRENCY, _knob_flags, build_parser, flag_environment, given, parse
from core.knobs.commands import BENCHMARK, ENGINE, LOGS, SIDECAR, UI, Command, home
from core.requestlog import RequestLog
from core.settings import PROJECT_ROOT, Settings
from engine.kvsizing import plan_kv, pool_gib
from engine.launcher import apply_request, vllm_argv, vllm_env
from engine.model_resolve import ResolvedModel
from loadgen.command import benchmark as bench
from loadgen.command.benchmark import plan_with_trace, read_trace
from loadgen.locust_side.joining import host_name
from loadgen.orchestrate.locust_launch import locust_argv, worker_argv
from loadgen.orchestrate.pipeline import planned_points
from loadgen.orchestrate.preflight import choose_model
from loadgen.plan import bench_config, plan_settings, read_run_plan, write_plan
from loadgen.workloads.tokenizing import local_candidates
from logtools import cli as logcli
from sidecar import server as sidecar_launch
from stack import engine_switch as vllmctl
from ui import chainlit_launch as ui_launch

SAMPLE_TRACE = str(PROJECT_ROOT / "loadgen" / "workloads" / "data" / "traces" / "burstgpt_sample.csv")
# A value for every flag, and the flags it needs beside it to take effect (MAX_IN_FLIGHT caps the open loop ...).
# A new knob in a view fails test_every_flag_* until it is given a value here.
SAMPLES: dict[str, tuple[list[str], list[str]]] = {
    "--concurrency": (["3"], []), MAX_CONCURRENCY: (["8"], []), "--requests": (["7"], []),
    "--duration": (["30s"], []), "--rate": (["2"], []), "--max-in-flight": (["4"], ["--rate", "2"]),
    "--warmup": (["2"], []), "--max-tokens": (["64"], []), "--dataset": (["random"], []), "--slo": (["ttft_ms<=500"], []),
    "--vllm-base-url": (["http://h:1"], []), "--burstiness": (["0.5"], ["--rate", "2"]),
    "--ramp-up-s": (["3"], []), "--rate-end": (["4"], ["--rate", "2"]), "--session-turns": (["2"], []),
    "--think-time": (["exponential:2s"], ["--session-turns", "2"]),
    "--session-followups": (["drawn"], ["--session-turns", "2"]),
    "--workers": (["2"], []), "--sweep": (["concurrency:1,2"], []), "--sweep-rates": (["3"], ["--sweep", "auto"]),
    "--repeat": (["2"], []), "--cooldown-s": (["1"], ["--repeat", "2"]), "--bench-model": (["lora"], []),
    "--output-len": (["fixed"], []), "--output-len-mean": (["100"], []), "--output-len-p95": (["300"], []),
    "--output-len-cap": (["512"], []), "--ignore-eos": ([], []), "--temperature": (["0.7"], []),
    "--seed": (["9"], []), "--input-mix": (["short:1,long:1"], []), "--random-input-len": (["64"], ["--dataset", "random"]),
    "--random-output-len": (["16"], ["--dataset", "random"]), "--prompts-file": (["/data/p.jsonl"], []),
    "--slo-attainment-pct": (["90"], ["--sweep", "auto"]), "--gate": (["v1"], []), "--gate-threshold-pct": (["9"], []),
    "--gate-error-rate-pp": (["3"], []), "--baseline": (["v2"], []), "--max-error-rate-pct": (["10"], []),
    "--profile": ([], []), "--capacity-check": ([], ["--no-capacity-check"]), "--logs-dir": (["/tmp/l"], []), "--requests-log-max-mb": (["5"], []),
    "--requests-log-backups": (["2"], []), "--vllm-host": (["10.0.0.1"], []), "--vllm-port": (["8101"], []),
    "--price-per-hour": (["2.5/gpu"], []), "--energy-price-per-kwh": (["0.2"], []),
    "--sidecar-base-url": (["http://s:2"], []), "--sidecar-host": (["10.0.0.2"], []), "--sidecar-port": (["8201"], []),
    "--sidecar-token-file": (["/tmp/t"], []), "--sidecar-max-body-mb": (["8"], []), "--run-dir": (["/tmp/r"], []),
    "--request-timeout-s": (["30"], []), "--drain-s": (["3"], []), "--watchdog-s": (["30"], []),
    "--server-down-s": (["9"], []), "--idle-wait-s": (["5"], []), "--report-from": (["/tmp/x.requests.jsonl"], []),
    "--prefix-len": (["64"], []), "--prefix-count": (["4"], ["--prefix-len", "64"]),
    "--tokenizer": (["/data/qwen2-0.5b-instruct"], []),
    "--trace": ([SAMPLE_TRACE], []), "--trace-speed": (["2"], ["--trace", SAMPLE_TRACE]),
    "--client-overhead-max-pct": (["20"], []), "--junit-file": (["/tmp/j.xml"], []),
    "--summary-file": (["/tmp/s.md"], []), "--expect-workers": (["2"], []),
    "--expect-workers-timeout-s": (["30"], ["--expect-workers", "1"]),
    "--master-bind-host": (["10.0.0.3"], ["--expect-workers", "1"]), "--master-port": (["6000"], ["--expect-workers", "1"]),
    "--worker": ([], ["--master-host", "h"]), "--master-host": (["h2"], ["--worker"]),
    "--worker-runs": (["3"], ["--worker", "--master-host", "h"]), "--load-host-name": (["n1"], []),
    # engine
    "--vllm-model-path": (["/models/q"], []), "--serve-model": (["synthetic:tiny"], []),
    "--kv-cache-gb": (["4"], []), "--vllm-max-model-len": (["2048"], []), "--vllm-dtype": (["float32"], []),
    "--vllm-extra-args": (["--max-num-seqs 4"], []), "--served-model-name": (["chat"], []),
    "--hf-hub-offline": ([], []), "--hub-probe-timeout-s": (["1"], []), "--vllm-cpu-num-of-reserved-cpu": (["0"], []),
    "--vllm-cpu-omp-threads-bind": (["0-1"], []), "--engine-python": (["/usr/bin/python3"], []),
    "--startup-timeout-s": (["60"], []), "--engine-switch": (["restart"], []), "--switch-drain-timeout-s": (["9"], []),
    # UI, sidecar
    "--ui-system-prompt": (["be brief"], []), "--ui-max-tokens": (["99"], []), "--ui-status-interval-s": (["9"], []),
    "--ui-username": (["me"], []), "--ui-host": (["0.0.0.0"], []), "--ui-port": (["8001"], []),
    "--gpu-sample-interval-s": (["2"], []), "--engine-metrics-interval-s": (["3"], []), "--reports-dir": (["/tmp/rp"], []),
    "--peer-sidecars": (["http://gpu2:8200"], []),
    "--reports-keep": (["3"], []), "--reports-max-age-days": (["2"], []), "--sidecar-trusted-hosts": (["a.lan"], []),
}  # fmt: skip


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in Settings.model_fields:
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.setitem(Settings.model_config, "env_file", None)


def shown_flags(parser: argparse.ArgumentParser) -> list[str]:
    """The first name of every option the parser shows (its own, not --help)."""
    return [a.option_strings[0] for a in parser._actions if a.option_strings and a.dest != "help"]


def bench_effect(args: argparse.Namespace, settings: Settings) -> dict[str, Any]:
    """What the benchmark hands on for ``settings``: the plan (the report's config), the series' points, the sidecar
    client, the request log, the lock, the run's own limits and verdict knobs and the local tokenizers tried."""
    served = ["m", "lora"] if settings.bench_model else ["m"]  # the model picked from those vLLM lists
    plan = bench_config(settings, choose_model(served, settings))
    trace = read_trace(settings)
    plan = plan_with_trace(settings, plan, trace, None) if trace else plan
    log = RequestLog.of(settings)
    return {
        "plan": plan,
        "points": planned_points(settings, plan) if settings.sweep else None,
        "series": (settings.sweep_rates, settings.repeat, settings.cooldown_s, settings.slo_attainment_pct),
        "sidecar": (settings.sidecar_url, settings.sidecar_token_path),
        "request_log": (log.path, log.max_bytes, log.backups),
        "run": (settings.run_dir, settings.watchdog_s, settings.server_down_s, settings.profile, settings.prompts_file,
                settings.capacity_check, settings.idle_wait_s),
        "verdicts": (settings.gate, settings.gate_threshold_pct, settings.gate_error_rate_pp, settings.baseline,
                     settings.max_error_rate_pct),
        "report_from": args.report_from,
        "outputs": (settings.junit_file, settings.summary_file, settings.client_overhead_max_pct),
        "locust": locust_argv(settings, headless=True, workers=plan.workers, remote_workers=plan.remote_workers)[7:],
        "worker": (worker_argv(settings, settings.master_host or ""), settings.worker_runs) if settings.worker else None,
        "host": host_name(settings.load_host_name),
        "prompt_tokenizers": local_candidates(settings, "m"),  # where prompt sizing looks without a /tokenize
    }  # fmt: skip


def engine_effect(args: argparse.Namespace, settings: Settings) -> dict[str, Any]:
    """What ``./start_vllm.sh`` makes happen: the launch of vLLM that its engine request gives the launcher (the
    stack's own settings are the defaults), how long it waits, and how it switches (blue/green or not, its drain)."""
    request = vllmctl.engine_request(settings, set(given(args)), {})
    launched = apply_request(Settings(), request)
    resolved = ResolvedModel(launched.requested_model, "hub", launched.requested_model,
                             launched.served_model_name or "default-name", False)  # fmt: skip
    kv = plan_kv(pool_gib(launched), launched.vllm_max_model_len, None)
    return {
        "argv": vllm_argv(launched, resolved, kv=kv),
        "env": {k: v for k, v in vllm_env(launched, "cpu", base={}).items() if k.startswith("VLLM_CPU")},
        "resolve": (launched.requested_model, launched.hf_hub_offline, launched.hub_probe_timeout_s),
        "wait_s": settings.startup_timeout_s,
        "switch": (settings.engine_switch, settings.switch_drain_timeout_s),
    }


def ui_effect(args: argparse.Namespace, settings: Settings) -> dict[str, Any]:
    """What Chainlit's process reads: its settings from the environment the UI launcher execs it with."""
    env = ui_launch.chainlit_env(settings, Path("/tmp/ui-root"), {"PATH": "/bin", **flag_environment(args)})
    with mock.patch.dict(os.environ, env, clear=True):
        child = Settings()
    return {"child": {name: getattr(child, name) for name in UI.fields}, "argv": ui_launch.chainlit_argv(settings)}


def sidecar_effect(args: argparse.Namespace, settings: Settings) -> dict[str, Any]:
    """The sidecar's settings (the app is built from them: ``create_app(settings)``)."""
    return {name: getattr(settings, name) for name in SIDECAR.fields} | {"hosts": settings.sidecar_hosts}


COMMANDS: list[tuple[Command, Callable[[], argparse.ArgumentParser], Callable[..., dict[str, Any]]]] = [
    (BENCHMARK, bench.parser, bench_effect),
    (ENGINE, vllmctl.parser, engine_effect),
    (UI, lambda: build_parser("python -m ui.chainlit_launch", "", UI), ui_effect),
    (SIDECAR, lambda: build_parser("python -m sidecar.server", "", SIDECAR), sidecar_effect),
]
CASES = [(c, p, e, flag) for c, p, e in COMMANDS for flag in shown_flags(p())]


@pytest.mark.parametrize(("command", "make_parser", "effect", "flag"), CASES,
                         ids=[f"{c.key}{flag}" for c, _, _, flag in CASES])  # fmt: skip
def test_every_flag_of_every_command_changes_what_it_hands_on(
    command: Command, make_parser: Callable[[], argparse.ArgumentParser], effect: Callable[..., Any], flag: str
) -> None:
    """Each flag a command shows, given a value, changes the plan, engine launch, child environment or settings the
    command hands on, compared with the same command line without it."""
    assert flag in SAMPLES, f"{flag} of {command.prog} needs a value in SAMPLES"
    values, beside = SAMPLES[flag]
    without = effect(*parse(make_parser(), beside))
    with_flag = effect(*parse(make_parser(), [*beside, flag, *values]))
    assert with_flag != without, f"{command.prog} {flag} changes nothing"


def test_log_tools_flags_change_the_files_read() -> None:
    """``./log_analyze.sh --logs-dir DIR`` reads DIR/vllm.log and DIR/requests.jsonl (unless --log/--requests)."""
    request = logcli.parse_args(["--stats", "--logs-dir", "/tmp/l"])
    assert (request.log, request.requests) == ("/tmp/l/vllm.log", "/tmp/l/requests.jsonl")
    own = logcli.parse_args(["--stats", "--logs-dir", "/tmp/l", "--log", "/x.log"])
    assert own.log == "/x.log"
    assert logcli.parse_args(["--stats"]).log is None  # the settings' LOGS_DIR


def foreign_cases() -> list[tuple[str, Command, str]]:
    """(command key, command, foreign flag) for every knob flag a command does not take."""
    cases = []
    for command, make_parser in [(c, p) for c, p, _ in COMMANDS] + [(LOGS, None)]:
        own = set(shown_flags(make_parser())) if make_parser else {"--" + n.rstrip("=") for n in logcli._LONG}
        own |= {"--no-" + f.removeprefix("--") for f in own} | {"-h", "--help"}
        if make_parser:
            own |= {flag for a in make_parser()._actions for flag in a.option_strings}
        for flag in sorted(set(_knob_flags()) - own):
            cases.append((command.key, command, flag))
    return cases


def run_command(key: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    mains: dict[str, Callable[[list[str]], int]] = {
        "benchmark": bench.main, "engine": vllmctl.main, "ui": ui_launch.main, "sidecar": sidecar_launch.main,
        "logs": logcli.main,
    }  # fmt: skip
    try:
        code = mains[key](argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(("key", "command", "flag"), foreign_cases(), ids=[f"{k}{f}" for k, _, f in foreign_cases()])
def test_a_knob_of_another_command_exits_2_naming_where_it_goes(
    key: str, command: Command, flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``./run_benchmark.sh --kv-cache-gb 4`` stops with exit 2 and the command (or make target) that takes it."""
    name, _ = _knob_flags()[flag]
    owner = home(name)
    assert owner is not None and owner.key != key
    code, err = run_command(key, ["--stats", flag, "4"] if key == "logs" else [flag, "4"], capsys)
    assert code == 2, err
    assert f"{flag} is {owner.noun}: " in err and (owner.prog in err or owner.make in err), err


def test_the_issues_example_refusal_is_exact(capsys: pytest.CaptureFixture[str]) -> None:
    """The refusal of the benchmark for an engine knob gives both ways to set it."""
    code, err = run_command("benchmark", ["--kv-cache-gb", "4"], capsys)
    assert code == 2
    assert "--kv-cache-gb is an engine setting: ./start_vllm.sh --kv-cache-gb 4, or KV_CACHE_GB=4 make up" in err


def test_max_concurrency_keeps_vllm_bench_serves_meaning() -> None:
    """``--request-rate 4 --max-concurrency 8``: 4 req/s with at most 8 in flight (the report's config says so);
    ``--max-concurrency 8`` alone: 8 closed-loop users."""
    _, capped = parse(bench.parser(), ["--request-rate", "4", "--max-concurrency", "8"])
    config = bench_config(capped, "m")
    assert (config.mode, config.rate_req_per_sec, config.max_in_flight) == ("open_loop", 4.0, 8)
    _, closed = parse(bench.parser(), ["--max-concurrency", "8"])
    config = bench_config(closed, "m")
    assert (config.mode, config.concurrency, config.max_in_flight) == ("closed_loop", 8, None)
    _, swept = parse(bench.parser(), ["--sweep", "rate:1,2", "--max-concurrency", "3"])
    assert swept.max_in_flight == 3  # an open-loop sweep is a rate too


def test_max_concurrency_beside_a_different_concurrency_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """Two flags setting the users to different numbers stop with exit 2 naming both."""
    code, err = run_command("benchmark", ["--max-concurrency", "8", "--concurrency", "4"], capsys)
    assert code == 2 and "--max-concurrency 8 and --concurrency 4" in err


def test_a_misspelt_flag_gets_the_nearest_one(capsys: pytest.CaptureFixture[str]) -> None:
    """``--concurency 4`` is no knob anywhere: exit 2 with "did you mean --concurrency?"."""
    code, err = run_command("benchmark", ["--concurency", "4"], capsys)
    assert code == 2 and "did you mean --concurrency?" in err


@pytest.mark.parametrize(("typed", "flag"), [("--warmup-requests", "--warmup"), ("--rate-req-per-sec", "--rate")])
def test_a_flag_named_as_the_report_names_its_field_gets_the_knobs_flag(
    typed: str, flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The report's config says ``warmup_requests``; ``--warmup-requests 1`` (too far from ``--warmup`` for the
    nearest-name guess) is refused naming the flag that sets it."""
    code, err = run_command("benchmark", [typed, "1"], capsys)
    assert code == 2 and f"is set by {flag}" in err, err


def test_the_locust_processes_read_the_runs_settings_from_the_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--logs-dir`` (or any flag) reaches the Locust processes through the plan, even where their environment says
    otherwise; the secrets still come from the environment and are never in the plan file."""
    _, settings = parse(bench.parser(), ["--logs-dir", str(tmp_path / "flag"), "--requests-log-backups", "2"])
    plan_path = tmp_path / "run.plan.json"
    write_plan(plan_path, bench_config(settings, "m"), settings)
    monkeypatch.setenv("LOGS_DIR", str(tmp_path / "env"))
    monkeypatch.setenv("VLLM_API_KEY", "k-secret")
    seen = read_run_plan(plan_path).settings
    assert seen.logs_dir == tmp_path / "flag" and seen.requests_log_backups == 2
    assert seen.vllm_api_key == "k-secret" and "k-secret" not in plan_path.read_text()
    assert plan_settings(seen) == plan_settings(settings)


def test_benchmark_help_fits_in_120_lines_in_groups() -> None:
    """``./run_benchmark.sh --help`` at 80 columns: at most 120 lines, the groups in order, the ten most used first."""
    with mock.patch.dict(os.environ, {"COLUMNS": "80"}):
        text = bench.parser().format_help()
    assert len(text.splitlines()) <= 120, len(text.splitlines())
    titles = ["most used:", "load:", "workload:", "SLO and gate:", "output:", "connection:"]
    positions = [text.index(f"\n{title}\n") for title in titles]
    assert positions == sorted(positions)
    most_used = text[positions[0]:positions[1]]
    assert len(BENCHMARK.top) == 10 and all(f"--{n.replace('_', '-')}" in most_used for n in BENCHMARK.top)


def test_benchmark_help_fills_120_columns_whatever_the_terminal() -> None:
    """``--help`` in a pipe (80 columns) wraps its help lines and epilog at the 120 columns its description is written
    to, and a line breaks only where the next word would not fit."""
    with mock.patch.dict(os.environ, {"COLUMNS": "80"}):
        lines = bench.parser().format_help().splitlines()
    assert max(len(line) for line in lines) <= 120
    for line, after in itertools.pairwise(lines):
        alone = line.lstrip().startswith("-") and "  " not in line.strip()  # a long flag: its help goes below
        if line.strip() and after.strip() and not alone and not after.lstrip().startswith("-") and after[-1] != ":":
            assert len(line) + 1 + len(after.split()[0]) > 120, (line, after)


def test_engine_knobs_reach_the_launcher_through_the_engine_request(tmp_path: Path) -> None:
    """``./start_vllm.sh --kv-cache-gb 4 --max-model-len 2048 --dtype float32`` writes them into the engine request
    and the launcher's vLLM command line carries them."""
    args, settings = parse(vllmctl.parser(), ["--kv-cache-gb", "4", "--max-model-len", "2048", "--dtype", "float32"])
    request = vllmctl.engine_request(settings, set(given(args)), {})
    assert request.knobs == {"kv_cache_gb": 4.0, "vllm_max_model_len": 2048, "vllm_dtype": "float32"}
    by_env = vllmctl.engine_request(Settings(kv_cache_gb=2.0), (), {"KV_CACHE_GB": "2"})
    assert by_env.knobs == {"kv_cache_gb": 2.0}  # KV_CACHE_GB=2 ./start_vllm.sh
    assert vllmctl.engine_request(Settings(kv_cache_gb=2.0), (), {}).knobs == {}  # from .env: the stack's already
    launched = apply_request(Settings(), request)
    argv = vllm_argv(launched, ResolvedModel("m", "hub", "m", "m", False), kv=plan_kv(4.0, 2048, None))
    assert argv[argv.index("--dtype") + 1] == "float32" and argv[argv.index("--max-model-len") + 1] == "2048"
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(4 * 1024**3)
    with pytest.raises(ValueError, match="no engine setting"):
        apply_request(Settings(), request.model_copy(update={"knobs": {"concurrency": 3}}))


def test_the_generated_reference_is_current() -> None:
    """docs/reference.md is what ``python -m stack.config_reference`` renders from the settings."""
    from stack.config_reference import reference

    assert (PROJECT_ROOT / "docs" / "reference.md").read_text(encoding="utf-8") == reference()


def test_a_misspelt_make_variable_is_caught_with_the_nearest_setting() -> None:
    """``make benchmark CONCURENCY=4``: exit 2, "did you mean CONCURRENCY?"; a setting of another command is refused
    naming where it goes; a name close to no setting (HF_HOME) passes with a note; ``make up`` takes every setting."""
    from stack.makevars import main, problems

    errors, notes = problems("benchmark", ["CONCURENCY", "HF_HOME", "CONCURRENCY", "VLLM_API_KEY", "SHELL"])
    assert errors == ["CONCURENCY is no setting of make benchmark: did you mean CONCURRENCY?"]
    assert notes == ["HF_HOME is no setting; passed on to the environment as it is"]
    (foreign,), _ = problems("benchmark", ["KV_CACHE_GB"])
    assert "KV_CACHE_GB is not read by make benchmark" in foreign and "./start_vllm.sh --kv-cache-gb" in foreign
    assert problems("up", ["KV_CACHE_GB", "CONCURRENCY", "UI_PORT"]) == ([], [])
    assert main(["benchmark", "CONCURENCY"]) == 2 and main(["sweep", "SWEEP", "SLO"]) == 0


def test_model_on_the_engine_command_points_to_serve_model() -> None:
    """``./start_vllm.sh --model /data/qwen`` (``vllm serve``'s meaning) is refused as the benchmark's model name,
    and the refusal names this command's own flag for the model to serve."""
    from core.flags import refusal

    line = refusal(["--model", "/data/qwen"], {"--serve-model", "--kv-cache-gb"})
    assert line is not None and line.startswith("--model is a benchmark setting")
    assert line.endswith("; to serve a model with this command: --serve-model /data/qwen")
    assert "--serve-model" not in (refusal(["--model", "m"], {"--kv-cache-gb"}) or "")


def test_a_makefile_variable_of_another_target_is_refused() -> None:
    """``make benchmark ARGS="--concurrency 1"`` once ran the default 50 users: ARGS is read by benchmark-compose,
    bench-router and pin-images only. ``make benchmark-compose ARGS=…`` still passes."""
    from stack.makevars import problems

    (error,), _ = problems("benchmark", ["ARGS"])
    assert error.startswith("ARGS is not read by make benchmark (only by make benchmark-compose, bench-router")
    assert "./run_benchmark.sh --concurrency 1" in error
    assert problems("benchmark-compose", ["ARGS", "CONCURRENCY"]) == ([], [])
    assert problems("up", ["SINCE"])[0] and problems("benchmark", ["PYTEST_ARGS"]) == ([], [])


def test_the_makefile_hands_its_command_line_variables_to_the_check() -> None:
    """``make -n benchmark CONCURENCY=4`` shows the check getting the variable's name before the benchmark runs."""
    import subprocess

    # without the variables of a make this test runs under (make test PYTEST_ARGS=…): they would be command-line
    # variables of this make too (MAKEFLAGS), listed before CONCURENCY
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"}}
    out = subprocess.run(["make", "-n", "benchmark", "CONCURENCY=4"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                         timeout=60, check=True, env=env).stdout  # fmt: skip
    lines = out.splitlines()
    check = next(i for i, line in enumerate(lines) if "-m stack.makevars benchmark CONCURENCY" in line)
    assert check < next(i for i, line in enumerate(lines) if "-m loadgen.command.benchmark" in line)


def test_a_compose_switch_passes_what_compose_forwards_and_refuses_the_rest(tmp_path: Path) -> None:
    """With the compose stack ``./start_vllm.sh --served-model-name chat`` recreates vLLM with SERVED_MODEL_NAME set
    (compose forwards it, as MODEL); ``--kv-cache-gb 4`` is refused before compose runs, saying to use .env."""
    from core.enginestate import EngineError, EngineRequest
    from engine.local_control import ComposeEngine

    seen = tmp_path / "compose.env"
    recorder = ("sh", "-c", f'echo "$MODEL|$SERVED_MODEL_NAME|$*" >> {seen}', "compose")
    settings = Settings(vllm_base_url="http://127.0.0.1:9", startup_timeout_s=0.5)
    with pytest.raises(EngineError):  # no vLLM answers at the dead address: the wait fails, after the recreate
        ComposeEngine(settings, recorder).restart(EngineRequest(model="m2", knobs={"served_model_name": "chat"}))
    assert seen.read_text().splitlines() == ["m2|chat|up -d --no-deps --force-recreate vllm"]
    with pytest.raises(EngineError, match=r"KV_CACHE_GB=4\.0 from \.env"):
        ComposeEngine(settings, recorder).restart(EngineRequest(knobs={"kv_cache_gb": 4.0}))
    assert len(seen.read_text().splitlines()) == 1  # compose never ran for the refused one


def test_the_plan_file_never_holds_a_secret(tmp_path: Path) -> None:
    """Secrets, and VLLM_EXTRA_ARGS which may carry vLLM's --api-key, stay in the environment: the plan file the
    Locust processes read has neither (the integration test_secrets searches every file for them too)."""
    settings = Settings(vllm_api_key="vk-secret-1", vllm_extra_args="--api-key s3cr3t-2 --max-num-seqs 4",
                        sidecar_token="tok-secret-3", logs_dir=tmp_path)  # fmt: skip
    values = plan_settings(settings)
    text = json.dumps(values)
    assert "vk-secret-1" not in text and "s3cr3t-2" not in text and "tok-secret-3" not in text
    assert "vllm_extra_args" not in values and values["logs_dir"] == str(tmp_path)
