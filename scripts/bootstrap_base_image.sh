#!/usr/bin/env bash
# Makes a local stand-in for the official Python base image where Docker Hub cannot be reached: a Debian bookworm
# root filesystem (debootstrap --variant=minbase, Debian's own Python 3.11 with venv and pip) imported as an image.
#   scripts/bootstrap_base_image.sh IMAGE      e.g. localhost/llm-serve-bench/python:3.11-bookworm
# Idempotent: does nothing when IMAGE exists. Needs root and debootstrap (scripts/container_engine.sh install);
# talks to the engine through `docker` or `podman` (ENGINE_CLI, default: podman when installed, else docker).
# The Dockerfiles take it as PYTHON_BASE; what they need from the official image is there: `python`/`python3` 3.11,
# `python -m venv` with pip, Python's C headers (torch.compile builds C++ kernels against Python.h), ca-certificates,
# apt, groupadd/useradd, LANG=C.UTF-8.
set -euo pipefail
image=${1:?usage: bootstrap_base_image.sh IMAGE}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
suite=bookworm
if [ -n "${ENGINE_CLI:-}" ]; then
    read -r -a cli <<<"$ENGINE_CLI"
elif command -v podman >/dev/null; then
    cli=(podman)
else
    cli=(docker)
fi

if "${cli[@]}" image inspect "$image" >/dev/null 2>&1; then
    echo "[base] $image already present"
    exit 0
fi
command -v debootstrap >/dev/null || { echo "[ERROR] debootstrap missing: scripts/container_engine.sh install" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "[ERROR] debootstrap needs root" >&2; exit 2; }

rootfs=$(mktemp -d /var/tmp/base-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
started=$SECONDS
echo "[base] debootstrap $suite (minbase + python3) from $mirror"
debootstrap --variant=minbase --include=python3,python3-venv,python3-dev,python-is-python3,ca-certificates \
    "$suite" "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || { tail -n 30 "$rootfs.log" >&2; rm -f "$rootfs.log"; exit 1; }
rm -f "$rootfs.log"
# The same package sources as the official image (updates and security too), then no package lists or caches.
cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security_mirror $suite-security main
EOF
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
    "$rootfs"/var/log/*.log "$rootfs"/tmp/*
tar --numeric-owner -C "$rootfs" -c . | "${cli[@]}" import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["python3"]' \
    --message "debootstrap --variant=minbase $suite + python3 (scripts/bootstrap_base_image.sh)" \
    - "$image" >/dev/null
echo "[base] $image built in $((SECONDS - started)) s: $("${cli[@]}" run --rm "$image" python --version)"
