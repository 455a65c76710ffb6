"""The tokenizer that sizes token-exact prompts (DATASET=random, PREFIX_LEN, TRACE): the server's ``/tokenize`` and
``/detokenize`` (vLLM's), else a local folder's (:class:`LocalTokenizer`: TOKENIZER, or the folder the stack's engine
serves); without either the run is refused before any load, saying what to set.

A local folder's tokenizer: ``tokenizer.json`` by the ``tokenizers`` library, the chat template rendered with Jinja as
``transformers`` does (sandboxed, ``trim_blocks``/``lstrip_blocks``, ``tojson``, ``raise_exception``, ``strftime_now``,
the special tokens as variables) and tokenized without added special tokens, as vLLM's ``/tokenize`` with
``messages``. Counts match the server's only for the tokenizer it serves; the run's output names the folder.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import httpx
from pydantic import BaseModel, TypeAdapter

from core.enginestate import read_engine_state
from core.settings import Settings
from core.shapes import ShapeError, answer_as, snippet
from loadgen.errors import BenchError

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
        body = {"prompt": text, "add_special_tokens": False}
        return list(self._post("/tokenize", body, TOKENIZED, "vLLM's {\"tokens\": [ids]}").tokens)

    def chat_count(self, text: str) -> int:
        body = {"messages": [{"role": "user", "content": text}], "add_generation_prompt": True}
        found: _Tokenized = self._post("/tokenize", body, TOKENIZED, "vLLM's {\"tokens\": [ids], \"count\": n}")
        return found.count if found.count is not None else len(found.tokens)

    def text(self, ids: list[int]) -> str:
        return str(self._post("/detokenize", {"tokens": ids}, DETOKENIZED, "vLLM's {\"prompt\": text}").prompt)

    def close(self) -> None:
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


SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


class LocalTokenizerError(BenchError):
    """A folder's tokenizer cannot be used; the message says which and why."""


def _token_text(value: Any) -> str | None:
    """A special token of ``tokenizer_config.json`` as text: a string, or an AddedToken object's ``content``."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def read_tokenizer_config(folder: Path) -> dict[str, Any]:
    """``tokenizer_config.json`` of ``folder`` ({} when absent).

    Raises:
        LocalTokenizerError: the file exists but is not a JSON object.
    """
    path = folder / "tokenizer_config.json"
    if not path.is_file():
        return {}
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LocalTokenizerError(f"{path}: unreadable ({type(exc).__name__}: {exc})") from None
    if not isinstance(config, dict):
        raise LocalTokenizerError(f"{path}: not a JSON object")
    return config


def chat_template_of(folder: Path, config: dict[str, Any]) -> str:
    """The folder's chat template: ``chat_template.jinja``, else ``config``'s ``chat_template`` (a string, or the
    ``default`` of named templates), else ``chat_template.json``'s.

    Raises:
        LocalTokenizerError: none of them holds a template (vLLM refuses chats without one too).
    """
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    found = config.get("chat_template")
    if found is None and (folder / "chat_template.json").is_file():
        try:
            found = json.loads((folder / "chat_template.json").read_text(encoding="utf-8")).get("chat_template")
        except (OSError, ValueError, AttributeError):
            found = None
    if isinstance(found, list):
        named = {t.get("name"): t.get("template") for t in found if isinstance(t, dict)}
        found = named.get("default")
    if not isinstance(found, str) or not found.strip():
        raise LocalTokenizerError(f"{folder} has no chat template (chat_template.jinja, or chat_template in "
                                  "tokenizer_config.json): the chat's own tokens cannot be counted")
    return found


def _raise(message: str) -> None:
    raise ValueError(message)


class LocalTokenizer:
    """The tokenizer of a model folder (the :class:`~loadgen.workloads.tokenizing.PromptTokenizer` calls).

    Raises (on construction):
        LocalTokenizerError: no or an unreadable ``tokenizer.json``, no chat template, no ``tokenizers`` package.
    """

    def __init__(self, folder: Path, origin: str) -> None:
        self.folder = folder
        tokenizer_file = folder / "tokenizer.json"
        if not tokenizer_file.is_file():
            raise LocalTokenizerError(f"{folder} has no tokenizer.json")
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise LocalTokenizerError("the `tokenizers` package is not installed in this environment: run `make "
                                      "envs` (it is in requirements/app.txt)") from None
        try:
            self.tokenizer = Tokenizer.from_file(str(tokenizer_file))
        except Exception as exc:  # the Rust library raises its own exception type for a malformed file
            raise LocalTokenizerError(f"{tokenizer_file}: not a tokenizer ({type(exc).__name__}: {exc})") from None
        config = read_tokenizer_config(folder)
        from jinja2 import TemplateError
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = lambda value, indent=None, **_: json.dumps(value, ensure_ascii=False, indent=indent)
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        try:
            self.template = env.from_string(chat_template_of(folder, config))
        except TemplateError as exc:
            raise LocalTokenizerError(f"{folder}: the chat template does not parse ({exc})") from None
        self.special = {k: t for k in SPECIAL_TOKEN_KEYS if (t := _token_text(config.get(k))) is not None}
        self.source = f"the local tokenizer in {folder} ({origin})"

    def ids(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def chat_text(self, text: str) -> str:
        """A one-message chat with ``text`` rendered by the folder's template, the generation prompt added.

        Raises:
            LocalTokenizerError: the template fails on it (it raised, or needs what this renderer lacks).
        """
        from jinja2 import TemplateError

        messages = [{"role": "user", "content": text}]
        try:
            return str(self.template.render(messages=messages, add_generation_prompt=True, **self.special))
        except (TemplateError, ValueError, TypeError) as exc:
            why = f"{type(exc).__name__}: {exc}"
            raise LocalTokenizerError(f"{self.folder}: the chat template failed ({why})") from None

    def chat_count(self, text: str) -> int:
        return len(self.ids(self.chat_text(text)))

    def text(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=False))  # special tokens kept, as vLLM's /detokenize

    def close(self) -> None:
        """Nothing to release (the server tokenizer's counterpart closes its connections)."""
