"""PEER_SIDECARS: how the coordinating sidecar finds its peers (URLs, every address of a headless Service's DNS name)
and how each peer's answer or failure becomes a host entry (over real HTTP handling: httpx's mock transport)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from fastapi.testclient import TestClient

from core.report_schema import GpuStats, HostResources
from loadgen.terminal.summary import format_summary
from sidecar.render.page_sections import report_sections
from sidecar.render.pages import write_markdown
from sidecar.reports.builder import host_gaps
from sidecar.sampling.peers import PeerTarget, Resolver, fetch_peer, peer_resources, peer_targets
from sidecar.server import create_app
from tests.fakes import FakeNvml
from tests.unit.sidecar.test_sidecar_app import AUTH, BASE_URL, GIB, make_service, make_settings
from tests.unit.sidecar.test_sidecar_store import report


def resolver(table: dict[str, list[str]]) -> Resolver:
    """A resolver answering from ``table`` (a missing name: OSError, as getaddrinfo raises)."""

    def resolve(name: str, port: int) -> list[str]:
        if name not in table:
            raise OSError(f"[Errno -2] Name or service not known: {name}")
        return table[name]

    return resolve


def test_urls_and_dns_names_become_targets() -> None:
    """A URL is one peer; ``dns+`` is every address of the name (asked with the name as Host); bad entries fail."""
    spec = "http://gpu2:8200/, dns+http://sidecar-gpu:8200,dns+http://nowhere:8200,ftp://x,,"
    targets, failed = peer_targets(spec, resolver({"sidecar-gpu": ["10.0.0.5", "10.0.0.6", "fd00::7"]}))
    assert targets == [
        PeerTarget("http://gpu2:8200", "http://gpu2:8200"),
        PeerTarget("http://10.0.0.5:8200 (sidecar-gpu)", "http://10.0.0.5:8200", "sidecar-gpu:8200"),
        PeerTarget("http://10.0.0.6:8200 (sidecar-gpu)", "http://10.0.0.6:8200", "sidecar-gpu:8200"),
        PeerTarget("http://[fd00::7]:8200 (sidecar-gpu)", "http://[fd00::7]:8200", "sidecar-gpu:8200"),
    ]
    assert [(f.host, f.unavailable_reason.split(" (")[0]) for f in failed if f.unavailable_reason] == [
        ("nowhere", "DNS: nowhere does not resolve"),
        ("ftp://x", "not an http(s):// or dns+http(s):// URL"),
    ]
    assert peer_targets(None) == ([], [])


def answering(status: int, content: bytes, seen: list[httpx.Request]) -> httpx.Client:
    """A client whose every request is answered ``status`` with ``content`` (and recorded in ``seen``)."""

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, content=content)

    return httpx.Client(transport=httpx.MockTransport(handle))


def test_a_peer_answer_becomes_its_host_entry_with_the_token_sent() -> None:
    """200 with a host's resources: the entry, named by the URL asked; the token goes as Bearer, the window as
    query, the Host header of a DNS target as its name."""
    host = HostResources(host="gpu2", gpu_mem_peak_gb=30.0, gpus=[GpuStats(index=0, mem_used_peak_gb=30.0)])
    seen: list[httpx.Request] = []
    target = PeerTarget("http://10.0.0.5:8200 (sidecar-gpu)", "http://10.0.0.5:8200", "sidecar-gpu:8200")
    found = fetch_peer(answering(200, host.model_dump_json().encode(), seen), target, "tok", 100.0, 160.0)
    assert found == host.model_copy(update={"url": target.url})
    request = seen[0]
    assert request.headers["authorization"] == "Bearer tok" and request.headers["host"] == "sidecar-gpu:8200"
    assert request.url.path == "/resources/window" and dict(request.url.params) == {"start": "100.0", "end": "160.0"}


def test_refusals_and_bad_answers_are_values() -> None:
    """401/403 (token), 500 and an answer that is no host's resources: an entry with the reason, no exception."""
    target = PeerTarget("http://gpu2:8200", "http://gpu2:8200")
    refused = fetch_peer(answering(403, b'{"detail": "bad token"}', []), target, "tok", 0.0, 1.0)
    assert refused.host == "gpu2" and "refused this SIDECAR_TOKEN" in (refused.unavailable_reason or "")
    no_token = fetch_peer(answering(401, b"", []), target, None, 0.0, 1.0)
    assert "no SIDECAR_TOKEN here" in (no_token.unavailable_reason or "")
    assert "HTTP 500" in (fetch_peer(answering(500, b"boom", []), target, "t", 0.0, 1.0).unavailable_reason or "")
    assert "no host's resources" in (
        fetch_peer(answering(200, b"[]", []), target, "t", 0.0, 1.0).unavailable_reason or ""
    )


