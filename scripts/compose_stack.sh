#!/usr/bin/env bash
# The compose stack from image build to teardown, on Docker Engine or Podman (docs/docker.md):
#   scripts/compose_stack.sh build   engine, base image, extra build contexts, images (layers cached between runs;
#                                    bounded by COMPOSE_BUILD_TIMEOUT_S, 2400)
#   scripts/compose_stack.sh up      build, `up -d`, wait until every service is healthy (COMPOSE_UP_TIMEOUT_S, 1200)
#   scripts/compose_stack.sh down    `down` (volumes kept), then stop the Podman API service this checkout started
#   scripts/compose_stack.sh test    smoke test: up on test ports with MODEL=synthetic:tiny and random secrets in
#                                    the containers' env_file (APP_ENV_FILE), the checks of tests/compose
#                                    (COMPOSE_TEST_TIMEOUT_S, 900), down — always, even on failure
# Base image: PYTHON_BASE when set; else the Dockerfiles' official python image when the engine has it or can pull
# it; else a local Debian bookworm image (scripts/bootstrap_base_image.sh), built once and then reused.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
py=${APP_PYTHON:-$root/.venvs/app/bin/python}
compose=("$root/scripts/compose.sh")
engine=("$root/scripts/container_engine.sh")
build_timeout_s=${COMPOSE_BUILD_TIMEOUT_S:-2400}
up_timeout_s=${COMPOSE_UP_TIMEOUT_S:-1200}
test_timeout_s=${COMPOSE_TEST_TIMEOUT_S:-900}

log() { echo "[compose] $*" >&2; }

dockerfile_default() {
    # dockerfile_default FILE NAME: the default value of `ARG NAME=...` in FILE (one source for the official image).
    sed -n "s/^ARG $2=//p" "$1" | head -n 1
}

engine_up() {
    # Starts (or finds) the engine; sets DOCKER_HOST and `cli` (podman or docker, talking to the same engine).
    DOCKER_HOST=$("${engine[@]}" start)
    export DOCKER_HOST
    local version
    case "$DOCKER_HOST" in
        unix://*) version=$(curl -fsS --unix-socket "${DOCKER_HOST#unix://}" http://engine/version) ;;
        *) version=$(curl -fsS "http://${DOCKER_HOST#tcp://}/version") ;;
    esac
    if grep -q '"Podman Engine"' <<<"$version"; then
        cli=("${engine[@]}" podman)
        kind=podman
    else
        cli=(docker)
        kind=docker
    fi
    log "engine: $kind at $DOCKER_HOST"
}

