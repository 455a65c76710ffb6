"""The fakes match the real interfaces they stand in for."""

from __future__ import annotations

import inspect
import re

import gevent
import gevent.event
import httpx
import pynvml

from tests.fakes import FakeNvml, ScriptedResponse, answering_server


def test_fake_nvml_names_exist_in_real_pynvml() -> None:
    """Every NVML function the fake provides exists in the real pynvml module with a compatible arity."""
    for name, member in inspect.getmembers(FakeNvml, inspect.isfunction):
        if not name.startswith("nvml"):
            continue
        real = getattr(pynvml, name)
        fake_params = len(inspect.signature(member).parameters) - 1  # minus self
        real_params = [p for p in inspect.signature(real).parameters.values() if p.default is inspect.Parameter.empty]
        assert fake_params >= len(real_params), name


def test_fake_nvml_covers_what_the_reader_calls() -> None:
    """The reader's NVML calls are all provided by the fake (so fake-based tests exercise the real code path)."""
    import sidecar.sampling.gpu as gpu

    called = set(re.findall(r"\bnvml[A-Z]\w+", inspect.getsource(gpu)))
    assert called, "the reader calls NVML"
    assert called <= {name for name in dir(FakeNvml) if name.startswith("nvml")}


def _signature(cls: type, name: str) -> list[str]:
    return [p for p in inspect.signature(getattr(cls, name)).parameters if p != "self"]


def test_scripted_transport_has_the_real_transports_interface() -> None:
    """The scripted transport and response offer the methods (and parameters) of the Transport and Response
    protocols, as the real HttpSession and HttpResponse do."""
    from loadgen.request.transport import HttpResponse, HttpSession, Response, Transport
    from tests.fakes import ScriptedResponse, ScriptedTransport

    for protocol, real, fake in ((Transport, HttpSession, ScriptedTransport), (Response, HttpResponse, ScriptedResponse)):
        methods = [n for n, m in inspect.getmembers(protocol, inspect.isfunction) if not n.startswith("_")]
        assert methods, protocol
        for name in methods:
            assert _signature(real, name) == _signature(protocol, name) == _signature(fake, name), (protocol, name)
    assert "status" in Response.__annotations__


def test_scripted_body_holds_blocks_behind_a_gate_until_it_opens() -> None:
    """The blocks after a gate in a scripted body arrive only once the gate is set."""
    gate = gevent.event.Event()
    got: list[bytes] = []
    reader = gevent.spawn(lambda: got.extend(ScriptedResponse(200, [b"a", gate, b"b"]).blocks()))
    gevent.sleep(0.01)
    assert not reader.ready()
    gate.set()
    reader.join(timeout=5)
    assert got == [b"a", b"b"]


def test_answering_server_answers_its_routes_and_404_elsewhere() -> None:
    """The fake peer answers GET and POST of a route with its fixed status, type and body; other paths with 404."""
    with answering_server({"/v1/models": (200, "text/html", b"<html>hi</html>")}) as url:
        got = httpx.get(f"{url}/v1/models?x=1")
        posted = httpx.post(f"{url}/v1/models", json={"a": 1})
        missing = httpx.get(f"{url}/tokenize")
    assert (got.status_code, got.headers["content-type"], got.content) == (200, "text/html", b"<html>hi</html>")
    assert posted.content == b"<html>hi</html>" and missing.status_code == 404
