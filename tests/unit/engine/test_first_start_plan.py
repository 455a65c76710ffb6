"""The first start plans what every later one does: with an empty HF cache the launcher fetches the model's
``config.json`` from the hub (here a local server answering at the hub's real HTTP interface: ``/api/models/<repo>``
and ``/<repo>/resolve/<revision>/<file>`` with the commit and ETag headers huggingface_hub reads) before the KV plan,
so it plans 4,096 tokens instead of leaving ``--max-model-len auto`` to vLLM."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from tests.unit.engine.test_gpu_plan import ERNIE_FULL

REPO = "baidu-fixture/ERNIE-4.5-0.3B-PT"
EMPTY_REPO = "baidu-fixture/no-config"  # the model API knows it, the resolver has no config.json
COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub(BaseHTTPRequestHandler):
    """The hub's model API and file resolver for one repository holding ``config.json``."""

    files: ClassVar[dict[str, bytes]] = {"config.json": json.dumps(ERNIE_FULL).encode()}
    seen: ClassVar[list[str]] = []

    def _answer(self, body: bool) -> None:
        self.seen.append(f"{self.command} {self.path}")
        path = self.path.split("?")[0]
        if path in (f"/api/models/{REPO}", f"/api/models/{EMPTY_REPO}"):
            data = json.dumps({"id": REPO, "sha": COMMIT}).encode()
            headers = {"Content-Type": "application/json"}
        elif path.startswith(f"/{REPO}/resolve/") and path.rsplit("/", 1)[-1] in self.files:
            data = self.files[path.rsplit("/", 1)[-1]]
            headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{hashlib.sha1(data).hexdigest()}"'}
        else:
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        for key, value in {**headers, "Content-Length": str(len(data))}.items():
            self.send_header(key, value)
        self.end_headers()
        if body:
            self.wfile.write(data)

    def do_GET(self) -> None:
        self._answer(True)

    def do_HEAD(self) -> None:
        self._answer(False)

    def log_message(self, *_args: object) -> None:
        return


@pytest.fixture
def hub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    FakeHub.seen.clear()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _prepare(tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("HF_", "VLLM_", "KV_CACHE"))},
        "MODEL": REPO,
        "HF_HOME": str(tmp_path / "hf"),
        "LOGS_DIR": str(tmp_path / "logs"),
        **extra,
    }
    cmd = [sys.executable, "-m", "engine.launcher", "--prepare-only"]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)


def test_first_start_with_an_empty_cache_plans_4096_tokens(tmp_path: Path, hub: str) -> None:
    first = _prepare(tmp_path, HF_ENDPOINT=hub)
    assert first.returncode == 0, first.stderr
    line = "[INFO] KV cache 1 GiB = 58,240 tokens (18,432 B/token); max model len 4,096"
    assert line in first.stdout, first.stdout + first.stderr
    assert any("/resolve/" in seen and "config.json" in seen for seen in FakeHub.seen)
    cached = list((tmp_path / "hf").rglob("config.json"))
    assert cached and json.loads(cached[0].read_text()) == ERNIE_FULL  # in the cache vLLM reads
    later = _prepare(tmp_path, HF_ENDPOINT=hub, HF_HUB_OFFLINE="1")
    assert later.returncode == 0, later.stderr
    assert line in later.stdout  # the same plan from the cache


def test_a_config_the_hub_cannot_give_is_said_and_left_to_vllm(tmp_path: Path, hub: str) -> None:
    done = _prepare(tmp_path, HF_ENDPOINT=hub, MODEL=EMPTY_REPO)
    assert done.returncode == 0, done.stderr
    assert f"[WARNING] config.json of {EMPTY_REPO} not known before launch" in done.stderr
    assert "context length fitted by vLLM" in done.stdout
