#!/usr/bin/env bash
# The container engine behind the compose targets: Docker Engine when one answers, else Podman serving the Docker
# API on a socket of this checkout (run/podman.sock), configured by deploy/containers.conf (through CONTAINERS_CONF;
# nothing under /etc changes). Compose itself is the same binary either way (scripts/compose.sh).
#   scripts/container_engine.sh install   install Podman and its helpers from Debian's packages (once; apt-get)
#   scripts/container_engine.sh start     start the engine if none answers; prints the DOCKER_HOST to use
#   scripts/container_engine.sh host      prints the DOCKER_HOST of an engine that answers now (exit 1: none)
#   scripts/container_engine.sh stop      stop the Podman API service that `start` started (Docker is left alone)
# Podman runs healthchecks from systemd timers; where systemd does not run (containers, many CI machines) nothing
# would ever run them, and `depends_on: {condition: service_healthy}` would wait for ever. So beside the API service
# `start` runs a ticker (`health-ticker`) that runs the containers' healthchecks every HEALTH_TICK_S (10) seconds.
#   scripts/container_engine.sh podman ARGS...   run podman with the project's settings
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
run_dir=$root/run
sock=$run_dir/podman.sock
pid_file=$run_dir/podman-service.pid
service_log=$run_dir/podman-service.log
ticker_pid_file=$run_dir/podman-health.pid
export CONTAINERS_CONF=$root/deploy/containers.conf
# runc: crun cannot handle hybrid cgroups; netavark + aardvark-dns: service names resolve on compose networks;
# iptables: netavark's network set-up; catatonit: `init: true`; debootstrap: scripts/bootstrap_base_image.sh;
# curl: the API checks below; procps: pgrep (scripts/compose_stack.sh looks for leftovers).
PACKAGES=(podman runc netavark aardvark-dns iptables catatonit debootstrap curl procps)

log() { echo "[engine] $*" >&2; }

answers() {
    # answers HOST: true when a Docker API (Docker Engine or Podman) answers /_ping at unix://PATH or tcp://HOST:PORT.
    local host=$1
    case "$host" in
        unix://*) curl -fsS --max-time 5 --unix-socket "${host#unix://}" http://engine/_ping >/dev/null 2>&1 ;;
        tcp://*) curl -fsS --max-time 5 "http://${host#tcp://}/_ping" >/dev/null 2>&1 ;;
        *) return 1 ;;
    esac
}

current_host() {
    # The DOCKER_HOST of an engine that answers now: $DOCKER_HOST, Docker's default socket, then our Podman socket.
    local host
    for host in "${DOCKER_HOST:-}" unix:///var/run/docker.sock "unix://$sock"; do
        if [ -n "$host" ] && answers "$host"; then
            echo "$host"
            return 0
        fi
    done
    return 1
}

install() {
    local tool missing=()
    for tool in podman runc /usr/lib/podman/netavark /usr/lib/podman/aardvark-dns catatonit iptables debootstrap curl pgrep; do
        command -v "$tool" >/dev/null || missing+=("$tool")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        return 0
    fi
    if ! command -v apt-get >/dev/null; then
        log "[ERROR] no Docker Engine answers and apt-get is missing: install Docker or Podman (${PACKAGES[*]})"
        exit 2
    fi
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { log "[ERROR] need root or sudo to install ${PACKAGES[*]}"; exit 2; }
        sudo=(sudo)
    fi
    log "${missing[*]} missing: installing ${PACKAGES[*]} (apt-get, first time only)"
    export DEBIAN_FRONTEND=noninteractive
    if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null \
        || ! "${sudo[@]}" apt-get install -y --no-install-recommends "${PACKAGES[@]}" >&2; then
        "${sudo[@]}" apt-get update >&2
        "${sudo[@]}" apt-get install -y --no-install-recommends "${PACKAGES[@]}" >&2
    fi
}

