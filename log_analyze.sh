#!/usr/bin/env bash
# The seed image's log tool, over the project's log analyzer (python -m logtools):
#   ./log_analyze.sh --errors | --slow | --stats [--json] [--since 1h] [--threshold-ms 1000] [--logs-dir DIR] ... (--help)
set -euo pipefail
cd "$(dirname "$0")"
make -s app-env
exec .venvs/app/bin/python -m logtools "$@"
