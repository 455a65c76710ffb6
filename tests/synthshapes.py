"""One generated vLLM log in every shape the analyzer reads: coloured, behind Docker or CRI stamps (also split in
CRI partial parts), without process prefixes, CRLF line ends, rotated in two. Test data, not product code.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path


def write_shapes(log: Path) -> dict[str, Path]:
    """The log as two deployments write it: vLLM's colours on (cyan prefix, coloured level, grey stamp and source)
    and Docker's ``logs -t`` stamp in front of every line."""
    header = re.compile(
        rb"^(\([^()]*pid=\d+\) )?(DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d) (\[[^\]]*\])"
    )
    colours = {b"INFO": b"\x1b[32m", b"WARNING": b"\x1b[33m", b"ERROR": b"\x1b[31m", b"DEBUG": b"\x1b[37m"}

    def coloured(match: re.Match[bytes]) -> bytes:
        prefix = b"\x1b[0;36m" + match[1][:-1] + b"\x1b[0;0m " if match[1] else b""
        level = colours.get(match[2], b"\x1b[35m") + match[2] + b"\x1b[0m"
        return prefix + level + b" \x1b[90m" + match[3] + b"\x1b[0m \x1b[90m" + match[4] + b"\x1b[0m"

    paths = {"colours": log.with_name("vllm_colour.log"), "docker -t": log.with_name("vllm_docker.log")}
    with log.open("rb") as src, paths["colours"].open("wb") as colour, paths["docker -t"].open("wb") as docker:
        for number, line in enumerate(src):
            colour.write(header.sub(coloured, line))
            docker.write(b"2026-11-20T00:00:00.%09dZ " % number + line)
    return paths


_PREFIX = re.compile(rb"^\([^()]*pid=\d+\) ")


def write_current_shapes(log: Path) -> dict[str, list[Path]]:
    """Every shape the analyzer reads, made from one log in today's shape (``(APIServer pid=N)`` on every line):
    without prefixes, coloured, behind Docker and CRI stamps (also with the ERROR lines split in CRI partial parts),
    CRLF line ends, rotated in two; the files of each (a rotated log is two files, ``vllm.log.1`` then ``vllm.log``; the analyzer is given the last)."""
    folder = log.parent
    shapes = {
        "prefixes": [log],
        "plain": [folder / "plain.log"],
        "colours": [folder / "colour.log"],
        "docker -t": [folder / "docker.log"],
        "CRI": [folder / "cri.log"],
        "CRI split": [folder / "cri_split.log"],
        "CRLF": [folder / "crlf.log"],
        "rotated": [folder / "rotated" / "vllm.log.1", folder / "rotated" / "vllm.log"],
    }
    shapes["rotated"][0].parent.mkdir()
    data = log.read_bytes()
    lines = data.splitlines(keepends=True)
    shapes["plain"][0].write_bytes(b"".join(_PREFIX.sub(b"", line) for line in lines))
    shapes["docker -t"][0].write_bytes(b"".join(b"2026-11-20T00:00:00.%09dZ " % n + x for n, x in enumerate(lines)))
    cri = b"".join(b"2026-11-20T00:00:00.%09d+00:00 stdout F " % n + x for n, x in enumerate(lines))
    shapes["CRI"][0].write_bytes(cri)
    split = []  # containerd splits long lines into partial (P) parts; here every ERROR line, after 30 bytes
    for n, line in enumerate(lines):
        stamp = b"2026-11-20T00:00:00.%09d+00:00 stderr " % n
        if b"ERROR" in line and len(line) > 40:
            split += [stamp + b"P " + line[:30] + b"\n", stamp + b"F " + line[30:]]
        else:
            split.append(stamp + b"F " + line)
    shapes["CRI split"][0].write_bytes(b"".join(split))
    shapes["CRLF"][0].write_bytes(data.replace(b"\n", b"\r\n"))
    half = len(lines) // 2
    shapes["rotated"][0].write_bytes(b"".join(lines[:half]))
    shapes["rotated"][1].write_bytes(b"".join(lines[half:]))
    shutil.copyfile(write_shapes(log)["colours"], shapes["colours"][0])
    return shapes
