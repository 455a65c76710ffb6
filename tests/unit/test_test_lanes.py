"""make test's two lanes (scripts/run_tests.sh, ``TEST_LANE``) split the suite without dropping or doubling a test:
every test collected without a lane is collected in exactly one lane, the session stack's users are all in the
lane that starts it, the seed's defaults (``own_engine``) lead the other lane and the replicas (``load_sensitive``) end it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from core.settings import PROJECT_ROOT


def collected(lane: str | None, *paths: str) -> list[str]:
    """Node ids pytest collects under ``paths`` with ``TEST_LANE=lane`` (unset: None)."""
    env = {k: v for k, v in os.environ.items() if k != "TEST_LANE"}
    if lane is not None:
        env["TEST_LANE"] = lane
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", *paths],
                         cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode in (0, 5), run.stdout[-3000:] + run.stderr[-3000:]
    return [line for line in run.stdout.splitlines() if "::" in line]


def test_the_lanes_split_the_suite_into_two_parts_that_add_up_to_it() -> None:
    paths = ("tests/integration", "tests/gpu", "tests/unit/test_fakes.py")
    whole, stack, rest = collected(None, *paths), collected("stack", *paths), collected("rest", *paths)
    assert not set(stack) & set(rest)
    assert sorted(stack + rest) == sorted(whole)
    assert any("tests/unit/" in node for node in stack) and not any("tests/unit/" in node for node in rest)
    assert any("test_stack.py::" in node for node in stack) and any("test_replicas.py::" in node for node in rest)
    assert not any("test_stack.py::" in node or "test_model_switch.py::" in node for node in rest)
    # marked stack_lane (moved to balance the lanes): first in lane stack, while the session stack boots
    moved = [i for i, node in enumerate(stack) if "test_preflight.py::" in node]
    others = [i for i, node in enumerate(stack) if "tests/integration/" in node and i not in moved]
    assert len(moved) >= 4 and max(moved) < min(others), stack[:20]
    assert any("test_one_pipeline.py::" in node for node in rest)  # lane rest has time before its load-sensitive tail
    # in lane rest the seed's defaults (an engine of its own) run first, while lint and the unit suite still run
    # beside; the replicas, whose clocks must agree with the client's, last
    first = [i for i, node in enumerate(rest) if "test_seed_defaults.py::" in node]
    sensitive = ("test_replicas.py::", "test_client_timing.py::", "test_open_loop_schedule.py::",
                 "test_trace_replays_on_its_schedule", "test_steady_state.py::")  # load_sensitive: at the end, lane stack yielding the cores
    last = [i for i, node in enumerate(rest) if any(s in node for s in sensitive)]
    assert first == list(range(len(first))) and len(first) >= 2, rest[:4]
    assert last == list(range(len(rest) - len(last), len(rest))) and len(last) >= 2, rest[-4:]


def test_an_unknown_lane_is_refused_naming_the_lanes() -> None:
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "tests/integration"],
                         cwd=PROJECT_ROOT, env={**os.environ, "TEST_LANE": "fast"}, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert run.returncode == 4 and "TEST_LANE='fast'" in run.stdout + run.stderr and "stack, rest" in run.stderr


def test_make_test_started_with_sigint_ignored_gives_its_parts_sigint_back(tmp_path: Path) -> None:
    """A launcher that ignores SIGINT (a script's ``make test &``) would leave every part deaf to Ctrl-C and to the
    SIGTERM run_tests.sh passes on as SIGINT (bash cannot restore a signal ignored on entry): the script's head runs
    itself again with SIGINT at its default. The head of the real script runs here, then a part as the script starts
    them, and the part reports its ignored signals."""
    text = (PROJECT_ROOT / "scripts" / "run_tests.sh").read_text(encoding="utf-8")
    head = text[text.index("py=.venvs/app/bin/python") : text.index("\nfi\n") + 4]
    script = tmp_path / "head.sh"
    script.write_text(f"cd {PROJECT_ROOT}\n{head}( trap - INT; exec grep SigIgn /proc/self/status ) &\nwait\n")

    def ignored_in_part(env: dict[str, str]) -> int:
        run = subprocess.run(["/bin/bash", str(script)], env=env, capture_output=True, text=True, timeout=60,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))  # fmt: skip
        return int(run.stdout.split()[-1], 16)

    env = {k: v for k, v in os.environ.items() if k != "RUN_TESTS_SIGINT_DEFAULT"}
    assert ignored_in_part({**env, "RUN_TESTS_SIGINT_DEFAULT": "1"}) & 2  # without the re-run: SIGINT ignored
    assert not ignored_in_part(env) & 2
