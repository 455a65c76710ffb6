"""A model folder's own tokenizer, for sizing prompts when the server has no usable ``/tokenize``: ``tokenizer.json``
by the ``tokenizers`` library, the chat template rendered with Jinja as ``transformers`` does (sandboxed,
``trim_blocks``/``lstrip_blocks``, ``tojson``, ``raise_exception``, ``strftime_now``, the special tokens as
variables) and tokenized without added special tokens, as vLLM's ``/tokenize`` with ``messages``. Counts match the
server's only for the tokenizer it serves; the run's output names the folder.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from loadgen.errors import BenchError

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
        """Token ids of plain ``text`` (no special tokens added)."""
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
        """Tokens of a one-message chat with ``text`` as the server's chat endpoint builds it (template included)."""
        return len(self.ids(self.chat_text(text)))

    def text(self, ids: list[int]) -> str:
        """``ids`` decoded (special tokens kept, as vLLM's ``/detokenize``)."""
        return str(self.tokenizer.decode(ids, skip_special_tokens=False))

    def close(self) -> None:
        """Nothing to release (the server tokenizer's counterpart closes its connections)."""