running() {
    # running PID_FILE PATTERN: prints the pid in PID_FILE when that process still runs a command matching PATTERN.
    local pid
    pid=$(cat "$1" 2>/dev/null) || return 1
    [ -n "$pid" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$2" && echo "$pid"
}

service_pid() { running "$pid_file" "podman system service"; }

ticker_pid() { running "$ticker_pid_file" "container_engine.sh health-ticker"; }

health_ticker() {
    # Runs the healthcheck of every running container that has one, every HEALTH_TICK_S seconds, while the API
    # service runs (what systemd's timers do for Podman elsewhere).
    # On TERM (stop) bash first lets a running `podman healthcheck run` finish (no container lock left held), then
    # ends the pending sleep too.
    local tick=${HEALTH_TICK_S:-10} id sleeper=
    trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
    while service_pid >/dev/null; do
        for id in $(podman ps -q --filter health=starting) $(podman ps -q --filter health=healthy) \
            $(podman ps -q --filter health=unhealthy); do
            podman healthcheck run "$id" >/dev/null 2>&1 || true
        done
        sleep "$tick" &
        sleeper=$!
        wait "$sleeper" || true
    done
}

start_ticker() {
    setsid "$0" health-ticker >>"$service_log" 2>&1 </dev/null &
    echo $! >"$ticker_pid_file"
}

start() {
    local host
    if host=$(current_host); then
        if [ "$host" = "unix://$sock" ] && ! ticker_pid >/dev/null; then
            start_ticker
        fi
        echo "$host"
        return 0
    fi
    install
    if [ "$(id -u)" -ne 0 ]; then
        # Rootless Podman needs subuid ranges and user cgroups; the project's settings are made for rootful use.
        log "[ERROR] no Docker Engine answers; run the compose targets as root (Podman, rootful) or start Docker"
        exit 2
    fi
    mkdir -p "$run_dir"
    rm -f "$sock"
    # Podman keeps containers and volumes on disk but their locks in shared memory, which a reboot or a new machine
    # with the same disk empties: a new container then gets a lock a kept volume holds ("… share lock ID 0: deadlock
    # due to lock mismatch", seen here with the compose test's cache volumes). Renumbering re-allocates every lock; it
    # is only safe with no container running, so it runs only then.
    if [ -z "$(podman ps -q 2>/dev/null)" ] && ! podman system renumber >>"$service_log" 2>&1; then
        log "[WARN] podman system renumber failed (its output: $service_log)"
    fi
    log "starting Podman's Docker-compatible API on unix://$sock (settings: deploy/containers.conf)"
    # setsid: the service outlives this shell (make runs each target in its own); `stop` ends it by its pid.
    setsid podman system service --time=0 "unix://$sock" >"$service_log" 2>&1 </dev/null &
    local pid=$! waited=0
    echo "$pid" >"$pid_file"
    # kill -0, not service_pid: until the forked shell has exec'd podman, its command line is still this script's.
    until answers "unix://$sock"; do
        if ! kill -0 "$pid" 2>/dev/null || [ $waited -ge 60 ]; then
            log "[ERROR] Podman's API service did not start; its log ($service_log):"
            tail -n 20 "$service_log" >&2
            exit 1
        fi
        sleep 1
        waited=$((waited + 1))
    done
    start_ticker
    echo "unix://$sock"
}

end() {
    # end PID: TERM, up to 15 s of grace, then KILL to its process group (setsid made PID the leader).
    local pid=$1
    kill "$pid" 2>/dev/null || return 0
    for _ in $(seq 30); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.5
    done
    kill -9 -- "-$pid" 2>/dev/null || kill -9 "$pid" 2>/dev/null || true
}

stop() {
    local pid
    if pid=$(ticker_pid); then
        end "$pid"
    fi
    if pid=$(service_pid); then
        end "$pid"
        log "stopped Podman's API service (pid $pid)"
    fi
    rm -f "$pid_file" "$ticker_pid_file" "$sock"
}

case "${1:-}" in
    install) install ;;
    start) start ;;
    host) current_host ;;
    stop) stop ;;
    health-ticker) health_ticker ;;
    podman) shift; exec podman "$@" ;;
    *) echo "usage: $0 install|start|host|stop|podman ARGS..." >&2; exit 2 ;;
esac
