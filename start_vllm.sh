#!/usr/bin/env bash
# The seed image's model switch, over the project's engine controller (python -m stack.engine_switch):
#   export VLLM_MODEL_PATH=/root/models/qwen2-0.5b-instruct && ./start_vllm.sh
#   ./start_vllm.sh --kv-cache-gb 4 --max-model-len 2048     engine knobs apply on the switch (--help lists them)
# Restarts only vLLM with that model (MODEL works too); the UI and the sidecar keep running and follow it.
set -euo pipefail
cd "$(dirname "$0")"
make -s app-env
exec .venvs/app/bin/python -m stack.engine_switch "$@"
