"""``./run_benchmark.sh --worker --master-host HOST``: this host as a load worker of a benchmark on another host
(one joining Locust worker per run: :mod:`loadgen.locust_side.remote`)."""

from __future__ import annotations

import subprocess

from core.settings import PROJECT_ROOT, Settings, service_env
from loadgen.locust_side.joining import host_name
from loadgen.orchestrate.locust_launch import worker_argv

EXIT_USAGE = 2


def worker_main(settings: Settings) -> int:
    """Join WORKER_RUNS runs in a row (0: until no master answers), a fresh Locust worker each; the last worker's
    exit code (0: every run served; 2: not configured)."""
    if not settings.master_host:
        print("[ERROR] --worker needs --master-host HOST (MASTER_HOST): the host running ./run_benchmark.sh "
              "--expect-workers N", flush=True)  # fmt: skip
        return EXIT_USAGE
    if not settings.sidecar_token:
        print("[ERROR] --worker needs the stack's sidecar token to join: set SIDECAR_TOKEN to the content of the "
              "benchmark host's run/sidecar_token (SIDECAR_TOKEN_FILE)", flush=True)  # fmt: skip
        return EXIT_USAGE
    print(f"[INFO] Load worker {host_name(settings.load_host_name)} joining the benchmark on "
          f"{settings.master_host}:{settings.master_port} (Ctrl-C to leave)", flush=True)  # fmt: skip
    argv = worker_argv(settings, settings.master_host)
    env = {**service_env("locust"), "LOCUST_JOIN": "1"}  # both user classes exist until the plan arrives
    served = 0
    try:
        while True:
            code = subprocess.run(argv, cwd=PROJECT_ROOT, env=env, check=False).returncode
            if code != 0:
                # with WORKER_RUNS=0 the end of the series is a master that no longer answers (Locust gives up)
                return 0 if settings.worker_runs == 0 and served else code
            served += 1
            if served == settings.worker_runs:
                return 0
            print(f"[INFO] Run {served} done; waiting for the next run's master on {settings.master_host}:"
                  f"{settings.master_port}", flush=True)  # fmt: skip
    except KeyboardInterrupt:
        return 130
