"""The real stack for integration tests: ``make up`` with the synthetic tiny model on test ports, torn down always.

Ports and folders differ from a developer's running stack (28xxx ports, a temporary logs/reports/run folder), so
tests never touch it. ``stack.env`` is the environment every command of a test must use.

The stack runs with every secret set (:data:`SECRETS`): vLLM started with an API key (VLLM_API_KEY, and a second
one through ``VLLM_EXTRA_ARGS='--api-key …'``), an HF token, a four-character UI password and a Locust web
password, so every test proves its path works with them, and ``test_secrets`` that none of them is written.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from core.replicas import engine_url
from core.settings import PROJECT_ROOT, Settings

# The four ports sit next to each other (28000-28003); TEST_PORT_OFFSET shifts them, so checkouts whose offsets differ
# by 4 or more run their integration tests side by side without a clash.
_BASE = 28000 + int(os.environ.get("TEST_PORT_OFFSET", "0"))
TEST_PORTS = {"UI_PORT": _BASE, "VLLM_PORT": _BASE + 1, "SIDECAR_PORT": _BASE + 2, "LOCUST_WEB_PORT": _BASE + 3,
              "REPLICA_PORT_BASE": _BASE + 500}  # the engine behind the router: slot a, router metrics, slot b


SECRETS = {
    "HF_TOKEN": f"hf_{secrets.token_hex(16)}",
    "VLLM_API_KEY": f"vk-{secrets.token_hex(12)}",
    "EXTRA_API_KEY": f"s3cr3t{secrets.token_hex(6)}",  # given to vLLM as VLLM_EXTRA_ARGS='--api-key …'
    # 4 characters (short secrets are masked too); a '#' so that it cannot be part of a hex id in a log by chance
    "UI_PASSWORD": f"{secrets.choice('GHJKMNPQRSTVWXYZ')}{secrets.choice('GHJKMNPQRSTVWXYZ')}#{secrets.randbelow(10)}",
    "LOCUST_WEB_PASSWORD": f"lp-{secrets.token_hex(8)}",
}
"""Secret values of the test stack (fresh per session, so finding one anywhere is a leak, never a coincidence)."""
UI_USERNAME = "tester"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Unit tests run first (while the session stack starts, see :func:`pytest_collection_finish`), then the modules
    that start engines of their own (``own_engine``: CPU-bound, so they run while lint and the unit suite still load
    the machine in ``make test``, and the tests that time the client run after); tests that change the shared stack
    (restart vLLM with other flags, switch the model, kill it) or that search what every other test wrote run after
    the rest, in the order of their ``stack_order(N)`` marker; ``stack_lane`` tests (no session stack) run first,
    so in ``make test``'s lane stack that stack boots while they run; ``load_sensitive`` modules (whose checks need the
    client's and the engines' clocks to agree) run last, when the fewest processes load the host; the others keep
    pytest's order (the sort is stable). File names play no part."""

    def order(item: pytest.Item) -> int:
        if item.get_closest_marker("integration") is None:
            return -2
        if item.get_closest_marker("own_engine") is not None or item.get_closest_marker("stack_lane") is not None:
            return -1  # stack_lane: first in lane stack, while the session stack boots (started at collection)
        if item.get_closest_marker("load_sensitive") is not None:
            return LAST
        marker = item.get_closest_marker("stack_order")
        return int(marker.args[0]) if marker else 0

    lane = os.environ.get("TEST_LANE", "")
    if lane:
        if lane not in LANES:
            raise pytest.UsageError(f"TEST_LANE={lane!r}: use one of {', '.join(LANES)}, or leave it unset for all")
        keep = [item for item in items if in_lane(item) == lane]
        config.hook.pytest_deselected(items=[item for item in items if in_lane(item) != lane])
        items[:] = keep
    items.sort(key=order)


LAST = 1_000
"""The order of ``load_sensitive`` tests: after every ``stack_order(N)``."""

LANES = ("stack", "rest")
"""``TEST_LANE`` (scripts/run_tests.sh runs the two side by side): ``stack`` keeps the unit tests and the integration
tests on the session stack (one vLLM engine, restarted by the ``stack_order`` tests); ``rest`` keeps the other
integration tests (the mock server, other servers, stacks of their own on their own ports)."""


def in_lane(item: pytest.Item) -> str:
    """The lane of a test (:data:`LANES`): ``stack`` for unit tests, tests using the session ``stack`` fixture and
    tests marked ``stack_lane`` (moved there to balance the lanes' times: the longer one is ``make test``'s)."""
    if item.get_closest_marker("integration") is None or "stack" in getattr(item, "fixturenames", ()):
        return "stack"
    return "stack" if item.get_closest_marker("stack_lane") is not None else "rest"


