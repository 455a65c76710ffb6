"""The stack with every secret set (see the conftest): vLLM refuses requests without its key, the sidecar refuses
unauthenticated writes and foreign hosts, Locust's web UI asks for a login, a benchmark with the server cross-check
works, and none of the secret values is written to logs/, reports/ or run/, or answered by the sidecar.

Runs after the UI and benchmark tests (``stack_order(3)``), so the folders it searches hold what they wrote too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import SECRETS, Stack

pytestmark = [pytest.mark.integration, pytest.mark.stack_order(3)]
SHORT = 6  # the redactor's rule: shorter secrets are masked (and searched) as whole words only


def leaks(text: str) -> list[str]:
    """Names of the secrets found in ``text``."""
    found = []
    for name, value in SECRETS.items():
        pattern = re.escape(value) if len(value) >= SHORT else rf"(?<!\w){re.escape(value)}(?!\w)"
        if re.search(pattern, text):
            found.append(name)
    return found


def files_under(*folders: Path) -> list[Path]:
    return [p for folder in folders if folder.exists() for p in folder.rglob("*") if p.is_file()]


def test_vllm_refuses_requests_without_its_key(stack: Stack) -> None:
    """vLLM answers /v1 only with a key: none is 401; VLLM_API_KEY and the --api-key of VLLM_EXTRA_ARGS both work."""
    url = f"{stack.vllm_url}/v1/models"
    assert httpx.get(url, timeout=10).status_code == 401
    assert httpx.get(url, timeout=10, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(url, timeout=10, headers=stack.vllm_headers).status_code == 200
    extra = {"Authorization": f"Bearer {SECRETS['EXTRA_API_KEY']}"}
    assert httpx.get(url, timeout=10, headers=extra).status_code == 200


def test_sidecar_refuses_unauthenticated_writes_and_foreign_hosts(stack: Stack) -> None:
    """POST /reports and PUT /baselines without the token are 401 and change nothing; a foreign Host is 400."""
    before = sorted(p.name for p in stack.reports_dir.iterdir())
    baselines = httpx.get(f"{stack.sidecar_url}/baselines", timeout=10).json()
    assert httpx.post(f"{stack.sidecar_url}/reports", json={}, timeout=10).status_code == 401
    assert httpx.put(f"{stack.sidecar_url}/baselines/evil", json={}, timeout=10).status_code == 401
    wrong = {"Authorization": "Bearer wrong"}
    assert httpx.put(f"{stack.sidecar_url}/baselines/evil", json={}, timeout=10, headers=wrong).status_code == 403
    assert httpx.get(f"{stack.sidecar_url}/auth", timeout=10, headers=stack.sidecar_headers).status_code == 204
    rebound = httpx.get(f"{stack.sidecar_url}/reports", timeout=10, headers={"Host": "attacker.example"})
    assert rebound.status_code == 400
    assert sorted(p.name for p in stack.reports_dir.iterdir()) == before
    assert httpx.get(f"{stack.sidecar_url}/baselines", timeout=10).json() == baselines


def test_locust_web_ui_needs_its_login(stack: Stack) -> None:
    """With LOCUST_WEB_PASSWORD Locust's pages redirect to its login; a wrong password gets nothing, the right one
    the web UI."""
    with httpx.Client(base_url=stack.locust_url, timeout=10) as client:
        first = client.get("/")
        assert first.status_code == 302 and "/login" in first.headers["location"]
        assert client.get("/stats/requests").status_code == 302  # the API too, not only the page
        client.post("/login_submit", data={"username": "admin", "password": "wrong"})
        assert client.get("/").status_code == 302
        client.post("/login_submit", data={"username": "admin", "password": SECRETS["LOCUST_WEB_PASSWORD"]})
        assert client.get("/").status_code == 200
        assert client.get("/stats/requests").status_code == 200


def test_benchmark_with_keys_writes_no_secret_anywhere(stack: Stack) -> None:
    """A benchmark against the keyed vLLM works with its server cross-check; no secret value is in logs/, reports/,
    run/ or any sidecar answer."""
    run = stack.make("benchmark", REQUESTS="6", CONCURRENCY="2", WARMUP="1", MAX_TOKENS="8", timeout_s=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert not leaks(run.stdout + run.stderr)
    line = next(x for x in run.stdout.splitlines() if x.startswith("[REPORT] Baseline saved to "))
    report = json.loads(Path(line.removeprefix("[REPORT] Baseline saved to ").strip()).read_text(encoding="utf-8"))
    assert report["server"] is not None and report["server"]["requests_succeeded"] >= 6  # the cross-check ran
    assert report["environment"]["vllm_version"]  # /version, /v1/models with the key
    state = json.loads(stack.engine_state_file.read_text())
    assert "***" in state["argv"]  # the second key went on vLLM's command line, masked here
    found = {}
    for path in files_under(stack.logs_dir, stack.reports_dir, stack.run_dir):
        names = leaks(path.read_bytes().decode("utf-8", "replace"))
        if names:
            found[str(path)] = names
    assert not found, found
    sidecar = stack.sidecar_url
    answers = [httpx.get(f"{sidecar}{path}", timeout=30).text for path in (
        "/health", "/startup", "/resources", "/metrics", "/reports", "/baselines", "/openapi.json",
        f"/reports/{report['report_id']}",
    )]  # fmt: skip
    assert not leaks("\n".join(answers))