choose_base() {
    # Exports PYTHON_BASE when the official image cannot be had (see the header).
    if [ -n "${PYTHON_BASE:-}" ]; then
        return 0
    fi
    local official pull local_image
    official=$(dockerfile_default Dockerfile.ui PYTHON_BASE)
    if "${cli[@]}" image inspect "$official" >/dev/null 2>&1; then
        return 0
    fi
    # The recipe's hash in the tag: a changed bootstrap script makes a new image instead of reusing a stale one.
    local_image=localhost/llm-serve-bench/python:3.11-bookworm-$(sha256sum scripts/bootstrap_base_image.sh | cut -c1-12)
    if ! "${cli[@]}" image inspect "$local_image" >/dev/null 2>&1; then
        pull=$official
        [ "$kind" = podman ] && [[ $official != */* ]] && pull=docker.io/library/$official
        log "pulling $pull"
        if timeout "${PULL_TIMEOUT_S:-120}" "${cli[@]}" pull "$pull" >&2; then
            return 0
        fi
        log "$official cannot be pulled here: building the local stand-in $local_image (Debian bookworm)"
        ENGINE_CLI="${cli[*]}" timeout "$build_timeout_s" scripts/bootstrap_base_image.sh "$local_image"
    fi
    export PYTHON_BASE=$local_image
    log "base image: $PYTHON_BASE"
}

find_torch_wheel() {
    # The CPU torch wheel Dockerfile.vllm pins, from pip's local wheel folders (PIP_FIND_LINKS, pip config).
    local version dirs dir wheel pip_py
    version=$(grep -o 'torch==[0-9.]*+cpu' Dockerfile.vllm | head -n 1)
    version=${version#torch==}
    pip_py=$py
    [ -x "$(dirname "$py")/pip" ] || pip_py=$root/.venvs/uv/bin/python  # an environment made for uv has no pip
    dirs="${PIP_FIND_LINKS:-} $("$pip_py" -m pip config list 2>/dev/null | sed -n "s/^[^=]*find-links='\(.*\)'$/\1/p" | tr '\n' ' ')"
    for dir in $dirs; do
        dir=${dir#file://}
        for wheel in "$dir"/torch-"$version"-cp311-*.whl; do
            if [ -f "$wheel" ]; then
                echo "$wheel"
                return 0
            fi
        done
    done
    return 1
}

prepare_contexts() {
    # Fills the extra build contexts (deploy/build-extras/README.md) unless BUILD_CA_DIR / TORCH_WHEELS_DIR are set.
    local bundle wheel
    if [ -z "${BUILD_CA_DIR:-}" ]; then
        for bundle in "${PIP_CERT:-}" "${REQUESTS_CA_BUNDLE:-}" "${SSL_CERT_FILE:-}" /etc/ssl/certs/ca-certificates.crt; do
            if [ -n "$bundle" ] && [ -f "$bundle" ]; then
                mkdir -p run/build-ca
                cp "$bundle" run/build-ca/ca-certificates.crt
                export BUILD_CA_DIR=run/build-ca
                break
            fi
        done
    fi
    if [ -z "${TORCH_WHEELS_DIR:-}" ] && wheel=$(find_torch_wheel); then
        mkdir -p run/torch-wheels
        if [ ! -f "run/torch-wheels/${wheel##*/}" ]; then
            rm -f run/torch-wheels/*.whl
            ln -f "$wheel" run/torch-wheels/ 2>/dev/null || cp "$wheel" run/torch-wheels/
        fi
        export TORCH_WHEELS_DIR=run/torch-wheels
        log "torch wheel: $wheel"
    fi
}

build() {
    mkdir -p run
    engine_up
    choose_base
    prepare_contexts
    local started=$SECONDS
    if [ "$kind" = podman ]; then
        # Compose builds through BuildKit, which Podman's API lacks; Podman's builder takes the same inputs.
        "${compose[@]}" config --format json >run/compose-config.json
        timeout "$build_timeout_s" "$py" scripts/compose_build.py --engine "${cli[*]}" <run/compose-config.json
    else
        timeout "$build_timeout_s" "${compose[@]}" build
    fi
    log "images built in $((SECONDS - started)) s"
}

show_failure() {
    "${compose[@]}" ps -a >&2 || true
    "${compose[@]}" logs --no-color --tail 40 >&2 || true
}

up() {
    build
    local started=$SECONDS
    log "starting the stack (waiting up to $up_timeout_s s for every service to be healthy)"
    if ! timeout "$up_timeout_s" "${compose[@]}" up -d --no-build --wait --wait-timeout "$up_timeout_s"; then
        log "[ERROR] the stack did not become healthy"
        show_failure
        return 1
    fi
    log "stack healthy in $((SECONDS - started)) s"
    "${compose[@]}" ps
}

project_containers() {
    # Containers (running or not) of the compose project, as ids.
    local project
    project=$("${compose[@]}" config --format json | "$py" -c 'import json, sys; print(json.load(sys.stdin)["name"])')
    "${cli[@]}" ps -a -q --filter "label=com.docker.compose.project=$project"
}

leftover_processes() {
    # Processes still serving the project's containers (Podman's conmon names each container on its command line).
    local project
    project=$("${compose[@]}" config --format json | "$py" -c 'import json, sys; print(json.load(sys.stdin)["name"])')
    pgrep -a -f -- "-n $project-" || true
}

down() {
    if ! DOCKER_HOST=$("${engine[@]}" host); then
        log "no container engine runs: nothing to stop"
        "${engine[@]}" stop
        return 0
    fi
    engine_up
    local left waited=0
    "${compose[@]}" down --remove-orphans --timeout 30 || true
    left=$(project_containers)
    # conmon of a finished exec lingers for exit_command_delay (deploy/containers.conf) after its container is gone.
    while [ -z "$left" ] && [ -n "$(leftover_processes)" ] && [ $waited -lt 30 ]; do
        sleep 1
        waited=$((waited + 1))
    done
    [ -n "$left" ] || left=$(leftover_processes)
    "${engine[@]}" stop
    # The replicas' record of this project (scripts/compose.sh, python -m stack.compose_replicas): the stack is gone.
    rm -f "run/docker-compose.replicas${COMPOSE_PROJECT_NAME:+-$COMPOSE_PROJECT_NAME}.yml"
    if [ -n "$left" ]; then
        log "[ERROR] left after down: $left"
        return 1
    fi
}

test_secrets() {
    # test_secrets FILE: every secret setting with a fresh random value, as a user's .env would hold them (the
    # sidecar token excepted: the sidecar makes its own file, zero config), for the containers' env_file.
    "$py" - "$1" <<'PY'
import os, secrets, sys

values = {
    "HF_TOKEN": "hf_" + secrets.token_hex(12),
    "VLLM_API_KEY": "vk-" + secrets.token_hex(12),
    "UI_USERNAME": "tester",
    "UI_PASSWORD": "pw-" + secrets.token_hex(6),
    "UI_AUTH_SECRET": secrets.token_urlsafe(32),
    "LOCUST_WEB_PASSWORD": "lp-" + secrets.token_hex(6),
}
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
with os.fdopen(fd, "w") as fh:
    fh.writelines(f"{name}={value}\n" for name, value in values.items())
PY
}

smoke_test() {
    local offset=${TEST_PORT_OFFSET:-0} rc=0
    # Ports apart from `make up` (8xxx) and the integration tests (28xxx); its own compose project.
    # One engine (tests/compose checks the single-engine stack), whatever REPLICAS the shell or .env has.
    export REPLICAS=1 ENGINE_URLS=
    export MODEL=synthetic:tiny SERVED_MODEL_NAME=
    # No torch.compile warm-up (half of a tiny model's start on CPU), as the integration tests' engines.
    export VLLM_EXTRA_ARGS=-O0
    export VLLM_PORT=$((29100 + offset)) UI_PORT=$((29000 + offset)) SIDECAR_PORT=$((29200 + offset))
    export LOCUST_WEB_PORT=$((29089 + offset)) COMPOSE_PROJECT_NAME=llm-serve-bench-test$offset
    # Every container's env_file: test secrets instead of .env, so that the checks see each service get only its own.
    mkdir -p run
    export APP_ENV_FILE=$root/run/compose-test$offset.env
    test_secrets "$APP_ENV_FILE"
    # Compose reads .env for interpolation too (vllm's HF_TOKEN: ${HF_TOKEN:-}); the test file stands in for both.
    set -a
    # shellcheck source=/dev/null
    . "$APP_ENV_FILE"
    set +a
    trap 'down || true; rm -f "$APP_ENV_FILE"' EXIT
    trap 'exit 130' INT TERM
    up
    log "checks: tests/compose (up to $test_timeout_s s)"
    timeout "$test_timeout_s" "$py" -m pytest tests/compose -q -rs -p no:cacheprovider || rc=$?
    trap - EXIT
    if ! down && [ "$rc" -eq 0 ]; then
        rc=1
    fi
    rm -f "$APP_ENV_FILE"
    if [ "$rc" -ne 0 ]; then
        log "[ERROR] compose smoke test failed (exit $rc)"
        return "$rc"
    fi
    log "compose smoke test passed; nothing left running"
}

case "${1:-}" in
    build) build ;;
    up) up ;;
    down) down ;;
    test) smoke_test ;;
    *) echo "usage: $0 build|up|down|test" >&2; exit 2 ;;
esac