_EARLY_UP: dict[str, tuple[subprocess.Popen[bytes], Path, float]] = {}
"""The session stack's ``make up`` started at collection ("up": process, its folder, start time on the monotonic
clock); taken by the ``stack`` fixture, or ended by :func:`pytest_sessionfinish` when no test took it."""


@pytest.fixture(autouse=True)
def _alone_when_load_sensitive(request: pytest.FixtureRequest) -> Iterator[None]:
    """A ``load_sensitive`` test (its checks need the client's and the engines' clocks to agree) gets the cores:
    ``make test`` runs lane stack and the checks in a cgroup (``TEST_YIELD_CGROUP``) whose CPU share drops to
    :data:`YIELD_SHARES` while such a test runs, and without one creates ``TEST_WAIT_FOR`` when lane stack has ended
    (these tests wait for it, at most 20 min). Beside lane stack at an equal share, 3 of 4 runs failed one timing
    check (2026-12-07); at a share of 64, 1 of 2 (the open-loop send delay's p99 183 ms)."""
    marker = request.node.get_closest_marker("load_sensitive")
    group = os.environ.get("TEST_YIELD_CGROUP")
    flag = os.environ.get("TEST_WAIT_FOR")
    if marker is not None and group:
        shares = Path(group, "cpu.shares")
        shares.write_text(str(YIELD_SHARES))
        try:
            yield
        finally:
            shares.write_text("1024")  # the kernel's default share
        return
    if marker is not None and flag:
        deadline = time.monotonic() + 1200
        while not Path(flag).exists() and time.monotonic() < deadline:
            time.sleep(1.0)
    yield


YIELD_SHARES = 2
"""The cpu.shares of lane stack's group while a ``load_sensitive`` test runs: the kernel's least (1024 each other
group), so lane stack runs only on what those tests leave idle."""


def pytest_collection_finish(session: pytest.Session) -> None:
    """When tests that do not need the session stack run before its first user (``make test``: the unit tests),
    ``make up`` starts now, in the background, so the engine loads while they run (2 cores: the unit tests use one)."""
    items = session.items
    first = next((i for i, item in enumerate(items) if "stack" in getattr(item, "fixturenames", ())), None)
    if first is None or first == 0 or session.config.option.collectonly:
        return
    factory: pytest.TempPathFactory = session.config._tmp_path_factory  # type: ignore[attr-defined]
    tmp = factory.mktemp("stack")
    proc, begun = start_up(stack_env(tmp), tmp)
    _EARLY_UP["up"] = (proc, tmp, begun)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A stack started early that no test took (the run stopped in the unit tests) is stopped: ``make down``."""
    early = _EARLY_UP.pop("up", None)
    if early is not None:
        proc, tmp, _ = early
        proc.wait()
        subprocess.run(["make", "down"], cwd=PROJECT_ROOT, env=stack_env(tmp), capture_output=True, timeout=300)


@dataclass
class Stack:
    """A running stack: URLs, folders and the environment its commands use."""

    env: dict[str, str]
    logs_dir: Path
    reports_dir: Path
    run_dir: Path

    @property
    def vllm_url(self) -> str:
        return f"http://127.0.0.1:{TEST_PORTS['VLLM_PORT']}"

    @property
    def settings(self) -> Settings:
        """This stack's settings as its commands see them (ports and folders; the engine files follow a switch)."""
        return Settings(_env_file=None, run_dir=self.run_dir, logs_dir=self.logs_dir,  # type: ignore[call-arg]
                        vllm_host="127.0.0.1", vllm_port=int(self.env["VLLM_PORT"]),
                        replica_port_base=int(self.env["REPLICA_PORT_BASE"]))  # fmt: skip

    @property
    def engine_url(self) -> str:
        """vLLM itself (its ``/metrics``, which the router on VLLM_PORT does not pass on): the engine serving now
        (:func:`core.replicas.engine_url`)."""
        return engine_url(self.settings)

    @property
    def engine_state_file(self) -> Path:
        """The serving engine's state file (``logs/engine_state.json``, ``engine_state-b.json`` after a switch)."""
        return self.settings.engine_state_file

    @property
    def vllm_log_file(self) -> Path:
        """The serving engine's log (``logs/vllm.log``, ``vllm-b.log`` after a switch)."""
        return self.settings.vllm_log_file

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{TEST_PORTS['UI_PORT']}"

    @property
    def sidecar_url(self) -> str:
        return f"http://127.0.0.1:{TEST_PORTS['SIDECAR_PORT']}"

    @property
    def locust_url(self) -> str:
        return f"http://127.0.0.1:{TEST_PORTS['LOCUST_WEB_PORT']}"

    @property
    def vllm_headers(self) -> dict[str, str]:
        """What every client of vLLM sends: its API key."""
        return {"Authorization": f"Bearer {SECRETS['VLLM_API_KEY']}"}

    @property
    def sidecar_headers(self) -> dict[str, str]:
        """The sidecar's write token, as ``make up`` made it (``run/sidecar_token``)."""
        return {"Authorization": f"Bearer {(self.run_dir / 'sidecar_token').read_text().strip()}"}

    def make(self, *args: str, timeout_s: float = 900, **extra_env: str) -> subprocess.CompletedProcess[str]:
        """Run ``make ARGS`` in the project with this stack's environment (plus ``extra_env``)."""
        return subprocess.run(
            ["make", *args],
            cwd=PROJECT_ROOT,
            env={**self.env, **extra_env},
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )

    def python(self, *args: str, timeout_s: float = 600, **extra_env: str) -> subprocess.CompletedProcess[str]:
        """Run the app env's ``python ARGS`` with this stack's environment."""
        return subprocess.run(
            [str(PROJECT_ROOT / ".venvs/app/bin/python"), *args],
            cwd=PROJECT_ROOT,
            env={**self.env, **extra_env},
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )

    def vllm_gauges(self) -> dict[str, float]:
        """vLLM's ``/metrics`` gauges of requests ``running`` and ``waiting`` now (summed over engines)."""
        text = httpx.get(f"{self.engine_url}/metrics", timeout=10).text
        gauges = {"running": 0.0, "waiting": 0.0}
        for name, value in re.findall(r"^vllm:num_requests_(running|waiting)\{[^}]*\} (\S+)$", text, re.MULTILINE):
            gauges[name] += float(value)
        return gauges

    def wait_until_idle(self, timeout_s: float = 120) -> None:
        """Wait until vLLM runs and queues nothing (three reads in a row), so a test that reads server-wide counters
        sees only its own requests, not an earlier test's answer still finishing."""
        deadline = time.monotonic() + timeout_s
        quiet = 0
        while quiet < 3:
            gauges = self.vllm_gauges()
            quiet = quiet + 1 if gauges["running"] == gauges["waiting"] == 0 else 0
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM still busy after {timeout_s:.0f} s: {gauges}")
            time.sleep(0.2)

    def service_pids(self) -> set[int]:
        """PIDs of supervisord and every process below it."""
        pid_file = self.run_dir / "supervisord.pid"
        try:
            root = psutil.Process(int(pid_file.read_text().strip()))
        except (OSError, ValueError, psutil.NoSuchProcess):
            return set()
        return {root.pid, *(p.pid for p in root.children(recursive=True))}


