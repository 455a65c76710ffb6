#!/usr/bin/env bash
# make test's pytest part: the unit suite in a second process beside the integration suite, then the unit output and
# one verdict. The integration tests spend most of their time waiting (vLLM's CPU engine keeps to one core, runs go
# by their own clocks), so on two cores the unit suite fits beside them instead of before them.
# Arguments go to both pytest processes (make test PYTEST_ARGS=...). Exit: non-zero when either suite failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
py=.venvs/app/bin/python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" -m pytest tests/unit -q -rs --basetemp "$work/tmp" "$@" >"$work/unit.log" 2>&1 &
units=$!
trap 'kill "$units" 2>/dev/null; exit 130' INT TERM
"$py" -m pytest tests -q -rs --ignore=tests/unit --ignore=tests/compose "$@"
integration=$?
wait "$units"
unit=$?
echo "---------- unit tests (ran beside the integration tests) ----------"
cat "$work/unit.log"
if [ "$unit" -ne 0 ] || [ "$integration" -ne 0 ]; then
    echo "[ERROR] tests failed: unit suite exit $unit, integration suite exit $integration" >&2
    exit 1
fi
