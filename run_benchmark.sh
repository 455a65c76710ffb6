#!/usr/bin/env bash
# The seed image's benchmark command, over the project's one entrypoint (python -m loadgen.command.benchmark):
#   ./run_benchmark.sh                                   seed defaults: 10 warmup, 50 users, 200 requests
#   ./run_benchmark.sh --concurrency 32 --duration 60    32 users for 60 s
#   ./run_benchmark.sh --concurrency 16 --profile        Chrome traces of the run
#   ./run_benchmark.sh --request-rate 4 --max-concurrency 8   4 req/s, at most 8 in flight (as vllm bench serve)
#   ./run_benchmark.sh --help                            the benchmark's knobs by group, with their defaults
set -euo pipefail
cd "$(dirname "$0")"
make -s app-env
exec .venvs/app/bin/python -m loadgen.command.benchmark "$@"
