"""Build a synthetic model with ERNIE-4.5-0.3B-PT's exact architecture and seeded random weights.

The hub is unreachable where this stack is developed, so it serves a local stand-in: same layer shapes (representative
compute cost), a tokenizer trained on the project's Chinese prompt corpus, ERNIE's special tokens and chat template; its
text is noise. Runs in the *engine* environment: ``python -m engine.synthetic --variant NAME --out DIR``.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import itertools
import json
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# ERNIE-4.5-0.3B-PT's chat template, in the shape of the published one:
# <|begin_of_sentence|>{system}\nUser: {user}\nAssistant: {assistant}<|end_of_sentence|>...
CHAT_TEMPLATE = (
    "{%- if not add_generation_prompt is defined -%}{%- set add_generation_prompt = true -%}{%- endif -%}"
    "{{- '<|begin_of_sentence|>' -}}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}{{- message['content'] + '\\n' -}}"
    "{%- elif message['role'] == 'user' -%}{{- 'User: ' + message['content'] + '\\n' -}}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{- 'Assistant: ' + message['content'] + '<|end_of_sentence|>' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- 'Assistant: ' -}}{%- endif -%}"
)
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<|begin_of_sentence|>", "<|end_of_sentence|>"]
MARKER = "synthetic_model.json"
BUILDER_VERSION = 1


@dataclass(frozen=True)
class Variant:
    """Shape of one synthetic model; fields map 1:1 onto ``Ernie4_5Config`` keyword arguments."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int


VARIANTS: dict[str, Variant] = {
    # Ernie4_5Config() defaults == baidu/ERNIE-4.5-0.3B-PT's published config.json.
    "ernie-4.5-0.3b": Variant(1024, 18, 16, 2, 128, 3072, 103424, 131072),
    # Same family, a few MB, for tests. vLLM's CPU attention needs head_dim >= 64.
    "tiny": Variant(128, 2, 2, 1, 64, 256, 8192, 4096),
}


def spec_hash(variant: str, seed: int, corpus_text: str) -> str:
    """Hex digest identifying one build: variant shape, seed, corpus and builder version."""
    payload = json.dumps(
        {"v": BUILDER_VERSION, "variant": asdict(VARIANTS[variant]), "seed": seed, "corpus": corpus_text},
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def is_built(out: Path, digest: str) -> bool:
    """True when ``out`` holds a complete build whose marker records ``digest``."""
    marker = out / MARKER
    if not marker.is_file():
        return False
    try:
        return bool(json.loads(marker.read_text())["spec_hash"] == digest)
    except (OSError, ValueError, KeyError, TypeError):  # unreadable, not JSON, no such key, a list: not built
        return False


def _padding_tokens(existing: set[str], needed: int) -> list[str]:
    """``needed`` extra byte-level tokens, each a whole CJK character (or pair), so the uniformly
    sampled ids of a random model decode to text."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode  # GPT-2's byte -> printable-character table

    table = bytes_to_unicode()

    def enc(text: str) -> str:
        return "".join(table[b] for b in text.encode("utf-8"))

    singles = [chr(cp) for cp in range(0x4E00, 0xA000)]
    pairs = (first + second for i, first in enumerate(singles) for second in singles[i : i + 64])
    out: list[str] = []
    for text in itertools.chain(singles, pairs):
        if len(out) >= needed:
            return out
        token = enc(text)
        if token not in existing:
            out.append(token)
            existing.add(token)
    raise ValueError(f"cannot pad the vocabulary by {needed} tokens")


def build_tokenizer(corpus: list[str], vocab_size: int) -> Any:
    """A byte-level BPE tokenizer trained on ``corpus``, padded to ``vocab_size`` ids, with ERNIE's
    special tokens and chat template (``transformers.PreTrainedTokenizerFast``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=min(vocab_size, 4096),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    spec = json.loads(tok.to_str())
    vocab: dict[str, int] = spec["model"]["vocab"]
    for token in _padding_tokens(set(vocab), vocab_size - len(vocab)):
        vocab[token] = len(vocab)
    spec["model"]["vocab"] = vocab
    padded = Tokenizer.from_str(json.dumps(spec, ensure_ascii=False))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=padded,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<unk>",
        additional_special_tokens=["<|begin_of_sentence|>", "<|end_of_sentence|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def corpus_texts(corpus_path: Path) -> list[str]:
    """Training text of the tokenizer: each JSONL line's ``prompt``, or its ``messages`` contents joined."""
    texts = []
    for line in corpus_path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        obj = json.loads(line)
        if isinstance(obj.get("prompt"), str):
            texts.append(obj["prompt"])
        else:
            texts.append("\n".join(m["content"] for m in obj.get("messages", []) if isinstance(m.get("content"), str)))
    return texts


def build(variant: str, out: Path, corpus_path: Path, seed: int = 0) -> Path:
    """Build the synthetic model ``variant`` (a key of :data:`VARIANTS`) into ``out`` and return it; idempotent,
    written through a temporary sibling so a crash leaves no half model. ``corpus_path``: JSONL with a ``prompt`` per
    line; ``seed``: the weights' torch seed.

    Raises:
        KeyError: unknown variant.
        FileNotFoundError: missing corpus.
    """
    VARIANTS[variant]  # KeyError for an unknown variant, before any work
    corpus = corpus_texts(corpus_path)
    digest = spec_hash(variant, seed, "\n".join(corpus))
    if is_built(out, digest):
        print(f"[synthetic] {variant} already built at {out}")
        return out
    # Several launchers may build the same model at once (REPLICAS=N starts N engines): one builds, the others wait
    # for it and find the model built; the lock file is beside the model, released when the process ends.
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_name(f".{out.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_built(out, digest):
            print(f"[synthetic] {variant} already built at {out} (by another process)")
            return out
        return _build_unlocked(variant, corpus, digest, out, seed)


def _build_unlocked(variant: str, corpus: list[str], digest: str, out: Path, seed: int) -> Path:
    """The build itself, under the lock of :func:`build`."""
    import torch
    from tqdm import tqdm
    from transformers import Ernie4_5Config, Ernie4_5ForCausalLM

    shape = VARIANTS[variant]
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    steps = tqdm(total=4, desc=f"Building synthetic:{variant}", unit="step", file=sys.stdout)
    steps.set_postfix_str("tokenizer")
    tokenizer = build_tokenizer(corpus, shape.vocab_size)
    steps.update()
    steps.set_postfix_str("weights")
    torch.manual_seed(seed)
    config = Ernie4_5Config(**asdict(shape), tie_word_embeddings=True, torch_dtype="bfloat16")
    config.architectures = ["Ernie4_5ForCausalLM"]
    model = Ernie4_5ForCausalLM(config).to(torch.bfloat16)
    steps.update()
    steps.set_postfix_str("saving")
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    steps.update()
    marker = {
        "synthetic": True,
        "variant": variant,
        "seed": seed,
        "spec_hash": digest,
        "architecture": "Ernie4_5ForCausalLM",
        "parameters": sum(p.numel() for p in model.parameters()),
        "note": "random weights: served text is noise by design",
    }
    (tmp / MARKER).write_text(json.dumps(marker, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    steps.update()
    steps.close()
    print(f"[synthetic] built {variant} ({marker['parameters']:,} parameters) at {out}")
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m engine.synthetic --variant tiny --out models/tiny --corpus FILE``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--variant", required=True, choices=sorted(VARIANTS))
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--corpus", required=True, type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    build(args.variant, args.out, args.corpus, args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
