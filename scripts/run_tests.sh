#!/usr/bin/env bash
# make test: every check, in three processes side by side (docs/development.md, "How it runs"):
#   lane "stack": the integration tests on the session stack (one vLLM engine, restarted by the stack_order tests),
#                 its engines bound to the last core (VLLM_CPU_OMP_THREADS_BIND), away from vLLM's default core 0;
#   lane "rest":  the other integration tests (the mock server, other servers, stacks of their own: those first),
#                 on test ports shifted by 100 (TEST_PORT_OFFSET), so the two lanes never share a port;
#   beside both:  make lint, then the unit suite, then the compose stack for real (scripts/compose_stack.sh test,
#                 on ports 29xxx and a compose project of its own).
# One integration session kept the machine ≈ 55 % busy: it waits on vLLM's starts and on runs that go by their own
# clocks. Each part's output is printed when all have ended, then one verdict.
# Arguments go to the unit suite and both lanes (make test PYTEST_ARGS=...), not to compose-test's checks. Exit: non-zero
# when lint, a suite or compose-test failed.
# Ctrl-C reaches every part at once (each runs with SIGINT restored, which bash ignores in a script's background
# jobs): pytest tears down its stacks, compose-test its project, and the script waits for them all. SIGTERM to the
# script is passed on to each part as SIGINT, for the same clean ending.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
py=.venvs/app/bin/python
# Started with SIGINT ignored (`make test &` from a script, nohup-like launchers), bash can neither trap nor restore it,
# so neither Ctrl-C nor SIGTERM would reach the parts: run again with SIGINT at its default first.
if [ -z "${RUN_TESTS_SIGINT_DEFAULT:-}" ] && grep -Eq '^SigIgn:.*[2367abef]$' "/proc/$$/status" 2>/dev/null; then
    RUN_TESTS_SIGINT_DEFAULT=1 exec "$py" -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execv(sys.argv[1], sys.argv[1:])' /bin/bash "$0" "$@"
fi
work=$(mktemp -d)
# The clock checks (lane rest's load_sensitive modules) need the client to have the cores. Where a cgroup v1 cpu
# controller is writable (root), lane stack and the checks run in a group of their own whose CPU share those modules
# lower while they run (TEST_YIELD_CGROUP), so they go on beside lane stack; elsewhere they wait until it has ended.
cpu_root=/sys/fs/cgroup/cpu
yield_group=""
if [ -w "$cpu_root/cgroup.procs" ] && mkdir "$cpu_root/make-test-$$" 2>/dev/null; then
    yield_group=$cpu_root/make-test-$$
fi
# Where the CPU time goes: each part in a cgroup v1 cpuacct group of its own (where writable), read at the end.
acct_root=/sys/fs/cgroup/cpuacct
acct=""
if [ -w "$acct_root/cgroup.procs" ] && mkdir "$acct_root/make-test-$$" 2>/dev/null; then
    acct=$acct_root/make-test-$$
    for part in stack rest checks; do mkdir "$acct/$part"; done
