"""The unit suite does not test the shell it runs in (tests/unit/conftest.py): settings exported by a developer, or a
test lane, reach no test. Once four tests failed when a lane exported ``VLLM_CPU_OMP_THREADS_BIND=0``."""

from __future__ import annotations

import os
import subprocess
import sys

from core.settings import PROJECT_ROOT

HOSTILE = {"VLLM_CPU_OMP_THREADS_BIND": "0", "CONCURRENCY": "7", "MODEL": "someone/else", "KV_CACHE_GB": "9"}
"""Settings a developer might have exported, each changing a default these tests check."""


def test_exported_settings_reach_no_unit_test() -> None:
    """Tests of the launcher's environment and of the replicas' core split pass with the settings above exported."""
    tests = ["tests/unit/stack/test_compose_replicas.py::test_cpu_overlay_binds_each_replica_to_its_cores_unless_the_user_does",
             "tests/unit/engine/test_replica_programs.py::test_replica_settings_split_cores_and_gpus"]  # fmt: skip
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests], cwd=PROJECT_ROOT,
                         env={**os.environ, **HOSTILE}, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0 and "2 passed" in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]
