"""Secrets: which values are masked and how (any length, argv flags, JSON by value), where the keys come from, which
service gets which secret, and the sidecar token file."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from core.parsing import option_values
from core.redact import Redactor, configured_secrets, is_secret_flag, redact_argv, redact_json
from core.settings import (
    SERVICE_SECRETS,
    Settings,
    ensure_sidecar_token,
    ensure_token_file,
    secret_env_names,
    service_env,
)


def settings(**fields: Any) -> Settings:
    return Settings(_env_file=None, **fields)  # type: ignore[call-arg]


def test_secret_flag_values_and_argv_masking() -> None:
    """Values of --api-key (a list), --hf-token=… and the like are found and masked; --tokenizer is not a secret."""
    argv = ["vllm", "--api-key", "k1", "k2", "--tokenizer", "tok/x", "--hf-token=hf_abc", "--max-num-batched-tokens",
            "8", "--password", "p"]  # fmt: skip
    assert option_values(argv, is_secret_flag) == ["k1", "k2", "hf_abc", "p"]
    assert redact_argv(argv) == ["vllm", "--api-key", "***", "***", "--tokenizer", "tok/x", "--hf-token=***",
                                 "--max-num-batched-tokens", "8", "--password", "***"]  # fmt: skip


def test_option_values_reads_list_and_equals_forms() -> None:
    """``--api-key a b`` and ``--api-key=c`` both give their values, in order."""
    assert option_values(["--api-key", "a", "b", "--port", "1", "--api-key=c"], "--api-key") == ["a", "b", "c"]
    assert option_values(["--api-keys", "x"], "--api-key") == []


def test_short_secrets_are_masked_as_whole_words_only() -> None:
    """A four-character secret is masked where it stands alone, not inside longer words or numbers; long ones
    everywhere; the bytes form masks the same."""
    redact = Redactor(["pw42", "longsecret"])
    assert redact("user pw42 said pw42.") == "user *** said ***."
    assert redact("xpw42 pw421 pw42_x") == "xpw42 pw421 pw42_x"
    assert redact("alongsecretz") == "a***z"
    assert redact.bytes(b"key=pw42\n") == b"key=***\n"


def test_json_is_masked_value_by_value() -> None:
    """Masking parsed JSON keeps keys and numbers: the document stays valid even for a secret like '1234'."""
    doc = {"ok": True, "ttft_ms": 1234, "error": "bad key 1234", "rows": [{"note": "1234"}]}
    masked = redact_json(doc, Redactor(["1234"]))
    assert masked == {"ok": True, "ttft_ms": 1234, "error": "bad key ***", "rows": [{"note": "***"}]}
    json.dumps(masked)


def test_configured_secrets_are_every_secret_field_of_any_length(tmp_path: Path) -> None:
    """Every repr=False setting, the token file's token and --api-key values of the extra-argument knobs count,
    however short."""
    token_file = tmp_path / "token"
    token_file.write_text("tok-from-file\n")
    found = configured_secrets(settings(
        hf_token="hf_x", ui_password="abcd", vllm_api_key="k", locust_web_password="lp", ui_auth_secret="jwt",
        sidecar_token_file=token_file, vllm_extra_args="--api-key extra1 --max-num-seqs 8",
        locust_extra_args="--password=lpw",
    ))  # fmt: skip
    assert set(found) == {"hf_x", "abcd", "k", "lp", "jwt", "tok-from-file", "extra1", "lpw"}


def test_vllm_keys_come_from_the_variable_and_the_extra_args() -> None:
    """VLLM_API_KEY first, then every --api-key of VLLM_EXTRA_ARGS (deduplicated); clients send the first."""
    s = settings(vllm_api_key="main", vllm_extra_args="--api-key a main --port 1 --api-key=b")
    assert s.vllm_api_keys == ["main", "a", "b"]
    assert s.vllm_headers == {"Authorization": "Bearer main"}
    assert settings(vllm_extra_args="--api-key only").vllm_client_key == "only"
    assert settings().vllm_headers == {} and settings(vllm_api_key="").vllm_api_keys == []


def test_secret_settings_have_no_command_line_flag() -> None:
    """Secrets are environment-only (never in ps): every repr=False field, the new ones included."""
    from core.flags import flag_fields

    names = {name for name, _ in flag_fields()}
    assert {"VLLM_API_KEY", "SIDECAR_TOKEN", "LOCUST_WEB_PASSWORD", "HF_TOKEN", "UI_PASSWORD"} <= secret_env_names()
    assert not names & {n.lower() for n in secret_env_names()}


def test_each_service_gets_only_its_secrets() -> None:
    """vLLM keeps HF_TOKEN and its key, never the UI password or the sidecar token; the UI never the HF token."""
    base = {name: "v" for name in secret_env_names()} | {"PATH": "/bin"}
    vllm = service_env("vllm", base)
    assert {"HF_TOKEN", "VLLM_API_KEY", "PATH"} <= set(vllm) and "UI_PASSWORD" not in vllm
    assert "SIDECAR_TOKEN" not in vllm and "LOCUST_WEB_PASSWORD" not in vllm
    ui = service_env("ui", base)
    assert "HF_TOKEN" not in ui and {"UI_PASSWORD", "VLLM_API_KEY"} <= set(ui)
    for service, kept in SERVICE_SECRETS.items():
        assert set(service_env(service, base)) & secret_env_names() == kept


def test_sidecar_token_file_is_made_once_private_and_reused(tmp_path: Path) -> None:
    """The token file is created 0600 with a long random token; later calls (and the settings) read the same."""
    path = tmp_path / "run" / "sidecar_token"
    token = ensure_token_file(path)
    assert len(token) >= 40 and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert ensure_token_file(path) == token
    s = settings(run_dir=tmp_path / "run")
    assert s.sidecar_auth_token() == token and ensure_sidecar_token(s) == token
    assert ensure_sidecar_token(settings(sidecar_token="given", run_dir=tmp_path / "x")) == "given"
    assert not (tmp_path / "x").exists()


def test_empty_token_file_is_replaced(tmp_path: Path) -> None:
    """A token file left empty (a crash between create and write) gets a token."""
    path = tmp_path / "sidecar_token"
    path.write_text("")
    assert ensure_token_file(path) and path.read_text().strip()


@pytest.mark.parametrize("value", ["sidecar,bench.lan", " sidecar , *.lan "])
def test_trusted_hosts_parse(value: str) -> None:
    """SIDECAR_TRUSTED_HOSTS is a comma-separated list; the sidecar answers them besides loopback and its own."""
    s = Settings(_env_file=None, sidecar_trusted_hosts=value, sidecar_host="10.0.0.5")  # type: ignore[call-arg, arg-type]
    assert {"127.0.0.1", "localhost", "::1", "10.0.0.5", "sidecar"} <= set(s.sidecar_hosts)


def test_trusted_host_with_a_port_is_refused() -> None:
    """A port or a path in SIDECAR_TRUSTED_HOSTS is a configuration error naming the value."""
    with pytest.raises(ValueError, match="is not a host name"):
        Settings(_env_file=None, sidecar_trusted_hosts="sidecar:8200")  # type: ignore[call-arg, arg-type]


def test_request_log_and_rows_mask_echoed_secrets(tmp_path: Path) -> None:
    """A server error echoing the API key is masked in requests.jsonl and in the benchmark's rows file."""
    from core.records import RequestRecord
    from core.requestlog import RequestLog
    from loadgen.locust_side.process_state import RunState
    from tests.unit.loadgen.test_run_edges import plan

    s = settings(vllm_api_key="k-echoed-123", logs_dir=tmp_path)
    state = RunState(plan(tmp_path, requests=1), RequestLog.of(s))
    state.begin(1, tmp_path / "rows.jsonl")
    state.save(RequestRecord(request_id="r", started_at=1.8e9, ok=False, error_kind="http_status",
                             error="bad key k-echoed-123"))  # fmt: skip
    for path in (tmp_path / "requests.jsonl", tmp_path / "rows.jsonl"):
        text = path.read_text()
        assert "k-echoed-123" not in text and "bad key ***" in text, path


def test_stackctl_token_makes_the_file_and_prints_its_path_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m stack.control token`` (before a compose secret is mounted) prints the path, never the token."""
    from stack import control as stackctl

    s = settings(run_dir=tmp_path / "run")
    assert stackctl.token(s) == 0
    out = capsys.readouterr().out
    assert out.strip() == str(tmp_path / "run" / "sidecar_token")
    token = s.sidecar_auth_token()
    assert token and token not in out


def test_ab_comparison_ignores_api_keys_among_vllm_flags() -> None:
    """A/B comparisons list how vLLM serves: an --api-key (masked in the state) is never a difference."""
    from core.comparison import vllm_flags

    assert vllm_flags(["-m", "vllm", "--api-key", "***", "***", "--max-num-seqs", "2", "--hf-token=***"]) == {
        "--max-num-seqs": "2"
    }
