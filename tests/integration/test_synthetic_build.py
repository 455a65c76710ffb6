"""Building the synthetic model from several launchers at once (REPLICAS=N starts N engines on a fresh checkout)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from core.settings import PROJECT_ROOT
from engine.synthetic import MARKER

pytestmark = pytest.mark.integration

ENGINE_PY = PROJECT_ROOT / ".venvs" / "engine" / "bin" / "python"
CORPUS = PROJECT_ROOT / "loadgen" / "workloads" / "data" / "prompts_zh.jsonl"


def test_two_builds_at_once_make_one_model(tmp_path: Path) -> None:
    """Two builders of one model: one builds, the other waits and finds it built; both succeed, one whole model."""
    out = tmp_path / "models" / "tiny"
    argv = [str(ENGINE_PY), "-m", "engine.synthetic", "--variant", "tiny", "--out", str(out), "--corpus", str(CORPUS)]
    procs = [subprocess.Popen(argv, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert sum("[synthetic] built tiny" in text for text in outputs) == 1, outputs
    assert sum("already built" in text for text in outputs) == 1, outputs
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    assert json.loads((out / MARKER).read_text())["variant"] == "tiny"
    assert not out.with_name("tiny.partial").exists()
