"""Which tokenizer sizes token-exact prompts: the server's /tokenize (the real mock server's), else a local folder's
(TOKENIZER, or the folder the stack's engine serves from), else a refusal naming the knob — never a traceback, for a
server without /tokenize, one answering it with an HTML page, a JSON list or nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.enginestate import EngineState, write_engine_state
from core.settings import PROJECT_ROOT, Settings
from loadgen.errors import BenchError
from loadgen.selftest.mock_answers import MockConfig
from loadgen.workloads.dataset import dataset_of
from loadgen.workloads.randomdata import prefixes_file, trace_prompts_file
from loadgen.workloads.tokenizing import (
    LocalTokenizer,
    LocalTokenizerError,
    ServerTokenizer,
    open_prompt_tokenizer,
    tokenizer_folder,
)
from loadgen.workloads.trace import TraceRow
from tests.unit.loadgen.mock_in_loop import mock_in_thread
from tests.unit.loadgen.test_load_processes import plan

CORPUS = PROJECT_ROOT / "loadgen" / "workloads" / "data" / "prompts_zh.jsonl"
TRACE = PROJECT_ROOT / "loadgen" / "workloads" / "data" / "traces" / "burstgpt_sample.csv"
TEMPLATE = ("{{ bos_token }}{% for m in messages %}User: {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}Assistant: {% endif %}")
BROKEN = [  # (mock quirk, what the refusal says about the server's answer)
    (MockConfig(tokenize=False), "HTTP 404"),
    (MockConfig(tokenize_answer="html"), "not JSON (it starts '<!DOCTYPE html>"),
    (MockConfig(tokenize_answer="list"), "not vLLM's"),
    (MockConfig(tokenize_answer="empty"), "an empty body"),
]


def tiny_model(folder: Path) -> Path:
    """A folder with a byte-level BPE ``tokenizer.json`` of 4,096 ids trained on the bundled prompts (as the synthetic
    models' is), a chat template and a ``tokenizer_config.json`` whose BOS the template writes: the files a served
    model's folder has."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=4096, special_tokens=["<s>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([p.messages[-1]["content"] for p in dataset_of(CORPUS).prompts], trainer=trainer)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "chat_template.jinja").write_text(TEMPLATE, encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"bos_token": {"content": "<s>"}, "eos_token": "</s>"}))
    return folder


def settings_for(url: str, tmp_path: Path, **fields: Any) -> Settings:
    return Settings(_env_file=None, vllm_base_url=url, logs_dir=tmp_path / "logs", **fields)  # type: ignore[call-arg]


@pytest.fixture(params=BROKEN, ids=["404", "html", "list", "empty"])
def broken_server(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """A real mock server whose /tokenize is unusable, with what the refusal must say about it."""
    cfg, said = request.param
    with mock_in_thread(cfg) as url:
        yield url, said


def test_the_servers_tokenize_is_used_where_it_works(tmp_path: Path) -> None:
    """A server answering /tokenize as vLLM does sizes the prompts, and the run's output says so."""
    lines: list[str] = []
    with mock_in_thread(MockConfig()) as url:
        tok = open_prompt_tokenizer(settings_for(url, tmp_path), "m", "PREFIX_LEN", lines.append)
        try:
            assert isinstance(tok, ServerTokenizer) and tok.chat_count("abc") == 3 + 4  # the mock's 4-token template
        finally:
            tok.close()
    assert lines == [f"[INFO] PREFIX_LEN: prompts sized with the server's /tokenize at {url}"]


def test_an_unusable_tokenize_without_a_local_tokenizer_is_refused_naming_the_knob(
        broken_server: tuple[str, str], tmp_path: Path) -> None:
    """No /tokenize (404), an HTML page, a JSON list or an empty body, and no local tokenizer known: a BenchError that
    names the URL, what it answered and TOKENIZER — from the prompt builder itself, before any prompt is written."""
    url, said = broken_server
    settings = settings_for(url, tmp_path)
    the_plan = plan(tmp_path, vllm_url=url, prefix_len_tokens=32)
    with pytest.raises(BenchError) as caught:
        prefixes_file(the_plan, tmp_path, CORPUS, lambda: open_prompt_tokenizer(settings, "m", "PREFIX_LEN"))
    message = str(caught.value)
    assert f"{url}/tokenize" in message and said in message and "Set TOKENIZER (--tokenizer)" in message, message
    assert not (tmp_path / "datasets").exists()


def test_an_unusable_tokenize_falls_back_to_tokenizer_and_sizes_exactly(
        broken_server: tuple[str, str], tmp_path: Path) -> None:
    """TOKENIZER=<folder>: the prefixes are sized with its tokenizer, each exactly PREFIX_LEN tokens as it counts
    plain text, and the run's output names the folder and why the server's was not used."""
    url, said = broken_server
    folder = tiny_model(tmp_path / "model")
    lines: list[str] = []
    settings = settings_for(url, tmp_path, tokenizer=str(folder))
    the_plan = plan(tmp_path, vllm_url=url, prefix_len_tokens=40, prefix_count=3)
    path = prefixes_file(the_plan, tmp_path, CORPUS,
                         lambda: open_prompt_tokenizer(settings, "m", "PREFIX_LEN", lines.append))
    local = LocalTokenizer(folder, "TOKENIZER")
    texts = json.loads(path.read_text(encoding="utf-8"))
    assert len(texts) == 3 and all(len(local.ids(t)) == 40 for t in texts)
    assert len(lines) == 1 and lines[0].startswith("[WARN] PREFIX_LEN: the server has no usable /tokenize (")
    assert said in lines[0] and f"prompts sized with the local tokenizer in {folder} (TOKENIZER)" in lines[0]


def test_the_engines_own_folder_is_found_from_the_engine_state(tmp_path: Path) -> None:
    """Without TOKENIZER, the folder the stack's engine serves the measured model from (logs/engine_state.json) sizes
    the trace's prompts, each exactly its row's input length as that tokenizer counts the chat; a state of another
    served model is not used."""
    folder = tiny_model(tmp_path / "model")
    with mock_in_thread(MockConfig(tokenize=False)) as url:
        settings = settings_for(url, tmp_path)
        state = EngineState(requested=str(folder), source="local_dir", model_arg=str(folder), served_name="other")
        write_engine_state(settings.engine_state_file, state)
        with pytest.raises(BenchError, match="Set TOKENIZER"):
            open_prompt_tokenizer(settings, "m", "TRACE", lambda _: None)
        write_engine_state(settings.engine_state_file, state.model_copy(update={"served_name": "m"}))
        rows = [(float(i), TraceRow(at_s=float(i), input_tokens=n, output_tokens=2, line=i + 1))
                for i, n in enumerate([30, 64, 5])]
        the_plan = plan(tmp_path, vllm_url=url)
        path, raised = trace_prompts_file(the_plan, rows, tmp_path, CORPUS,
                                          lambda: open_prompt_tokenizer(settings, "m", "TRACE", lambda _: None))
    local = LocalTokenizer(folder, "engine")
    entries = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [local.chat_count(e["prompt"]) for e in entries] == [e["input_tokens"] for e in entries]
    assert [e["input_tokens"] for e in entries][:2] == [30, 64] and raised == 1  # 5 is below the template's own


def test_a_folder_that_cannot_tokenize_is_named_in_the_refusal(tmp_path: Path) -> None:
    """TOKENIZER naming a folder without tokenizer.json, or a name that is no folder here, is listed with why."""
    (tmp_path / "empty").mkdir()
    with mock_in_thread(MockConfig(tokenize=False)) as url:
        for spec, why in [(str(tmp_path / "empty"), "has no tokenizer.json"), ("no/such-model", "no such folder")]:
            with pytest.raises(BenchError) as caught:
                open_prompt_tokenizer(settings_for(url, tmp_path, tokenizer=spec), "m", "TRACE", lambda _: None)
            assert f"Tried: {spec} (TOKENIZER): " in str(caught.value) and why in str(caught.value)


def test_local_chat_template_comes_from_the_config_when_there_is_no_jinja_file(tmp_path: Path) -> None:
    """tokenizer_config.json's chat_template (a string, or the default of named ones) is used; none at all is a
    LocalTokenizerError saying so."""
    folder = tiny_model(tmp_path / "model")
    (folder / "chat_template.jinja").unlink()
    config = {"bos_token": "<s>", "chat_template": [{"name": "default", "template": "[{{ messages[0]['content'] }}]"}]}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    local = LocalTokenizer(folder, "t")
    assert local.chat_text("x") == "[x]" and local.chat_count("x") == len(local.ids("[x]"))
    (folder / "tokenizer_config.json").write_text("{}")
    with pytest.raises(LocalTokenizerError, match="has no chat template"):
        LocalTokenizer(folder, "t")


def test_the_template_sees_the_special_tokens_and_decoding_round_trips(tmp_path: Path) -> None:
    """The template's bos_token is the config's; the chat's count includes it as one token; ids decode back."""
    local = LocalTokenizer(tiny_model(tmp_path / "model"), "t")
    assert local.chat_text("你好") == "<s>User: 你好\nAssistant: "
    assert local.chat_count("你好") == 1 + len(local.ids("User: 你好\nAssistant: "))
    ids = local.ids("今天天气很好。")
    assert local.text(ids) == "今天天气很好。" and np.all(np.asarray(ids) >= 0)


def test_model_names_resolve_to_local_folders(tmp_path: Path) -> None:
    """synthetic:NAME is under MODELS_DIR, a folder is itself, anything else not cached is None (no network)."""
    assert tokenizer_folder("synthetic:tiny", tmp_path) == tmp_path / "tiny"
    assert tokenizer_folder(str(tmp_path), tmp_path) == tmp_path
    assert tokenizer_folder("nobody/no-such-model-here", tmp_path) is None
    assert tokenizer_folder("./not-here", tmp_path) is None


class _Sidecar:
    """The sidecar as the benchmark's preflight sees it: up, token accepted, no baselines."""

    @classmethod
    def of(cls, settings: Settings) -> _Sidecar:
        return cls()

    def check_token(self) -> None:
        pass

    def baselines(self) -> dict[str, str]:
        return {}


@pytest.mark.parametrize("workload", [["--prefix-len", "32"], ["--trace", str(TRACE), "--requests", "3"]],
                         ids=["prefix-len", "trace"])
def test_the_benchmark_against_a_server_without_tokenize_refuses_or_runs_on_the_local_tokenizer(
        workload: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`./run_benchmark.sh --prefix-len 32` or `--trace FILE` against the real mock server answering /tokenize with an
    HTML page: exit 2 and one [ERROR] naming TOKENIZER, nothing sent and no traceback; with --tokenizer FOLDER the
    prompts are sized locally, the output says so, and the run goes on to the load."""
    from loadgen.command import benchmark as bench

    started: list[Any] = []

    def run_benchmark(settings: Settings, plan: Any, *_: Any) -> int:
        started.append(plan)
        return 0

    monkeypatch.setattr(bench, "SidecarClient", _Sidecar)
    monkeypatch.setattr(bench, "run_benchmark", run_benchmark)
    folder = tiny_model(tmp_path / "model")
    with mock_in_thread(MockConfig(tokenize_answer="html")) as url:
        common = ["--base-url", url, "--logs-dir", str(tmp_path / "logs"), "--run-dir", str(tmp_path / "run"),
                  "--warmup", "0", *workload]
        refused = bench.main(common)
        out = capsys.readouterr()
        assert refused == 2 and not started, out.out + out.err
        assert "Set TOKENIZER (--tokenizer)" in out.err and "not JSON (it starts '<!DOCTYPE html>" in out.err, out.err
        assert "Traceback" not in out.out + out.err
        ran = bench.main([*common, "--tokenizer", str(folder)])
        out = capsys.readouterr()
    assert ran == 0 and len(started) == 1, out.out + out.err
    assert f"prompts sized with the local tokenizer in {folder} (TOKENIZER)" in out.out
