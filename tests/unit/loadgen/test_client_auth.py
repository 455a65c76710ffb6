"""Clients with keys and logins, without sockets: Locust's real web UI behind its login (Flask test client, in a
child process), the mock server refusing requests without the key as vLLM does, the benchmark's sidecar client, and
the UI's clients."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import httpx2

from core.settings import Settings
from loadgen.locust_side.llm_webui import credentials_match
from loadgen.orchestrate.locust_launch import locust_argv
from loadgen.selftest.mock_answers import MockConfig
from loadgen.sidecar_client import SidecarClient
from tests.unit.loadgen.mock_in_loop import mock_client
from ui.chat_errors import map_exception
from ui.status import Probe, classify
from ui.turn import ChatBackend


def settings(**fields: Any) -> Settings:
    return Settings(_env_file=None, **fields)  # type: ignore[call-arg]


# In a child process: importing locust monkey-patches the interpreter (gevent), which must not leak into pytest.
LOCUST_LOGIN_CHECK = """
import json
from locust import User, task
from locust.env import Environment
from loadgen.locust_side.llm_webui import install_login

class Idle(User):
    @task
    def idle(self):
        pass

env = Environment(user_classes=[Idle])
env.create_local_runner()
web_ui = env.create_web_ui(web_login=True, delayed_start=True)
install_login(web_ui, "admin", "lp-secret")
client = web_ui.app.test_client()
codes = [client.get("/").status_code, client.get("/stats/requests").status_code]
client.post("/login_submit", data={"username": "admin", "password": "nope"})
codes.append(client.get("/stats/requests").status_code)
client.post("/login_submit", data={"username": "admin", "password": "lp-secret"})
codes += [client.get("/stats/requests").status_code, client.get("/").status_code]
cookie = client.get_cookie("session")
print(json.dumps({"codes": codes, "samesite": cookie.same_site if cookie else None}))
"""


def test_locust_web_ui_requires_the_password() -> None:
    """Locust's own web UI with the login: every page and its API redirect to the login; a wrong password gets
    nothing, the right one the UI; the session cookie is SameSite=Strict."""
    run = subprocess.run([sys.executable, "-c", LOCUST_LOGIN_CHECK], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["codes"] == [302, 302, 302, 200, 200] and result["samesite"] == "Strict"


def test_credentials_are_compared_whole() -> None:
    """Both the user and the password must match exactly."""
    assert credentials_match("admin", "pw", "admin", "pw")
    assert not credentials_match("admin", "pw ", "admin", "pw") and not credentials_match("root", "pw", "admin", "pw")


def test_web_login_flag_only_with_a_password() -> None:
    """loadgen.orchestrate.locust_launch adds --web-login when LOCUST_WEB_PASSWORD is set (the password stays in the environment)."""
    with_password = locust_argv(settings(locust_web_password="lp-secret"), headless=False)
    assert "--web-login" in with_password and "lp-secret" not in " ".join(with_password)
    assert "--web-login" not in locust_argv(settings(), headless=False)
    assert "--web-login" not in locust_argv(settings(locust_web_password="x"), headless=True)


def test_mock_server_refuses_v1_without_the_key() -> None:
    """With a key the mock answers /v1 only to ``Authorization: Bearer <key>``, as vLLM does; /health stays open
    (the real server on a loopback port, in this test's event loop)."""
    async def check() -> list[int]:
        async with mock_client(MockConfig(api_key="k-123")) as client:
            codes = [(await client.get("/v1/models")).status_code]
            codes.append((await client.get("/v1/models", headers={"Authorization": "Bearer k-12"})).status_code)
            codes.append((await client.get("/v1/models", headers={"Authorization": "Bearer k-123"})).status_code)
            codes.append((await client.get("/health")).status_code)
            return codes

    assert asyncio.run(check()) == [401, 401, 200, 200]


def test_sidecar_client_sends_the_token_with_writes() -> None:
    """The benchmark's sidecar client carries SIDECAR_TOKEN as a bearer token."""
    assert SidecarClient.of(settings(sidecar_token="tok")).write_headers == {"Authorization": "Bearer tok"}


def test_ui_clients_send_the_key() -> None:
    """The UI's OpenAI client uses VLLM_API_KEY and its probes send it as a bearer token ("EMPTY" without one)."""
    backend = ChatBackend(settings(vllm_api_key="k-ui"))
    try:
        assert backend.openai.api_key == "k-ui"
        assert backend.http.headers["authorization"] == "Bearer k-ui"
    finally:
        asyncio.run(backend.aclose())
    assert ChatBackend(settings()).openai.api_key == "EMPTY"


def test_ui_says_when_vllm_refuses_the_key() -> None:
    """A 401 on /v1/models is Down with what to set, not an endless Loading; a 401 answer to a chat says the same."""
    probe = Probe(health_code=200, connect_error=None, models=None, version="0.32.0", models_code=401)
    status = classify(probe, "http://v", None, engine_alive=True)
    assert status.state == "Down" and "VLLM_API_KEY" in status.detail
    import openai

    response = httpx2.Response(401, request=httpx2.Request("POST", "http://v/v1/chat/completions"))
    error = map_exception(openai.AuthenticationError("Unauthorized", response=response, body=None), model="m",
                          url="http://v", status=status, partial=False, timeout_s=5)  # fmt: skip
    assert "VLLM_API_KEY" in error.message