def wait_http(url: str, timeout_s: float) -> None:
    """Wait until ``url`` answers 200 (polling every 0.3 s).

    Raises:
        AssertionError: it did not within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{url} did not answer within {timeout_s:.0f} s")


REPORT_LINE = re.compile(r"^\[REPORT\] (?:Baseline|Report) saved to (\S+)", re.M)


def report_path(stdout: str) -> Path:
    """The report a benchmark wrote, from its ``[REPORT] Baseline saved to <path>`` line (a run that can be a
    baseline) or ``[REPORT] Report saved to <path> (not a baseline: …)`` (one that cannot: interrupted, ended
    early, no success).

    Raises:
        AssertionError: no such line.
    """
    match = REPORT_LINE.search(stdout)
    assert match, f"no [REPORT] … saved to line in:\n{stdout[-3000:]}"
    return Path(match.group(1))


TEST_ENGINE_ARGS = "-O0"
"""vLLM flags of every test engine: ``-O0`` (no torch.compile) skips the CPU runner's compile warm-up, half of a
tiny-model start (36.6 s -> 18.3 s measured, same answers); the tests test the stack around vLLM, not its compiler."""


TEST_ENGINE_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
"""vLLM environment of every test engine: its worker runs inside the engine-core process instead of a third process
importing torch and vLLM (a tiny ``-O0`` start 27.5 s -> 19.3 s, mean of 3 alternating starts each); the seed's
defaults (``test_seed_defaults``) keep vLLM's own process layout."""


