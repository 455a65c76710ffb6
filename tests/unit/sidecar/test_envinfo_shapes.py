"""The report's server facts (vLLM's /version, /v1/models, a completion's system_fingerprint) read from a real HTTP
peer of another shape: each fact the peer does not give is left out; nothing raises."""

from __future__ import annotations

import pytest

from sidecar.reports.envinfo import vllm_server_facts
from tests.fakes import Answer, answering_server

JSON = "application/json"
GOOD = {
    "/version": (200, JSON, b'{"version": "0.32.0"}'),
    "/v1/models": (200, JSON, b'{"data": [{"id": "m", "root": "/models/m", "max_model_len": 4096}]}'),
    "/v1/completions": (200, JSON, b'{"system_fingerprint": "fp1", "choices": []}'),
}


def test_the_usual_answers_give_every_fact() -> None:
    """vLLM's own answers: version, model id, root, context and the fingerprint."""
    with answering_server(dict(GOOD)) as url:
        facts = vllm_server_facts(url)
    assert facts == {"version": "0.32.0", "model_id": "m", "model_root": "/models/m", "max_model_len": 4096,
                     "system_fingerprint": "fp1"}


@pytest.mark.parametrize(("path", "answer", "left_out"), [
    ("/v1/models", (200, JSON, b'{"data": {"0": {"id": "m"}}}'), {"model_id", "model_root", "max_model_len",
                                                                   "system_fingerprint"}),
    ("/v1/models", (200, "text/html", b"<html>login</html>"), {"model_id", "model_root", "max_model_len",
                                                                "system_fingerprint"}),
    ("/version", (200, JSON, b'["0.32.0"]'), {"version"}),
    ("/version", (200, "text/html", b"<html>"), {"version"}),
    ("/v1/completions", (200, JSON, b"[]"), {"system_fingerprint"}),
    ("/v1/completions", (200, JSON, b'{"system_fingerprint": 7}'), {"system_fingerprint"}),
])  # fmt: skip
def test_an_answer_of_another_shape_leaves_out_its_facts_only(path: str, answer: Answer, left_out: set[str]) -> None:
    """A dict where /v1/models has a list (before: KeyError out of the report), a page, a list for /version or a
    completion: those facts are missing, the others still read."""
    with answering_server({**GOOD, path: answer}) as url:
        facts = vllm_server_facts(url)
    given = {name for name, value in facts.items() if value is not None}
    assert given == {"version", "model_id", "model_root", "max_model_len", "system_fingerprint"} - left_out
