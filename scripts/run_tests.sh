#!/usr/bin/env bash
# make test's checks before the compose stack: lint, then the unit suite, in a second process beside the integration
# suite; then their output and one verdict. The integration tests spend most of their time waiting (vLLM's CPU engine
# keeps to one core, runs go by their own clocks), so on two cores lint and the unit suite fit beside them instead of
# before them (measured in docs/development.md, "How long").
# Arguments go to both pytest processes (make test PYTEST_ARGS=...). Exit: non-zero when lint or either suite failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
py=.venvs/app/bin/python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
{
    make --no-print-directory lint >"$work/lint.log" 2>&1
    echo $? >"$work/lint.rc"
    "$py" -m pytest tests/unit -q -rs --basetemp "$work/tmp" "$@" >"$work/unit.log" 2>&1
    echo $? >"$work/unit.rc"
} &
beside=$!
trap 'pkill -P "$beside"; kill "$beside" 2>/dev/null; exit 130' INT TERM
"$py" -m pytest tests -q -rs --ignore=tests/unit --ignore=tests/compose "$@"
integration=$?
wait "$beside"
lint=$(cat "$work/lint.rc" 2>/dev/null || echo 1)
unit=$(cat "$work/unit.rc" 2>/dev/null || echo 1)
echo "---------- make lint (ran beside the integration tests) ----------"
cat "$work/lint.log"
echo "---------- unit tests (ran beside the integration tests, after lint) ----------"
cat "$work/unit.log" 2>/dev/null
if [ "$lint" -ne 0 ] || [ "$unit" -ne 0 ] || [ "$integration" -ne 0 ]; then
    echo "[ERROR] make test failed: lint exit $lint, unit suite exit $unit, integration suite exit $integration" >&2
    exit 1
fi
