#!/usr/bin/env bash
# Pin the Dockerfiles' base images by digest (`make pin-images`; docs/docker.md, "Base images"):
#   scripts/pin_base_images.sh [--check] [DOCKERFILE...]     (default: Dockerfile.vllm Dockerfile.ui)
# Every `ARG <NAME>_BASE=IMAGE:TAG[@sha256:...]` gets the digest the registry serves for IMAGE:TAG now — the digest of
# the multi-architecture index when there is one, so every platform can still build — and the "# unpinned: ..." line
# above it goes. The tag stays, for people. --check changes nothing and exits 1 when a pin is missing or stale.
# Needs the registry (Docker Hub) and one of: docker buildx imagetools, skopeo, crane, regctl — each prints the raw
# manifest, whose sha256 is the digest. (`podman manifest inspect` reformats the manifest, so its hash is not the
# digest.) PIN_RESOLVER="COMMAND" replaces them: `COMMAND IMAGE:TAG` must print the raw manifest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
marker="# unpinned: run make pin-images on a host that reaches the registry"
check=false
if [ "${1:-}" = --check ]; then
    check=true
    shift
fi
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(Dockerfile.vllm Dockerfile.ui)

resolver() {
    # Sets `resolve` to a command printing the raw manifest of its argument.
    if [ -n "${PIN_RESOLVER:-}" ]; then
        read -r -a resolve <<<"$PIN_RESOLVER"
    elif command -v docker >/dev/null 2>&1 && docker buildx imagetools inspect --help >/dev/null 2>&1; then
        resolve=(docker buildx imagetools inspect --raw)
    elif command -v skopeo >/dev/null 2>&1; then
        resolve=(skopeo_raw)
    elif command -v crane >/dev/null 2>&1; then
        resolve=(crane manifest)
    elif command -v regctl >/dev/null 2>&1; then
        resolve=(regctl manifest get --format raw-body)
    else
        echo "[ERROR] no resolver: install docker buildx, skopeo, crane or regctl (or set PIN_RESOLVER)" >&2
        exit 2
    fi
}

skopeo_raw() { skopeo inspect --raw "docker://$1"; }

digest_of() {
    # digest_of IMAGE:TAG: sha256:<hex> of the raw manifest the registry serves now.
    local raw
    raw=$(mktemp)
    if ! "${resolve[@]}" "$1" >"$raw" || [ ! -s "$raw" ]; then
        rm -f "$raw"
        echo "[ERROR] cannot resolve $1 (is the registry reachable?)" >&2
        return 1
    fi
    echo "sha256:$(sha256sum "$raw" | cut -d' ' -f1)"
    rm -f "$raw"
}

resolve=()
resolver
stale=0
for file in "${files[@]}"; do
    mapfile -t args < <(grep -E '^ARG [A-Z0-9_]+_BASE=' "$file")
    for line in "${args[@]}"; do
        name=${line%%=*}
        name=${name#ARG }
        value=${line#*=}
        reference=${value%%@*}
        digest=$(digest_of "$reference") || exit 1
        pinned="$reference@$digest"
        above=$(grep -B1 -xF -- "$line" "$file" | head -n 1)
        if [ "$value" = "$pinned" ] && [ "$above" != "$marker" ]; then
            echo "[ OK ] $file $name=$pinned"
            continue
        fi
        stale=1
        if $check; then
            echo "[STALE] $file $name=$value (registry: $pinned)" >&2
            continue
        fi
        # The ARG line gets the digest; the marker line directly above it (if any) goes.
        awk -v name="$name" -v pinned="$pinned" -v marker="$marker" '
            held != "" { if (index($0, "ARG " name "=") != 1) print held; held = "" }
            $0 == marker { held = $0; next }
            index($0, "ARG " name "=") == 1 { print "ARG " name "=" pinned; next }
            { print }
            END { if (held != "") print held }
        ' "$file" >"$file.pinned"
        mv "$file.pinned" "$file"
        echo "[PIN] $file $name=$pinned"
    done
done
if $check && [ "$stale" -ne 0 ]; then
    echo "[ERROR] base images not pinned to the registry's current digests: run make pin-images" >&2
    exit 1
fi
