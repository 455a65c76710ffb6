"""Two real vLLM CPU engines behind the real vllm-router (`REPLICAS=2 make up`): one report for the cluster, and a
replica killed mid-run is seen, reported and routed around. One stack for both scenarios (two CPU engines on a
shared 2-core host are slow): small MAX_TOKENS, 40 requests."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from core.serverview import SUCCESS_REASONS
from core.serverview_samples import parse_exposition
from core.settings import PROJECT_ROOT
from tests.integration.conftest import SECRETS, Stack, report_path, running_stack, stack_env

pytestmark = [pytest.mark.integration, pytest.mark.load_sensitive]  # its per-replica clock agreement

_BASE = 28060 + int(os.environ.get("TEST_PORT_OFFSET", "0"))
PORTS = {"UI_PORT": _BASE, "VLLM_PORT": _BASE + 1, "SIDECAR_PORT": _BASE + 2, "LOCUST_WEB_PORT": _BASE + 3,
         "REPLICA_PORT_BASE": _BASE + 10}  # fmt: skip
HEADERS = {"Authorization": f"Bearer {SECRETS['VLLM_API_KEY']}"}
LOAD = {"REQUESTS": "40", "CONCURRENCY": "4", "WARMUP": "8", "MAX_TOKENS": "8", "IGNORE_EOS": "1"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """`REPLICAS=2 ROUTER_POLICY=round_robin make up` on its own ports; `make down` afterwards leaves no process. The
    stack handed to the tests runs its commands without REPLICAS and ROUTER_POLICY, as a user does after `make up`."""
    tmp = tmp_path_factory.mktemp("cluster")
    env = {**stack_env(tmp), **{k: str(v) for k, v in PORTS.items()}, "REPLICAS": "2", "ROUTER_POLICY": "round_robin",
           "STARTUP_TIMEOUT_S": "1500"}  # two engines compiling at once on a shared 2-core host
    with running_stack(env, tmp, up_timeout_s=1800) as s:
        # later commands as a user types them: without REPLICAS or ROUTER_POLICY (make up recorded them)
        yield dataclasses.replace(s, env={k: v for k, v in env.items() if k not in ("REPLICAS", "ROUTER_POLICY")})


def replica_url(k: int) -> str:
    """Local replica ``k``'s own URL."""
    return f"http://127.0.0.1:{PORTS['REPLICA_PORT_BASE'] + k}"


def finished_total(url: str) -> float:
    """Requests the engine at ``url`` completed since it started (vllm:request_success_total with a success reason,
    not aborts)."""
    samples = parse_exposition(httpx.get(f"{url}/metrics", headers=HEADERS, timeout=10).text)
    return sum(value for labels, value in samples.get("vllm:request_success_total", {}).items()
               if dict(labels).get("finished_reason") in SUCCESS_REASONS)  # fmt: skip


def report_of(stdout: str) -> dict[str, Any]:
    """The JSON report the benchmark printed the path of."""
    return json.loads(report_path(stdout).read_text(encoding="utf-8"))


def test_status_lists_each_replica_and_the_router(cluster: Stack) -> None:
    """`make status` shows vllm, vllm-1 (their own ports) and the router on VLLM_PORT, all running and answering."""
    status = cluster.make("status", timeout_s=120)
    assert status.returncode == 0, status.stdout + status.stderr
    lines = {line.split()[0]: line for line in status.stdout.splitlines() if line.strip()}
    for name, port in (("vllm", PORTS["REPLICA_PORT_BASE"]), ("vllm-1", PORTS["REPLICA_PORT_BASE"] + 1),
                       ("router", PORTS["VLLM_PORT"])):  # fmt: skip
        assert "RUNNING" in lines[name] and "answers" in lines[name] and f":{port}/" in lines[name], status.stdout


