"""The load generator's reads of other processes' answers — the server's /v1/models, the sidecar's baselines and
results, vLLM's /metrics while replicas are watched — against a real HTTP peer answering with the wrong shape: a
clear error naming the URL and what came back, or a fallback; never a traceback."""

from __future__ import annotations

import time
from typing import Any

import pytest

from core.api import BuildReportResponse, CompareRequest, CompareResponse
from core.settings import Settings
from loadgen.errors import BenchError
from loadgen.orchestrate.preflight import preflight
from loadgen.orchestrate.replica_watch import kv_usage_percent
from loadgen.sidecar_client import SidecarClient
from tests.fakes import Answer, answering_server
from tests.unit.loadgen.test_tokenizing import _Sidecar
from tests.unit.sidecar.test_sidecar_gate import _service_body

HTML = (200, "text/html", b"<!DOCTYPE html><html><body>Welcome to nginx!</body></html>")
JSON_LIST = (200, "application/json", b'[{"id": "m"}]')
HEALTH = (200, "application/json", b"{}")


def settings_for(url: str, **fields: Any) -> Settings:
    return Settings(_env_file=None, vllm_base_url=url, **fields)  # type: ignore[call-arg]


@pytest.mark.parametrize(("models", "said"), [
    (HTML, "not JSON (it starts '<!DOCTYPE html><html><body>Welcome to nginx!"),
    (JSON_LIST, "Input should be an object (got [{'id': 'm'}])"),
    ((200, "application/json", b'{"data": [{"name": "m"}]}'), "data[0].id: Field required"),
    ((200, "application/json", b""), "an empty body"),
    ((404, "text/plain", b"no such route"), "answered HTTP 404: 'no such route'"),
])  # fmt: skip
def test_a_model_list_of_another_shape_stops_the_run_naming_url_and_fault(models: Answer, said: str) -> None:
    """/v1/models answered with an HTML page, a list, entries without ids, nothing, or 404: a BenchError at once
    naming the URL, what came back and VLLM_BASE_URL — not three retries ending in "the server is not answering"."""
    with answering_server({"/health": HEALTH, "/v1/models": models}) as url:
        began = time.monotonic()
        with pytest.raises(BenchError) as caught:
            preflight(settings_for(url), _Sidecar())  # type: ignore[arg-type]
    message = str(caught.value)
    assert f"{url}/v1/models" in message and said in message and "VLLM_BASE_URL" in message, message
    assert "not answering" not in message and time.monotonic() - began < 5.0  # no 1+2+3 s of retries


def test_a_good_model_list_is_read_with_its_context() -> None:
    """The usual answer still gives the model and its max_model_len."""
    body = b'{"object": "list", "data": [{"id": "m", "max_model_len": 2048, "owned_by": "vllm"}]}'
    with answering_server({"/health": HEALTH, "/v1/models": (200, "application/json", body)}) as url:
        target = preflight(settings_for(url), _Sidecar())  # type: ignore[arg-type]
    assert (target.model, target.served, target.max_model_len) == ("m", ["m"], 2048)


@pytest.mark.parametrize(("answer", "said"), [
    (JSON_LIST, "Input should be an object"),
    ((200, "application/json", b'{"main": 3}'), "main: Input should be a valid string"),
    (HTML, "not JSON"),
])  # fmt: skip
def test_the_sidecars_baselines_of_another_shape_are_a_clear_error(answer: Answer, said: str) -> None:
    """GET /baselines answered with a list, a name whose id is no string, or a page: a BenchError naming the URL and
    the fault (before: a list read as "no baselines", a page as "the sidecar is not answering")."""
    with answering_server({"/baselines": answer}) as url, pytest.raises(BenchError) as caught:
        SidecarClient(url).baselines()
    assert f"GET {url}/baselines (HTTP 200)" in str(caught.value) and said in str(caught.value), str(caught.value)
    assert "not answering" not in str(caught.value)


def test_a_sidecar_result_of_another_shape_is_a_bench_error_not_a_validation_traceback() -> None:
    """POST /compare and POST /reports answered 200 with something else: BenchError naming the URL (the benchmark
    prints it as one [ERROR] line) instead of pydantic's ValidationError escaping."""
    with answering_server({"/compare": JSON_LIST, "/reports": (200, "application/json", b"{}")}) as url:
        client = SidecarClient(url)
        with pytest.raises(BenchError, match=rf"POST {url}/compare \(HTTP 200\): not the sidecar's CompareResponse"):
            client.post("/compare", CompareRequest(a="x", b="y"), CompareResponse)
        with pytest.raises(BenchError, match=rf"POST {url}/reports \(HTTP 200\): not the sidecar's Build"):
            client.post("/reports", _service_body(e2e_ms=100.0, gap_s=0.05), BuildReportResponse)


def test_kv_usage_of_a_page_or_a_cut_exposition_is_unknown_and_timestamps_are_not_values() -> None:
    """The replica watch's poll reads vLLM's KV usage as the mean over engines; a sample with a timestamp is its
    value, and a garbled value or an HTML page is None (the poll thread goes on) instead of a ValueError."""
    text = 'vllm:kv_cache_usage_perc{engine="0"} 0.25 1700000000000\nvllm:kv_cache_usage_perc{engine="1"} 0.75\n'
    assert kv_usage_percent(text) == 50.0
    assert kv_usage_percent('vllm:kv_cache_usage_perc{engine="0"} abc\n') is None
    assert kv_usage_percent("<html>vllm:kv_cache_usage_perc</html>") is None and kv_usage_percent("") is None
