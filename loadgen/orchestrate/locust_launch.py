"""The one entrypoint of Locust: ``python -m loadgen.orchestrate.locust_launch`` runs its web UI (:8089, a login with
LOCUST_WEB_PASSWORD); the benchmark's headless runs use the same :func:`locust_argv`."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from core.net import free_port, port_in_use_message
from core.settings import Settings, get_settings, service_env

LOCUSTFILE = Path(__file__).resolve().parents[1] / "locust_side" / "locustfile.py"
LOCUST = (sys.executable, "-m", "locust", "-f", str(LOCUSTFILE))


def locust_argv(
    settings: Settings, *, headless: bool, users: int | None = None, run_time_s: float | None = None,
    records_file: Path | None = None, max_requests: int | None = None, stop_timeout_s: float | None = None,
    user_class: str = "ChatUser", ramp_up_s: float | None = None, host: str | None = None, workers: int = 1,
    client_file: Path | None = None, remote_workers: int = 0,
) -> list[str]:
    """Command line of Locust against vLLM (``python -m locust``).

    Headless: ``users`` (default CONCURRENCY) over ``ramp_up_s`` (default RAMP_UP_S) s, or one ``OpenLoopUser`` per
    process; ``workers`` > 1: a master and that many processes; ``remote_workers`` > 0 (EXPECT_WORKERS): a master on
    MASTER_BIND_HOST:MASTER_PORT waiting for ``workers`` local (:func:`worker_argv`) plus the remote ones.
    """
    argv = [*LOCUST, "--host", host or settings.vllm_url]
    if headless:
        processes = workers + remote_workers
        count = processes if user_class == "OpenLoopUser" else users or settings.concurrency
        ramp = settings.ramp_up_s if ramp_up_s is None else ramp_up_s
        spawn_rate = count / ramp if ramp > 0 else count
        argv += ["--headless", "-u", str(count), "-r", f"{spawn_rate:g}", "--only-summary", "--loglevel", "WARNING"]
        if run_time_s:
            argv += ["--run-time", f"{max(1, round(run_time_s))}s"]
        if stop_timeout_s:
            argv += ["--stop-timeout", f"{max(1, round(stop_timeout_s))}"]
        if remote_workers:
            argv += ["--master", "--master-bind-host", settings.master_bind_host, "--master-bind-port",
                     str(settings.master_port), "--expect-workers", str(processes), "--expect-workers-max-wait",
                     f"{max(1, round(settings.expect_workers_timeout_s))}", "--join"]  # fmt: skip
        elif workers > 1:
            # The master listens on 127.0.0.1 and a free port, never Locust's default 5557: two distributed runs on
            # one host would otherwise share a master, and a stranger's workers would write into this run's rows.
            port = str(free_port())
            argv += ["--processes", str(workers), "--master-bind-host", "127.0.0.1", "--master-bind-port", port,
                     "--master-port", port]  # fmt: skip
    else:
        extra = shlex.split(settings.locust_extra_args)
        if "--worker" not in extra:
            argv += ["--web-host", settings.locust_web_host, "--web-port", str(settings.locust_web_port)]
            # the password itself stays in the environment (loadgen.locust_side.llm_webui)
            if settings.locust_web_password:
                argv.append("--web-login")
        argv += extra
    optional = {"--records-file": records_file, "--max-requests": max_requests, "--client-file": client_file}
    for flag, value in optional.items():
        if value:  # a path, or a count above 0
            argv += [flag, str(value)]
    return [*argv, user_class] if headless else argv


def worker_argv(settings: Settings, master_host: str, user_class: str | None = None) -> list[str]:
    """Command line of one joining Locust worker of the master on ``master_host``:MASTER_PORT (``user_class`` None:
    every user class, as a remote worker does not know which the run uses)."""
    argv = [*LOCUST, "--worker", "--master-host", master_host, "--master-port", str(settings.master_port), "--join",
            "--loglevel", "WARNING"]  # fmt: skip
    return [*argv, user_class] if user_class else argv


def main() -> int:
    """Run Locust's web UI for interactive tests; exit 2 when the port is taken."""
    settings = get_settings()
    is_worker = "--worker" in shlex.split(settings.locust_extra_args)
    busy = None if is_worker else port_in_use_message(settings.locust_web_host, settings.locust_web_port,
                                                          "LOCUST_WEB_PORT")  # fmt: skip
    if busy:
        print(f"[ERROR] {busy}", file=sys.stderr, flush=True)
        return 2
    argv = locust_argv(settings, headless=False)
    os.execve(argv[0], argv, service_env("locust"))
    return 0  # pragma: no cover


if __name__ == "__main__":
    raise SystemExit(main())
