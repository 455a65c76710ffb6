"""Settings fields of the stack's folders, and the files in them (a group of :class:`core.settings.Settings`).

A plain pydantic model: the environment and ``.env`` are read by the settings object, which inherits these fields.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field

from core.knobs import Knobs
from core.slots import active_slot, slot_suffix

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent


class FolderKnobs(Knobs):
    """Where logs, reports, models, run files and the bundled prompts are; the files derived from them."""

    logs_dir: Path = PROJECT_ROOT / "logs"
    reports_dir: Path = PROJECT_ROOT / "reports"
    models_dir: Path = PROJECT_ROOT / "models"
    run_dir: Path = PROJECT_ROOT / "run"
    """supervisord socket and pid (local mode)."""
    prompts_file: Path = PROJECT_ROOT / "loadgen" / "workloads" / "data" / "prompts_zh.jsonl"
    container_uid: int | None = Field(default=None, ge=0, validation_alias=AliasChoices("container_uid", "app_uid"))
    """uid the containers run as (APP_UID, compose `user:`); unset: yours, as scripts/compose.sh sets."""
    container_gid: int | None = Field(default=None, ge=0, validation_alias=AliasChoices("container_gid", "app_gid"))
    """gid (APP_GID)."""

    @property
    def engine_state_file(self) -> Path:
        """JSON written by the vLLM launcher: what model was resolved and why (read by UI and sidecar)."""
        return self.logs_dir / f"engine_state{self.replica_suffix}.json"

    @property
    def engine_request_file(self) -> Path:
        """What the next engine launch changes, written by the engine controller (one per replica and slot)."""
        return self.run_dir / f"engine_request{self.replica_suffix}.json"

    @property
    def profile_dir(self) -> Path:
        """Where vLLM's torch profiler writes Chrome traces (absolute; the sidecar copies them into reports/)."""
        return (self.logs_dir / "profile").resolve()

    @property
    def vllm_log_file(self) -> Path:
        """vLLM's own log (replica K > 0 of a router stack: ``vllm-K.log``)."""
        return self.logs_dir / f"vllm{self.replica_suffix}.log"

    @property
    def replica_suffix(self) -> str:
        """``""``, ``-K`` for local replica K, plus ``-b`` for slot b: its program and file names."""
        replica = int(getattr(self, "engine_replica", 0))
        slot = getattr(self, "engine_slot", None) or active_slot(self.run_dir, replica)
        return (f"-{replica}" if replica else "") + slot_suffix(slot)

    @property
    def requests_log_file(self) -> Path:
        """One line per chat request (UI and load tests), read by the log analyzer."""
        return self.logs_dir / "requests.jsonl"
