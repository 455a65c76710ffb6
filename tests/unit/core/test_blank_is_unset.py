"""Every knob means the same from every launcher: what each launcher passes for "not given" (compose's ``${X:-}``,
``make X=``, an ``X=`` line in ``.env``, an empty Kubernetes ConfigMap entry) is the knob's default, for every
settings field under every one of its variable names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from pydantic import AliasChoices, Field, ValidationError

from core.settings import Settings, describe_validation_error
from tests.unit.deploy.containers_support import compose_cli

NAMES = tuple(
    name.upper()
    for field, info in Settings.model_fields.items()
    for name in (
        [n for n in info.validation_alias.choices if isinstance(n, str)]
        if isinstance(info.validation_alias, AliasChoices)
        else [field]
    )
)
"""Every environment name of every settings field (aliases too: GPU_DEVICES and CUDA_VISIBLE_DEVICES)."""


def compose_blanks(tmp_path: Path) -> dict[str, str]:
    """The environment Docker Compose gives a service whose ``environment`` is ``X: ${X:-}`` for every name, none set
    (docker-compose.yml passes GPU_DEVICES, MODEL, HF_TOKEN ... so)."""
    file = tmp_path / "compose.yml"
    service = {"image": "scratch", "environment": {name: f"${{{name}:-}}" for name in NAMES}}
    file.write_text(yaml.safe_dump({"services": {"svc": service}}))
    env = {k: v for k, v in os.environ.items() if k.upper() not in NAMES}
    done = subprocess.run([*compose_cli(), "-f", str(file), "config", "--format", "json"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    environment = json.loads(done.stdout)["services"]["svc"]["environment"]
    return {name: "" if value is None else value for name, value in environment.items()}


def make_blanks(tmp_path: Path) -> dict[str, str]:
    """The environment a recipe of ``make TARGET X= Y= ...`` runs with (make exports command-line variables)."""
    makefile = tmp_path / "Makefile"
    makefile.write_text(f"show:\n\t@{sys.executable} -c 'import json, os; print(json.dumps(dict(os.environ)))'\n")
    env = {k: v for k, v in os.environ.items() if k.upper() not in NAMES and k not in ("MAKEFLAGS", "MFLAGS")}
    done = subprocess.run(["make", "-s", "-f", str(makefile), "show", *(f"{name}=" for name in NAMES)], env=env,
                          cwd=tmp_path, capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return {k: v for k, v in json.loads(done.stdout).items() if k.upper() in NAMES}


def configmap_blanks(_tmp_path: Path) -> dict[str, str]:
    """A ConfigMap's ``data`` with an empty entry per name, as its YAML reads back (the kubelet sets each entry of an
    ``envFrom`` ConfigMap as the container's variable, verbatim)."""
    manifest = yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                               "data": {name: "" for name in NAMES}})  # fmt: skip
    return dict(yaml.safe_load(manifest)["data"])


def spaces_blanks(_tmp_path: Path) -> dict[str, str]:
    """A value of spaces only (``X=" "`` in a shell or a quoted ConfigMap entry)."""
    return {name: "  " for name in NAMES}


LAUNCHERS: dict[str, Callable[[Path], dict[str, str]]] = {
    "compose ${X:-}": compose_blanks,
    "make X=": make_blanks,
    "ConfigMap X: ''": configmap_blanks,
    "X='  '": spaces_blanks,
}


def settings(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], env_file: Path | None = None) -> Settings:
    """The settings with exactly ``env`` among the settings' variables (the rest of the environment unset)."""
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings(_env_file=env_file)  # type: ignore[call-arg]


def assert_not_given(got: Settings, base: Settings, what: str) -> None:
    """Every field of ``got`` equals the one of the settings with nothing given, and none counts as set."""
    differ = {f: (getattr(got, f), getattr(base, f)) for f in Settings.model_fields if getattr(got, f) != getattr(base, f)}
    assert not differ, f"{what}: (read, not given) {differ}"
    assert got.model_fields_set == base.model_fields_set, what


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_blank_from_each_launcher_is_not_given(launcher: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every name blank as the launcher passes it, all at once and one at a time, reads as nothing given."""
    blanks = LAUNCHERS[launcher](tmp_path)
    assert sorted(blanks) == sorted(NAMES) and all(not value.strip() for value in blanks.values()), blanks
    base = settings(monkeypatch, {})
    assert_not_given(settings(monkeypatch, blanks), base, f"{launcher}, every name")
    for name in NAMES:
        try:
            got = settings(monkeypatch, {name: blanks[name]})
        except ValidationError as exc:
            pytest.fail(f"{launcher}: {name}={blanks[name]!r} refused:\n{describe_validation_error(exc)}")
        assert_not_given(got, base, f"{launcher}: {name}={blanks[name]!r}")


def test_an_empty_dotenv_line_is_not_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``X=`` lines in .env (a copied .env.example with values deleted) read as nothing given, for every name."""
    base = settings(monkeypatch, {})
    env_file = tmp_path / ".env"
    env_file.write_text("".join(f"{name}=\n" for name in NAMES))
    assert_not_given(settings(monkeypatch, {}, env_file), base, ".env, every name")
    for name in NAMES:
        env_file.write_text(f"# a copied .env.example\n{name}=\n")
        assert_not_given(settings(monkeypatch, {}, env_file), base, f".env: {name}=")


def test_a_blank_name_gives_way_to_another_name_of_its_knob(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU_DEVICES= beside CUDA_VISIBLE_DEVICES=1 reads GPU 1 (in the environment or in .env); a blank in the
    environment beats a value in .env (``make RATE=`` unsets .env's RATE)."""
    assert settings(monkeypatch, {"GPU_DEVICES": "", "CUDA_VISIBLE_DEVICES": "1"}).gpu_devices == "1"
    assert settings(monkeypatch, {"GPU_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "1"}).gpu_devices == "0"
    env_file = tmp_path / ".env"
    env_file.write_text("KV_CACHE_GB=\nVLLM_CPU_KVCACHE_SPACE=4\nRATE=2\n")
    got = settings(monkeypatch, {"RATE": ""}, env_file)
    assert got.kv_cache_gb == 4.0 and got.rate is None


def test_a_blank_where_no_default_exists_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """A knob without a default (none today; a future required field) given blank is refused naming its variable."""

    class Required(Settings):
        deploy_target: str = Field()

    monkeypatch.setenv("DEPLOY_TARGET", " ")
    with pytest.raises(ValidationError) as caught:
        Required(_env_file=None)  # type: ignore[call-arg]
    assert "DEPLOY_TARGET: Field required" in describe_validation_error(caught.value)
