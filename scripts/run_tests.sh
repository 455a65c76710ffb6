#!/usr/bin/env bash
# make test's checks before the compose stack, in two lanes side by side (docs/development.md, "How it runs"):
#   lane "stack": the unit suite, then the integration tests on the session stack (its `make up` starts when the
#                 unit suite does, so vLLM loads while they run);
#   lane "rest":  make lint, then the other integration tests (the mock server, other servers, stacks of their own),
#                 on test ports shifted by 100 (TEST_PORT_OFFSET) so the two lanes never share a port.
# One lane alone left a core idle while it waited on vLLM's starts and on runs that go by their own clocks; side by
# side both cores are ≈ 85 % busy (docs/development.md, "How long"). Each lane's output is printed when both have
# ended, then one verdict.
# Arguments go to both pytest processes (make test PYTEST_ARGS=...). Exit: non-zero when lint or either lane failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
py=.venvs/app/bin/python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
offset=${TEST_PORT_OFFSET:-0}
{
    make --no-print-directory lint >"$work/lint.log" 2>&1
    echo $? >"$work/lint.rc"
    TEST_LANE=rest TEST_PORT_OFFSET=$((offset + 100)) "$py" -m pytest tests -q -rs --ignore=tests/compose \
        --basetemp "$work/rest" "$@" >"$work/rest.log" 2>&1
    echo $? >"$work/rest.rc"
} &
beside=$!
trap 'pkill -P "$beside"; kill "$beside" 2>/dev/null; exit 130' INT TERM
TEST_LANE=stack "$py" -m pytest tests -q -rs --ignore=tests/compose --basetemp "$work/stack" "$@"
stack=$?
wait "$beside"
lint=$(cat "$work/lint.rc" 2>/dev/null || echo 1)
rest=$(cat "$work/rest.rc" 2>/dev/null || echo 1)
echo "---------- make lint (lane rest, beside lane stack) ----------"
cat "$work/lint.log"
echo "---------- the other integration tests (lane rest, after lint) ----------"
cat "$work/rest.log" 2>/dev/null
if [ "$lint" -ne 0 ] || [ "$stack" -ne 0 ] || [ "$rest" -ne 0 ]; then
    echo "[ERROR] make test failed: lint exit $lint, lane stack (unit + session stack) exit $stack," \
        "lane rest exit $rest" >&2
    exit 1
fi