fi
counted() { [ -z "$acct" ] || echo "$BASHPID" >"$acct/$1/cgroup.procs"; }  # this part's CPU time counts as $1
cpu_s() { [ -z "$acct" ] || echo $(($(cat "$acct/$1/cpuacct.usage") / 1000000000)); }  # CPU-s of part $1 so far
cleanup() {
    rm -rf "$work"
    if [ -n "$acct" ]; then
        for part in stack rest checks; do
            while read -r pid; do echo "$pid" >"$acct_root/cgroup.procs"; done <"$acct/$part/cgroup.procs" 2>/dev/null
            rmdir "$acct/$part" 2>/dev/null
        done
        rmdir "$acct" 2>/dev/null
    fi
    if [ -n "$yield_group" ]; then  # a process left over (it should not be) goes back to the root group first
        while read -r pid; do echo "$pid" >"$cpu_root/cgroup.procs"; done <"$yield_group/cgroup.procs" 2>/dev/null
        rmdir "$yield_group" 2>/dev/null
    fi
}
trap cleanup EXIT
yielding() { [ -z "$yield_group" ] || echo "$BASHPID" >"$yield_group/cgroup.procs"; }  # this part yields to the clock checks
offset=${TEST_PORT_OFFSET:-0}
integration=(-m pytest tests -q -rs --durations=15 --ignore=tests/unit --ignore=tests/compose)  # durations: to balance the lanes
(
    yielding
    counted checks
    stop=0
    trap 'stop=1' INT
    make --no-print-directory lint >"$work/lint.log" 2>&1
    echo $? >"$work/lint.rc"
    cpu_s checks >"$work/lint.cpu"
    [ "$stop" = 1 ] && exit 130
    "$py" -m pytest tests/unit -q -rs --basetemp "$work/unit" "$@" >"$work/unit.log" 2>&1
    echo $? >"$work/unit.rc"
    cpu_s checks >"$work/unit.cpu"
    [ "$stop" = 1 ] && exit 130
    scripts/compose_stack.sh test >"$work/compose.log" 2>&1
    echo $? >"$work/compose.rc"
) &
checks=$!
(
    trap - INT
    counted rest
    if [ -n "$yield_group" ]; then clock=(TEST_YIELD_CGROUP="$yield_group"); else clock=(TEST_WAIT_FOR="$work/stack.done"); fi
    exec env TEST_LANE=rest TEST_PORT_OFFSET=$((offset + 100)) "${clock[@]}" "$py" "${integration[@]}" --basetemp "$work/rest" "$@" \
        >"$work/rest.log" 2>&1
) &
rest=$!
cores=$(nproc)
bind=()
[ "$cores" -ge 2 ] && [ -z "${VLLM_CPU_OMP_THREADS_BIND:-}" ] && bind=("VLLM_CPU_OMP_THREADS_BIND=$((cores - 1))")
(
    trap - INT
    yielding
    counted stack
    exec env "${bind[@]}" TEST_LANE=stack "$py" "${integration[@]}" --basetemp "$work/stack" "$@"
) &
stack=$!
interrupted=0
trap 'interrupted=1' INT
trap 'interrupted=1; pkill -INT -P "$checks"; kill -INT "$checks" "$rest" "$stack" 2>/dev/null' TERM
ended() {  # the exit status of background part $1 once it has ended (a trapped signal interrupts bash's wait)
    local rc
    while true; do
        wait "$1"
        rc=$?
        kill -0 "$1" 2>/dev/null || return "$rc"
    done
}
ended "$stack"
stack_rc=$?
touch "$work/stack.done"  # without a cgroup, lane rest's load-sensitive tests wait for it (TEST_WAIT_FOR, conftest.py)
ended "$rest"
rest_rc=$?
ended "$checks"
lint_rc=$(cat "$work/lint.rc" 2>/dev/null || echo 1)
unit_rc=$(cat "$work/unit.rc" 2>/dev/null || echo 1)
compose_rc=$(cat "$work/compose.rc" 2>/dev/null || echo 1)
echo "---------- the other integration tests (lane rest, beside lane stack) ----------"
cat "$work/rest.log"
echo "---------- make lint (beside both lanes) ----------"
cat "$work/lint.log"
echo "---------- unit tests (beside both lanes, after lint) ----------"
cat "$work/unit.log" 2>/dev/null
echo "---------- the compose stack (make compose-test, beside both lanes, after the unit suite) ----------"
cat "$work/compose.log" 2>/dev/null
if [ -n "$acct" ]; then  # cumulative readings: lint, then lint + unit, then all three
    lint_s=$(cat "$work/lint.cpu" 2>/dev/null || echo 0)
    unit_s=$(cat "$work/unit.cpu" 2>/dev/null || echo "$lint_s")
    echo "[INFO] CPU-s by part: lane stack $(cpu_s stack), lane rest $(cpu_s rest), lint $lint_s," \
        "unit $((unit_s - lint_s)), compose-test $(($(cpu_s checks) - unit_s))"
fi
[ "$interrupted" = 0 ] || echo "[INFO] interrupted: every part was stopped and has ended" >&2
if [ "$lint_rc" -ne 0 ] || [ "$unit_rc" -ne 0 ] || [ "$stack_rc" -ne 0 ] || [ "$rest_rc" -ne 0 ] \
    || [ "$compose_rc" -ne 0 ]; then
    echo "[ERROR] make test failed: lint exit $lint_rc, unit suite exit $unit_rc, lane stack exit $stack_rc," \
        "lane rest exit $rest_rc, compose-test exit $compose_rc" >&2
    [ "$interrupted" = 0 ] || exit 130
    exit 1
fi
[ "$interrupted" = 0 ] || exit 130