def test_two_replicas_share_the_benchmark_and_add_up(cluster: Stack) -> None:
    """40 requests through the router: the report lists both replicas, both served, their window counts sum to the
    client's, each agrees with the client's means, and since start they finished warm-up plus measured requests."""
    run = cluster.make("benchmark", **LOAD, timeout_s=1200)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = report_of(run.stdout)
    assert report["config"]["replicas"] == 2 and report["config"]["router_policy"] == "round_robin"
    assert report["config"]["router_version"]
    view = report["cluster"]
    assert [r["name"] for r in view["replicas"]] == ["vllm", "vllm-1"] and view["down"] == []
    counts = [r["requests_succeeded"] for r in view["replicas"]]
    assert all(c > 0 for c in counts), counts
    assert sum(counts) == report["server"]["requests_succeeded"] == report["metrics"]["requests_ok"] == 40
    # counts exact, means within the cross-check's tolerances plus the client's own mean event-loop lag, summed and
    # per replica (there against the client's means weighted to the replica's prompt lengths: docs/cluster.md)
    lag = report["client"]["processes"]
    assert report["server"]["disagreements"] == [], (report["server"]["agreements"], lag)
    assert all(r["agrees"] and r["kv_pool_tokens"] for r in view["replicas"]), (view, lag)
    assert view["imbalance_percent"] is not None and view["imbalance_percent"] <= 25.0  # round robin: about 20/20
    # since start: the warm-up and 40 measured requests, and the sidecar's one-token system_fingerprint probe
    # after the window (sidecar/reports/envinfo.py)
    assert finished_total(replica_url(0)) + finished_total(replica_url(1)) == int(LOAD["WARMUP"]) + 40 + 1
    markdown = (cluster.reports_dir / report["markdown_file"]).read_text()
    assert "## Replicas" in markdown and "| vllm-1 (" in markdown


def test_replica_killed_mid_run(cluster: Stack) -> None:
    """vllm-1 killed after a few rows: the run still ends with a report, vllm-1 marked down, every row there with
    failures counted by cause, the router served the rest on vllm; `make status` reports vllm-1 as not running."""
    runs = cluster.logs_dir / "runs"
    before = set(runs.glob("*.requests.jsonl")) if runs.exists() else set()
    bench = subprocess.Popen(["make", "benchmark", *(f"{k}={v}" for k, v in LOAD.items())], cwd=PROJECT_ROOT,
                             env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        new = set(runs.glob("*.requests.jsonl")) - before if runs.exists() else set()
        rows = [json.loads(x) for p in new for x in p.read_text().splitlines() if x.strip()]
        if sum(r["phase"] == "measured" for r in rows) >= 8:
            break
        time.sleep(0.2)
    state = json.loads((cluster.logs_dir / "engine_state-1.json").read_text())
    killed_at = time.time()
    os.killpg(state["pgid"], signal.SIGKILL)  # the launcher and its vLLM: supervisord sees vllm-1 exit
    out, _ = bench.communicate(timeout=900)
    report = report_of(out)
    view = report["cluster"]
    dead = next(r for r in view["replicas"] if r["name"] == "vllm-1")
    assert dead["state"] == "down" and view["down"] == ["vllm-1"] and view["note"], view
    rows = [json.loads(x) for x in (cluster.reports_dir / report["requests_file"]).read_text().splitlines()]
    measured = [r for r in rows if r["phase"] == "measured"]
    assert len(measured) == 40, len(measured)  # no row lost
    failed = [r for r in measured if not r["ok"]]
    assert sum(report["errors"]["by_kind"].values()) == len(failed)
    alive = next(r for r in view["replicas"] if r["name"] == "vllm")
    # the router kept serving on vllm: a request sent after the kill can only have succeeded there (how many the
    # dead replica served before it, and how many the router still sent it, depend on timing: not counted)
    after_kill = sum(r["ok"] and r["started_at"] > killed_at for r in measured)
    assert alive["state"] == "up" and after_kill > 0 and alive["requests_succeeded"] >= after_kill, (after_kill, view)
    assert report["metrics"]["requests_ok"] == 40 - len(failed)
    status = cluster.make("status", timeout_s=120)
    assert status.returncode != 0
    line = next(x for x in status.stdout.splitlines() if x.startswith("vllm-1 "))
    assert "RUNNING" not in line and "no answer" in line, status.stdout
