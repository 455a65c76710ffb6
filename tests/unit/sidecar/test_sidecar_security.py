"""The sidecar's front door in-process (FastAPI TestClient, no sockets): the write token, Host and Origin checks, the
body size limit, validation before any write, anchored ids, trace paths, retention and masked answers."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from core.enginestate import EngineState, LogPosition
from core.report_schema import Report
from core.settings import Settings
from sidecar.guard import MAX_BODY_BYTES, host_name, trusted
from sidecar.reports.store import Retention, expired
from sidecar.server import create_app
from tests.fakes import FakeNvml
from tests.unit.sidecar.test_sidecar_app import AUTH, BASE_URL, body, make_service, make_settings

Factory = Callable[..., TestClient]


@pytest.fixture
def app_for(tmp_path: Path) -> Iterator[Factory]:
    """Started apps over ``tmp_path``; their clients send no token unless a test passes one."""
    clients: list[TestClient] = []

    def make(settings: Settings | None = None, **fields: Any) -> TestClient:
        settings = settings or make_settings(tmp_path, **fields)
        client = TestClient(create_app(settings, make_service(settings, FakeNvml())), base_url=BASE_URL)
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


def written(tmp_path: Path) -> list[str]:
    """Report files in reports/ (schema.json, written at start, aside)."""
    folder = tmp_path / "reports"
    return sorted(p.name for p in folder.iterdir() if p.name != "schema.json") if folder.exists() else []


@pytest.mark.parametrize(
    ("method", "path", "payload"),
    [
        ("post", "/reports", "body"),
        ("put", "/baselines/x", None),
        ("delete", "/baselines/x", None),
        ("post", "/windows/start", None),
        ("post", "/windows/0123456789abcdef/stop", None),
        ("get", "/auth", None),
        ("post", "/series", {}),
        ("put", "/series/benchmark_series_20260101_120000/baseline/x", None),
        ("post", "/compare", {"a": "x", "b": "y"}),
    ],
)
def test_writes_need_the_token(app_for: Factory, tmp_path: Path, method: str, path: str, payload: Any) -> None:
    """Every state-changing endpoint is 401 without the token and 403 with a wrong one, and writes nothing."""
    client = app_for()
    kwargs = {"json": body()} if payload == "body" else {"json": payload} if payload is not None else {}
    assert getattr(client, method)(path, **kwargs).status_code == 401
    wrong = {"Authorization": "Bearer not-the-token"}
    assert getattr(client, method)(path, headers=wrong, **kwargs).status_code == 403
    assert written(tmp_path) == []


def test_unauthenticated_baseline_move_changes_nothing(app_for: Factory, tmp_path: Path) -> None:
    """PUT /baselines/x without a body and without the token leaves baselines.json as it was; with it, it marks."""
    client = app_for()
    assert client.post("/reports", json=body(), headers=AUTH).status_code == 200
    assert client.put("/baselines/ci", headers=AUTH).status_code == 200
    before = (tmp_path / "reports" / "baselines.json").read_bytes()
    assert client.post("/reports", json=body(), headers=AUTH).status_code == 200
    assert client.put("/baselines/ci").status_code == 401
    assert (tmp_path / "reports" / "baselines.json").read_bytes() == before
    assert client.get("/baselines").status_code == 200  # reads stay open


def test_without_a_configured_token_every_write_is_refused(app_for: Factory, tmp_path: Path) -> None:
    """No SIDECAR_TOKEN and no token file: writes are 503, never let through."""
    client = app_for(make_settings(tmp_path).model_copy(update={"sidecar_token": None}))
    assert client.post("/reports", json=body(), headers=AUTH).status_code == 503
    assert "SIDECAR_TOKEN" in client.post("/windows/start").json()["detail"]
    assert written(tmp_path) == []


def test_token_file_is_read_when_no_token_is_set(app_for: Factory, tmp_path: Path) -> None:
    """SIDECAR_TOKEN_FILE (a compose secret) holds the token when SIDECAR_TOKEN is unset."""
    secret = tmp_path / "secret"
    secret.write_text("from-a-file\n")
    settings = make_settings(tmp_path).model_copy(update={"sidecar_token": None, "sidecar_token_file": secret})
    client = app_for(settings)
    assert client.get("/auth", headers={"Authorization": "Bearer from-a-file"}).status_code == 204


@pytest.mark.parametrize("host", ["attacker.example", "attacker.example:8200", "127.0.0.1.nip.io", ""])
def test_foreign_host_is_400(app_for: Factory, host: str) -> None:
    """A Host that is not a trusted name (DNS rebinding) is refused, reads included."""
    response = app_for().get("/reports", headers={"Host": host})
    assert response.status_code == 400 and "SIDECAR_TRUSTED_HOSTS" in response.text


def test_trusted_hosts_come_from_the_settings(app_for: Factory) -> None:
    """Loopback names and SIDECAR_TRUSTED_HOSTS are answered (compose: the service name)."""
    client = app_for(sidecar_trusted_hosts=["sidecar", "*.lan"])
    for host in ("localhost:8200", "127.0.0.1", "[::1]:8200", "sidecar:8200", "bench.lan"):
        assert client.get("/health", headers={"Host": host}).status_code == 200, host
    assert client.get("/health", headers={"Host": "lan"}).status_code == 400


def test_cross_origin_browser_requests_are_403(app_for: Factory, tmp_path: Path) -> None:
    """A page of another site (Origin header) is refused even with the token; the sidecar's own origin is not."""
    client = app_for()
    evil = {"Origin": "http://attacker.example", **AUTH}
    assert client.post("/reports", json=body(), headers=evil).status_code == 403
    assert client.get("/reports", headers={"Origin": "null"}).status_code == 403
    assert client.get("/reports", headers={"Origin": "http://localhost:8200"}).status_code == 200
    assert written(tmp_path) == []


