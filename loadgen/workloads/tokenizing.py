"""The tokenizer that sizes token-exact prompts (DATASET=random, PREFIX_LEN, TRACE): the server's ``/tokenize`` and
``/detokenize`` (vLLM's), else a local folder's (:mod:`loadgen.workloads.localtokenizer`: TOKENIZER, or the folder
the stack's engine serves); without either the run is refused before any load, saying what to set.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import httpx
from pydantic import BaseModel, TypeAdapter

from core.enginestate import read_engine_state
from core.settings import Settings
from core.shapes import ShapeError, answer_as, snippet
from loadgen.errors import BenchError
from loadgen.workloads.localtokenizer import LocalTokenizer, LocalTokenizerError

SYNTHETIC_PREFIX = "synthetic:"


class PromptTokenizer(Protocol):
    """What prompt sizing asks a tokenizer (the server's or a local one)."""

    source: str
    """Which tokenizer this is, for the run's output."""

    def ids(self, text: str) -> list[int]:
        """Token ids of plain ``text`` (no special tokens)."""

    def chat_count(self, text: str) -> int:
        """Tokens of a one-message chat with ``text`` as the server's chat endpoint builds it."""

    def text(self, ids: list[int]) -> str:
        """``ids`` decoded."""

    def close(self) -> None:
        """Release connections."""


class TokenizeUnusable(BenchError):
    """The server answered ``/tokenize`` or ``/detokenize``, but not usably; the message names the URL and answer."""


class _Tokenized(BaseModel):
    tokens: list[int]
    count: int | None = None


class _Detokenized(BaseModel):
    prompt: str


TOKENIZED = TypeAdapter(_Tokenized)
DETOKENIZED = TypeAdapter(_Detokenized)


class ServerTokenizer:
    """The server's ``/tokenize`` and ``/detokenize`` (vLLM's shapes), for ``model``; ``headers`` carry the API key.

    Raises (from each call):
        TokenizeUnusable: the server answered, but not as vLLM does. BenchError: it did not answer at all.
    """

    def __init__(self, base_url: str, model: str, timeout_s: float = 30.0,
                 headers: dict[str, str] | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.client = httpx.Client(timeout=timeout_s, headers=headers)
        self.source = f"the server's /tokenize at {self.base_url}"

    def _post(self, path: str, body: dict[str, Any], shape: TypeAdapter[Any], expected: str) -> Any:
        url = f"{self.base_url}{path}"
        try:
            response = self.client.post(url, json={"model": self.model, **body})
        except httpx.HTTPError as exc:
            raise BenchError(f"POST {url} failed ({type(exc).__name__}: {exc})") from None
        if response.status_code != 200:
            raise TokenizeUnusable(f"POST {url} answered HTTP {response.status_code}: {snippet(response.content)!r}")
        try:
            return answer_as(response, shape, expected)
        except ShapeError as exc:
            raise TokenizeUnusable(str(exc)) from None

    def ids(self, text: str) -> list[int]:
        """Token ids of plain ``text`` (no special tokens)."""
        body = {"prompt": text, "add_special_tokens": False}
        return list(self._post("/tokenize", body, TOKENIZED, "vLLM's {\"tokens\": [ids]}").tokens)

    def chat_count(self, text: str) -> int:
        """Tokens of a one-message chat with ``text`` as the server's chat endpoint would build it."""
        body = {"messages": [{"role": "user", "content": text}], "add_generation_prompt": True}
        found: _Tokenized = self._post("/tokenize", body, TOKENIZED, "vLLM's {\"tokens\": [ids], \"count\": n}")
        return found.count if found.count is not None else len(found.tokens)

    def text(self, ids: list[int]) -> str:
        """``ids`` decoded by the server."""
        return str(self._post("/detokenize", {"tokens": ids}, DETOKENIZED, "vLLM's {\"prompt\": text}").prompt)

    def close(self) -> None:
        """Close the connection pool."""
        self.client.close()


def tokenizer_folder(spec: str, models_dir: Path) -> Path | None:
    """The local folder of a model spec: a folder path, ``synthetic:NAME`` (under ``models_dir``), or a Hugging Face
    id whose ``tokenizer.json`` is in the local cache (no network); None when none is here."""
    if spec.startswith(SYNTHETIC_PREFIX):
        return models_dir / spec[len(SYNTHETIC_PREFIX):]
    local = Path(spec).expanduser()
    if local.is_dir():
        return local
    if spec.count("/") != 1 or spec.startswith(("/", ".", "~")):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(spec, "tokenizer.json")
    except Exception:  # a malformed id or cache is "not here", as for a missing one
        return None
    return Path(found).parent if isinstance(found, str) else None


def local_candidates(settings: Settings, model: str) -> list[tuple[str, str]]:
    """``(spec, origin)`` of each place a local tokenizer for served ``model`` may be: TOKENIZER, then the stack's
    engine's model served under that name (``logs/engine_state.json``)."""
    found: list[tuple[str, str]] = []
    if settings.tokenizer:
        found.append((settings.tokenizer, "TOKENIZER"))
    state = read_engine_state(settings.engine_state_file)
    if state is not None and model in (state.served_name, state.model_arg, state.requested):
        found.append((state.model_arg, f"the served model's folder, from {settings.engine_state_file}"))
    return found


def probe(tok: PromptTokenizer) -> None:
    """One call of each kind, so an unusable tokenizer shows before any prompt is built.

    Raises:
        TokenizeUnusable, LocalTokenizerError, BenchError: as the calls raise them.
    """
    tok.text(tok.ids("Hello, world."))
    tok.chat_count("Hello")


def open_prompt_tokenizer(settings: Settings, model: str, knob: str,
                          say: Callable[[str], None] = print) -> PromptTokenizer:
    """The tokenizer that sizes ``knob``'s prompts for served ``model``: the server's, else the first usable one of
    :func:`local_candidates`; ``say`` gets one line naming which.

    Raises:
        BenchError: the server does not answer, or neither it nor a local tokenizer is usable (the message names the
            server's answer, each folder tried and the knob to set).
    """
    server = ServerTokenizer(settings.vllm_url, model, headers=settings.vllm_headers)
    try:
        probe(server)
    except TokenizeUnusable as exc:
        server.close()
        why_not_server = str(exc)
    except BaseException:
        server.close()
        raise
    else:
        say(f"[INFO] {knob}: prompts sized with {server.source}")
        return server
    tried: list[str] = []
    for spec, origin in local_candidates(settings, model):
        folder = tokenizer_folder(spec, settings.models_dir)
        if folder is None:
            tried.append(f"{spec} ({origin}): no such folder here, nor a Hugging Face id in the local cache")
            continue
        try:
            local = LocalTokenizer(folder, origin)
            probe(local)
        except LocalTokenizerError as exc:
            tried.append(f"{spec} ({origin}): {exc}")
            continue
        say(f"[WARN] {knob}: the server has no usable /tokenize ({why_not_server}); prompts sized with {local.source}"
            " — counts match the server's only if it serves that tokenizer")
        return local
    tried_line = f" Tried: {'; '.join(tried)}." if tried else ""
    raise BenchError(f"{knob} sizes prompts in tokens with the server's tokenizer, and the server has no usable "
                     f"/tokenize ({why_not_server}).{tried_line} Set TOKENIZER (--tokenizer) to a local folder holding "
                     "the served model's tokenizer.json and chat template (a copy of the model, e.g. "
                     "/data/qwen2-0.5b-instruct) to size them here.")
