"""An environment variable that looks like a misspelt setting (``REPLICA=2 make up``) is refused with a
did-you-mean, exit 2, like the make-variable form; a shell's other variables pass."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest

from core.envtypos import env_typos, near_setting, typo_distance
from core.settings import PROJECT_ROOT
from stack.makevars import main


def test_typo_distance_counts_one_edit_each() -> None:
    assert typo_distance("REPLICA", "REPLICAS") == 1  # insert
    assert typo_distance("CONCURENCY", "CONCURRENCY") == 1
    assert typo_distance("WRAMUP", "WARMUP") == 1  # two neighbours swapped
    assert typo_distance("SEDE", "SEED") == 1 and typo_distance("ABC", "XYZ") == 3


@pytest.mark.parametrize(
    ("name", "near"),
    [("REPLICA", "REPLICAS"), ("CONCURENCY", "CONCURRENCY"), ("VLLM_PROT", "VLLM_PORT"), ("WRAMUP", "WARMUP"),
     ("SIDECAR_TOKN", "SIDECAR_TOKEN")],
)  # fmt: skip
def test_near_misses_of_settings_are_named(name: str, near: str) -> None:
    assert near_setting(name) == near


@pytest.mark.parametrize(
    "name",
    ["PATH", "HOME", "HF_HOME", "CUDA_HOME", "PYTHONPATH", "MAKEFLAGS", "SUPERVISOR_ENABLED", "VLLM_HOST_IP",
     "VLLM_LOGGING_LEVEL", "VLLM_USE_V1", "LOCUST_RECORDS_FILE", "TEST_PORT_OFFSET", "REPLICAS", "NAME", "lower",
     "MODELS", "SEEDS", "DATASETS", "RATES"],
)  # fmt: skip
def test_other_variables_pass(name: str) -> None:
    assert near_setting(name) is None


def test_the_environment_is_checked_once_per_name() -> None:
    env = {"REPLICA": "2", "PATH": "/bin", "CONCURENCY": "4"}
    lines = env_typos(env)
    assert [line.split(" is no setting")[0] for line in lines] == [
        "environment variable CONCURENCY", "environment variable REPLICA"
    ]
    assert "did you mean REPLICAS?" in lines[1]
    assert env_typos(env, skip=frozenset({"CONCURENCY", "REPLICA"})) == []


def test_make_checks_the_environment_and_exits_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPLICA", "2")
    assert main(["up"]) == 2
    monkeypatch.delenv("REPLICA")
    assert main(["up"]) == 0


def test_the_benchmark_refuses_a_misspelt_environment_variable_before_anything_runs() -> None:
    env = {**os.environ, "CONCURENCY": "4"}
    done = subprocess.run([sys.executable, "-m", "loadgen.command.benchmark"], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2
    assert "environment variable CONCURENCY is no setting: did you mean CONCURRENCY?" in done.stderr


def test_a_bounded_distance_is_the_exact_one_capped_at_bound_plus_one() -> None:
    """The early exit that keeps the start-up check cheap never changes a verdict: on 20,000 random pairs over a
    small alphabet (many near misses and swaps) the bounded distance is min(exact, bound + 1) for bounds 0 to 3."""
    rnd = random.Random(1)
    for _ in range(20_000):
        a, b = ("".join(rnd.choice("ABCR_") for _ in range(rnd.randint(0, 9))) for _ in range(2))
        exact = typo_distance(a, b)
        for bound in range(4):
            assert typo_distance(a, b, bound) == min(exact, bound + 1), (a, b, bound, exact)