def test_body_over_the_limit_is_413(app_for: Factory, tmp_path: Path) -> None:
    """A body over the guard's limit is refused from its Content-Length (413), a chunked one from its headers (411):
    a report's body carries no rows, so it is small."""
    client = app_for()
    payload = body()
    payload["gaps"] = ["x" * 9000] * 130  # 1.1 MiB of gap lines
    big = json.dumps(payload).encode()
    assert len(big) > MAX_BODY_BYTES
    response = client.post("/reports", content=big, headers={"content-type": "application/json", **AUTH})
    assert response.status_code == 413 and "never its rows" in response.text
    chunks = iter([big[i : i + 4096] for i in range(0, len(big), 4096)])  # no Content-Length: chunked
    response = client.post("/reports", content=chunks, headers={"content-type": "application/json", **AUTH})
    assert response.status_code == 411
    assert written(tmp_path) == []


def test_nan_metric_is_422_and_writes_nothing(app_for: Factory, tmp_path: Path) -> None:
    """A NaN in one figure (JSON's NaN token) is a 422 naming the field; no file is written."""
    payload = body()
    payload["metrics"]["ttft"]["p50_ms"] = math.nan
    text = json.dumps(payload)  # Python writes NaN, as the attacker's client did
    response = app_for().post("/reports", content=text, headers={"content-type": "application/json", **AUTH})
    assert response.status_code == 422 and "metrics.ttft.p50_ms" in response.text
    assert written(tmp_path) == []


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda p: p["metrics"].update(throughput_req_per_sec=math.inf), "throughput_req_per_sec"),
        (lambda p: p["metrics"]["e2e"].update(p50_ms=-5.0), "durations cannot be negative"),
        (lambda p: p.update(window_end=p["window_start"] - 10), "must run forward"),
        (lambda p: p.update(window_start=0.0), "before 2000"),
        (lambda p: p.update(window_end=time.time() + 86_400 * 365 * 100), "in the future"),
        (lambda p: p["gaps"].append("x" * 50_000), "characters long"),
        (lambda p: p["metrics"].update(duration_s=-1.0), "metrics.duration_s"),
    ],
)
def test_invalid_runs_are_422_and_write_nothing(
    app_for: Factory, tmp_path: Path, change: Callable[[dict[str, Any]], Any], needle: str
) -> None:
    """Non-finite numbers, negative durations, a backwards, zero-based or far-future window and oversized texts are
    422 naming the problem, before anything is written."""
    payload = body()
    change(payload)
    response = app_for().post(
        "/reports", content=json.dumps(payload), headers={"content-type": "application/json", **AUTH}
    )
    assert response.status_code == 422 and needle in response.text, response.text
    assert written(tmp_path) == []


