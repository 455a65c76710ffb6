"""Every refusal of ``./run_benchmark.sh`` (another benchmark running, the stack down, a plan that cannot run, prompts
that cannot be prepared) comes before its start line ``[INFO] Starting benchmark …``; a run that starts prints it
first, then what it prepared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadgen.command import benchmark as bench
from loadgen.command.benchmark import RunLock
from loadgen.errors import BenchError
from loadgen.orchestrate.preflight import Target

BANNER = "[INFO] Starting benchmark for "


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """The benchmark with a healthy server and sidecar faked (no socket is opened) and its run replaced by a record
    of the plan's model: what ran (empty when nothing started)."""
    monkeypatch.setenv("RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("LOGS_DIR", str(tmp_path / "logs"))
    ran: list[str] = []
    monkeypatch.setattr(bench, "preflight", lambda settings, sidecar: Target("m", ["m"], max_model_len=4096))
    monkeypatch.setattr(bench, "plan_problem", lambda *args: None)

    def run(settings: Any, plan: Any, *args: Any) -> int:
        ran.append(plan.model)
        return 0

    monkeypatch.setattr(bench, "run_benchmark", run)
    return ran


def refuse(*_: Any) -> Any:
    raise BenchError("the server at http://x cannot tokenize (/tokenize: HTTP 404)")


def test_a_second_benchmark_is_refused_before_its_start_line(
    started: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """While another benchmark holds the stack's lock, a second one exits 2 naming it, with no start line, and asks
    nothing of the server (refused at once)."""
    with RunLock(tmp_path / "run"):
        code = bench.main(["--requests", "2"])
    out, err = capsys.readouterr()
    assert code == 2 and "another benchmark is running against this stack" in err
    assert BANNER not in out and started == []


@pytest.mark.parametrize(
    ("argv", "patch", "said"),
    [
        (["--dataset", "random"], ("random_prompts_file", refuse), "cannot tokenize"),
        (["--prefix-len", "64"], ("prefixes_file", refuse), "cannot tokenize"),
        ([], ("preflight", refuse), "cannot tokenize"),
        ([], ("plan_problem", lambda *a: "[ERROR] MAX_TOKENS=99999 cannot fit"), "cannot fit"),
    ],
    ids=["random-prompts", "shared-prefixes", "server-down", "plan-refused"],
)
def test_every_refusal_comes_before_the_start_line(
    started: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    argv: list[str], patch: tuple[str, Any], said: str,
) -> None:  # fmt: skip
    """Prompts that cannot be prepared, a server that does not answer, a plan that cannot run: exit 2, the reason,
    and no start line."""
    monkeypatch.setattr(bench, *patch)
    code = bench.main(["--requests", "2", *argv])
    out, err = capsys.readouterr()
    assert code == 2 and said in err and "[ERROR]" in err
    assert BANNER not in out and started == []


def test_a_run_that_starts_prints_its_start_line_then_what_it_prepared(
    started: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Shared prefixes written: the start line comes first, the line naming the prefixes' file after it."""
    monkeypatch.setattr(bench, "prefixes_file", lambda *a: tmp_path / "prefixes.json")
    code = bench.main(["--requests", "2", "--prefix-len", "64"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0 and started == ["m"]
    assert lines[0] == f"{BANNER}m (vLLM backend)"
    assert lines[1] == f"[INFO] 1 shared prefix(es) of 64 tokens in {tmp_path / 'prefixes.json'}"