def stack_env(tmp: Path) -> dict[str, str]:
    """Environment of the test stack."""
    env = {k: v for k, v in os.environ.items() if k not in {"MODEL", "VLLM_BASE_URL", "SIDECAR_BASE_URL"}}
    env.update({k: str(v) for k, v in TEST_PORTS.items()})
    env.update(
        MODEL="synthetic:tiny",
        LOGS_DIR=str(tmp / "logs"),
        REPORTS_DIR=str(tmp / "reports"),
        RUN_DIR=str(tmp / "run"),
        KV_CACHE_GB="1",
        ENGINE_METRICS_INTERVAL_S="0.25",
        UI_MAX_TOKENS="3500",  # below the tiny model's 4,096-token context, so the UI's own limit can be seen to bite
        STARTUP_TIMEOUT_S="600",
        PYTHONUNBUFFERED="1",
        HF_TOKEN=SECRETS["HF_TOKEN"],
        VLLM_API_KEY=SECRETS["VLLM_API_KEY"],
        VLLM_EXTRA_ARGS=f"{TEST_ENGINE_ARGS} --api-key {SECRETS['EXTRA_API_KEY']}",
        UI_USERNAME=UI_USERNAME,
        UI_PASSWORD=SECRETS["UI_PASSWORD"],
        LOCUST_WEB_PASSWORD=SECRETS["LOCUST_WEB_PASSWORD"],
        **TEST_ENGINE_ENV,
    )
    for name in ("SIDECAR_TOKEN", "SIDECAR_TOKEN_FILE", "UI_AUTH_SECRET"):  # the stack makes its own
        env.pop(name, None)
    return env


def start_up(env: dict[str, str], tmp: Path) -> tuple[subprocess.Popen[bytes], float]:
    """``make up`` with ``env`` started in the background (its output in ``tmp/make-up.log``): its process and start
    time on the monotonic clock."""
    tmp.mkdir(parents=True, exist_ok=True)
    with (tmp / "make-up.log").open("wb") as log:
        proc = subprocess.Popen(["make", "up"], cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, time.monotonic()


def _await_up(proc: subprocess.Popen[bytes], begun: float, tmp: Path, up_timeout_s: float) -> tuple[int, str]:
    """The exit code of ``make up`` (killed after ``up_timeout_s`` from ``begun``) and the tail of its output. When
    the wait is interrupted (Ctrl-C, or SIGTERM that ``make test`` passes on as SIGINT), ``make up`` and its children
    get SIGINT too, so the stack's own start stops what it started (``stack.control.await_start``), and then the
    interruption goes on."""
    try:
        code = proc.wait(timeout=max(1.0, up_timeout_s - (time.monotonic() - begun)))
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    except BaseException:
        tree = _tree(proc.pid)
        for member in tree:
            with suppress(psutil.Error):
                member.send_signal(signal.SIGINT)
        psutil.wait_procs(tree, timeout=120)  # the start's own `make down` has ended too
        if proc.poll() is None:
            proc.kill()
        raise
    return code, (tmp / "make-up.log").read_text(errors="replace")[-8000:]


def _tree(pid: int) -> list[psutil.Process]:
    """Process ``pid`` and every descendant (none when it has ended)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


@contextmanager
def running_stack(env: dict[str, str], tmp: Path, up_timeout_s: float = 900,
                  started: tuple[subprocess.Popen[bytes], float] | None = None) -> Iterator[Stack]:
    """The stack ``make up`` starts with ``env`` (folders under ``tmp``); ``make down`` afterwards leaves no process
    behind (asserted). ``started``: a ``make up`` already running with ``env`` (its process and monotonic start
    time; its output in ``tmp/make-up.log``), awaited instead of a new one. A failed ``make up`` fails the test with
    its output."""
    s = Stack(env=env, logs_dir=tmp / "logs", reports_dir=tmp / "reports", run_dir=tmp / "run")
    proc, begun = started or start_up(env, tmp)
    try:
        code, output = _await_up(proc, begun, tmp, up_timeout_s)
    except BaseException:  # Ctrl-C (or SIGTERM passed on as SIGINT) while it starts: nothing is left running
        s.make("down")
        raise
    if code != 0:
        s.make("down")
        pytest.fail(f"make up failed ({code}):\n{output}")
    print(f"\n[stack] up in {time.monotonic() - begun:.0f} s")
    pids = s.service_pids()
    try:
        yield s
    finally:
        pids |= s.service_pids()
        down = s.make("down")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(psutil.pid_exists(p) for p in pids):
            time.sleep(0.5)
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        assert down.returncode == 0, down.stdout + down.stderr
        assert not alive, f"make down left processes behind: {alive}"


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The whole stack started by ``make up``; ``make down`` afterwards leaves no process behind."""
    early = _EARLY_UP.pop("up", None)
    if early is not None:
        proc, tmp, begun = early
        with running_stack(stack_env(tmp), tmp, started=(proc, begun)) as s:
            yield s
        return
    tmp = tmp_path_factory.mktemp("stack")
    with running_stack(stack_env(tmp), tmp) as s:
        yield s