def test_unreachable_peers_are_entries_not_errors() -> None:
    """A port where nothing listens, asked for real: an entry with the connection error."""
    hosts = peer_resources("http://127.0.0.1:9", "tok", 0.0, 1.0, timeout_s=2.0)
    assert (
        len(hosts) == 1
        and hosts[0].host == "127.0.0.1"
        and "failed (ConnectError" in (hosts[0].unavailable_reason or "")
    )


def test_the_window_endpoint_answers_this_hosts_gpus_with_the_token_only(tmp_path: Path) -> None:
    """``GET /resources/window``: per GPU memory of this host (fake two-GPU NVML), named LOAD_HOST_NAME; 401 without
    the token, 400 for a window that ends before it starts."""
    settings = make_settings(tmp_path, load_host_name="gpu2")
    nvml = FakeNvml(names=["NVIDIA H200", "NVIDIA H200"], used_bytes=[10 * GIB, 20 * GIB])
    now = time.time()
    with TestClient(create_app(settings, make_service(settings, nvml)), base_url=BASE_URL) as client:
        window = {"start": now - 5, "end": time.time() + 1}
        assert client.get("/resources/window", params=window).status_code == 401
        answer = client.get("/resources/window", params=window, headers=AUTH)
        assert client.get("/resources/window", params={"start": 2, "end": 1}, headers=AUTH).status_code == 400
    host = HostResources.model_validate(answer.json())
    assert host.host == "gpu2" and host.url is None and host.unavailable_reason is None
    assert [(g.index, round(g.mem_used_peak_gb or 0, 1)) for g in host.gpus] == [(0, 10.0), (1, 20.0)]
    assert round(host.gpu_mem_peak_gb or 0, 1) == 30.0 and host.gpu_memory_api == "nvml_v2"


def test_hosts_in_the_terminal_markdown_and_gaps() -> None:
    """A report with this host and two peers (one unreached): one [HOSTS] line per host that answered, the missing
    one as a gap line ([WARN]), and the Resources rows of the Markdown name each host's GPUs."""
    gpus = [GpuStats(index=0, name="NVIDIA H200", mem_used_peak_gb=10.0, mem_total_gb=141.0),
            GpuStats(index=1, name="NVIDIA H200", mem_used_peak_gb=20.0, mem_total_gb=141.0)]  # fmt: skip
    hosts = [
        HostResources(host="gpu1", gpu_unavailable_reason="NVML unavailable"),
        HostResources(host="gpu2", url="http://gpu2:8200", gpu_mem_peak_gb=30.0, gpus=gpus),
        HostResources(
            host="gpu3", url="http://gpu3:8200", unavailable_reason="GET /resources/window failed (ConnectError)"
        ),
    ]
    base = report()
    resources = base.resources.model_copy(update={"hosts": hosts})
    final = base.model_copy(update={"resources": resources, "gaps": [*base.gaps, *host_gaps(resources)]})
    lines = format_summary(final, "/tmp/r.json")
    assert [x for x in lines if x.startswith("[HOSTS]")] == [
        "[HOSTS] gpu1: GPU memory peak n/a (no GPU read)",
        "[HOSTS] gpu2: GPU memory peak 30.00 GB (GPU 0 10.00 GB, GPU 1 20.00 GB)",
    ]
    assert (
        "[WARN] GPU memory of host gpu3 (http://gpu3:8200) missing: GET /resources/window failed (ConnectError)"
        in lines
    )
    md = write_markdown(report_sections(final, []))
    assert "Host gpu2 GPU 1 NVIDIA H200" in md and "not reported: GET /resources/window failed" in md