def test_far_future_report_cannot_become_the_previous_run(app_for: Factory, tmp_path: Path) -> None:
    """The poisoning of the issue: a report ending in the year 2100 is refused, so the next run compares with the
    real previous one."""
    client = app_for()
    assert client.post("/reports", json=body(e2e_ms=100.0), headers=AUTH).status_code == 200
    poison = body(e2e_ms=30.0)
    poison["window_end"] = 4_102_444_800.0
    assert client.post("/reports", json=poison, headers=AUTH).status_code == 422
    second = client.post("/reports", json=body(e2e_ms=110.0), headers=AUTH).json()["report"]
    assert abs(second["comparison"]["vs_previous"]["points"][0]["changes"]["e2e_p99_ms"]["change_pct"]) < 50


@pytest.mark.parametrize("name", ["v1%0A", "v1%0D", "v1%0A%0A", "..", "a%20b"])
def test_names_with_a_trailing_newline_are_rejected(app_for: Factory, tmp_path: Path, name: str) -> None:
    """`v1\\n` (and other non-names) is never stored as a baseline, nor read as a report id."""
    client = app_for()
    client.post("/reports", json=body(), headers=AUTH)
    response = client.put(f"/baselines/{name}", headers=AUTH)
    assert response.status_code in (400, 404), response.text
    assert client.get("/baselines").json() == {}
    assert client.get("/reports/benchmark_report_20260101_120000%0A").status_code == 400


@pytest.mark.parametrize(
    "traces", [["/etc/passwd"], ["{profile}/../../secret.json"], ["{profile}/missing.json.gz"], ["a\x00b"]]
)
def test_bad_profile_traces_are_400_and_write_nothing(
    app_for: Factory, tmp_path: Path, traces: list[str]
) -> None:
    """A trace outside vLLM's profile folder, a missing one or an unusable path is 400, never 500; nothing is
    written."""
    client = app_for()
    profile = (tmp_path / "logs" / "profile").resolve()
    profile.mkdir(parents=True)
    payload = body()
    payload.update(run_id="20260101_120000", profile_traces=[t.format(profile=profile) for t in traces])
    response = client.post("/reports", json=payload, headers=AUTH)
    assert response.status_code == 400, response.text
    assert written(tmp_path) == []


def test_bad_run_id_with_traces_is_400(app_for: Factory, tmp_path: Path) -> None:
    """A run id with a trailing newline is refused (anchored whole-match), before anything is copied."""
    profile = tmp_path / "logs" / "profile"
    profile.mkdir(parents=True)
    (profile / "t.json.gz").write_bytes(b"x")
    payload = body()
    payload.update(run_id="20260101_120000\n", profile_traces=[str(profile / "t.json.gz")])
    assert app_for().post("/reports", json=payload, headers=AUTH).status_code == 400
    assert not (tmp_path / "reports" / "profile").exists()


def test_retention_keeps_the_newest_and_every_baseline(app_for: Factory, tmp_path: Path) -> None:
    """With REPORTS_KEEP=2 the oldest reports go (rows and attachments too), except one marked as a baseline."""
    client = app_for(reports_keep=2)
    ids = []
    for _ in range(4):
        ids.append(client.post("/reports", json=body(), headers=AUTH).json()["report"]["report_id"])
        if len(ids) == 1:
            assert client.put("/baselines/keep-me", json={"report_id": ids[0]}, headers=AUTH).status_code == 200
    listed = [r["report_id"] for r in client.get("/reports").json()]
    assert listed == [ids[0], ids[2], ids[3]]
    assert not any(name.startswith(ids[1] + ".") for name in written(tmp_path)), written(tmp_path)
    assert f"{ids[0]}.requests.jsonl" in written(tmp_path)


