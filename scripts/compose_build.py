"""Builds the compose stack's images with Podman's own builder, from the resolved compose configuration.

Compose builds through BuildKit, which Podman's Docker API lacks; `podman build` reads the same Dockerfiles,
targets, build arguments and contexts, so each service's `build` section becomes one `podman build` (Docker Engine
needs none of it).

    compose config --format json | python scripts/compose_build.py [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def build_commands(config: dict[str, Any], engine: str = "podman") -> list[list[str]]:
    """One ``ENGINE build`` argv per image that a service of ``config`` builds (services sharing an image: once);
    ``engine`` is a command line, e.g. ``scripts/container_engine.sh podman`` (the project's Podman settings)."""
    commands: dict[str, list[str]] = {}
    for name, service in sorted(config.get("services", {}).items()):
        build = service.get("build")
        if not build:
            continue
        image = service.get("image") or f"{config.get('name', 'compose')}-{name}"
        context = Path(build.get("context", "."))
        # --format docker: the OCI format drops SHELL (the Dockerfiles' bash with pipefail), as Docker would not.
        argv = [*shlex.split(engine), "build", "--format", "docker", "--layers", "--tag", image]
        argv += ["--file", str(context / build.get("dockerfile", "Dockerfile"))]
        if build.get("target"):
            argv += ["--target", build["target"]]
        for key, value in sorted((build.get("args") or {}).items()):
            if value is not None:  # an argument without a value keeps the Dockerfile's default, as in Compose
                argv += ["--build-arg", f"{key}={value}"]
        for key, value in sorted((build.get("additional_contexts") or {}).items()):
            if "://" not in value and not Path(value).is_dir():  # Buildah would take a missing folder for an image
                raise SystemExit(f"[ERROR] build context {key} of service {name}: no folder {value}")
            argv += ["--build-context", f"{key}={value}"]
        argv.append(str(context))
        if image in commands and commands[image] != argv:
            raise SystemExit(f"[ERROR] services build {image} in two different ways; give each its own image name")
        commands[image] = argv
    return list(commands.values())


def main() -> int:
    """Read the configuration from stdin and run (or with --dry-run, print) the builds, timing each one."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    parser.add_argument("--engine", default="podman", help="the builder's command line (default: podman)")
    args = parser.parse_args()
    commands = build_commands(json.load(sys.stdin), args.engine)
    for argv in commands:
        print("[build]", shlex.join(argv), flush=True)
        if args.dry_run:
            continue
        started = time.monotonic()
        if subprocess.run(argv, check=False).returncode != 0:
            print(f"[ERROR] image build failed: {shlex.join(argv)}", file=sys.stderr)
            return 1
        print(f"[build] {argv[argv.index('--tag') + 1]} in {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
