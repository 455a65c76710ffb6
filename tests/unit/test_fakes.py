"""The fakes match the real interfaces they stand in for."""

from __future__ import annotations

import inspect
import re

import pynvml
import requests

from tests.fakes import FakeNvml, ScriptedAdapter


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
    import services.sidecar.gpu as gpu

    called = set(re.findall(r"\bnvml[A-Z]\w+", inspect.getsource(gpu)))
    assert called, "the reader calls NVML"
    assert called <= {name for name in dir(FakeNvml) if name.startswith("nvml")}


def test_scripted_raw_has_the_urllib3_methods_the_client_uses() -> None:
    """The scripted response body offers the urllib3 HTTPResponse methods the client calls."""
    import urllib3

    from tests.fakes import ScriptedRaw

    for name in ("stream", "read", "close", "release_conn"):
        assert callable(getattr(urllib3.HTTPResponse, name)) and callable(getattr(ScriptedRaw, name)), name


def test_scripted_adapter_is_a_requests_adapter() -> None:
    """The scripted transport plugs into a real requests.Session."""
    assert issubclass(ScriptedAdapter, requests.adapters.BaseAdapter)