def test_retention_by_age_uses_the_time_of_writing(tmp_path: Path) -> None:
    """REPORTS_MAX_AGE_DAYS removes reports written longer ago, never a protected one (pure rule)."""
    now = time.time()
    reports = [
        Report.model_construct(report_id=f"benchmark_report_2026010{i}_120000", timestamp=ts, run_ended_at=now)
        for i, ts in enumerate(["2020-01-01T00:00:00+00:00", "2020-01-02T00:00:00+00:00", "2999-01-01T00:00:00+00:00"])
    ]
    doomed = expired(reports, {reports[1].report_id}, Retention(keep=0, max_age_days=30), now)
    assert [r.report_id for r in doomed] == [reports[0].report_id]
    assert expired(reports, set(), Retention(keep=0), now) == []


def test_startup_answer_masks_secrets_of_any_length(app_for: Factory, tmp_path: Path) -> None:
    """A token in vLLM's error line and a four-character password never come back from GET /startup."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "vllm.log").write_text(
        "[INFO] Starting vLLM: python -m vllm.entrypoints.openai.api_server --api-key=***\n"
        "(APIServer pid=1) ERROR 11-29 21:55:05 [core.py:1] ValueError: bad key sk-live-abcdef123 for user pw42 .\n"
    )
    client = app_for(vllm_api_key="sk-live-abcdef123", ui_password="pw42")
    text = client.get("/startup").text
    assert "sk-live-abcdef123" not in text and "pw42" not in text and "***" in text


def test_short_ui_password_is_masked_in_every_report_file(app_for: Factory, tmp_path: Path) -> None:
    """A four-character UI_PASSWORD echoed in an error is masked in the JSON, rows, Markdown and HTML, and the JSON
    stays a valid report."""
    client = app_for(ui_password="Qz#7")
    response = client.post("/reports", json=body(error="upstream echoed Qz#7 back"), headers=AUTH)
    assert response.status_code == 200
    for name in written(tmp_path):
        assert "Qz#7" not in (tmp_path / "reports" / name).read_text(), name
    report_id = response.json()["report"]["report_id"]
    assert client.get(f"/reports/{report_id}").status_code == 200


def test_host_header_parsing() -> None:
    """Ports and IPv6 brackets are removed; wildcards match subdomains only."""
    assert host_name("LocalHost:8200") == "localhost" and host_name("[::1]:8200") == "::1"
    assert host_name("::1") == "::1"
    assert trusted("a.lan", ["*.lan"]) and not trusted("lan", ["*.lan"]) and not trusted("", ["*"])


def test_state_file_positions_survive_in_the_state(tmp_path: Path) -> None:
    """The engine state carries where a launch began in vllm.log (device, inode, offset)."""
    state = EngineState(requested="m", source="s", model_arg="m", served_name="m",
                        log_start=LogPosition(dev=1, ino=2, offset=3))
    assert EngineState.model_validate_json(state.model_dump_json()).log_start == LogPosition(dev=1, ino=2, offset=3)


def test_negative_client_overhead_is_a_difference_not_a_duration() -> None:
    """What a client added to the server's mean (``added_ms``) may be negative (its ITL a hair under the server's);
    a negative duration next to it is still refused."""
    from core.api import body_problems

    overhead = {"figures": [{"name": "itl", "added_ms": -0.26, "client_mean_ms": 96.3, "server_mean_ms": 96.56}]}
    assert body_problems({"server": {"client_overhead": [overhead]}}) == []
    overhead["figures"][0]["client_mean_ms"] = -1.0
    assert body_problems({"server": {"client_overhead": [overhead]}}) != []
