"""The host's CPU energy counters (µJ) on the CPU build; missing or unreadable ones are None plus the reason.

RAPL (``/sys/class/powercap/intel-rapl:N[:M]``, also AMD Zen): the package and DRAM zones are counted (core and uncore
lie inside a package; psys only without packages; ``intel-rapl-mmio`` repeats them); ``energy_uj`` wraps at
``max_energy_range_uj`` and is root-only since Linux 5.10 (CVE-2020-8694). Else ``amd_energy`` hwmon: the Esocket<K>
inputs, 64-bit, no wrap.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

POWERCAP = Path("/sys/class/powercap")
HWMON = Path("/sys/class/hwmon")
_ZONE_RE = re.compile(r"intel-rapl:\d+(?::\d+)?")


@dataclass(frozen=True)
class EnergyZone:
    """One counter: its name in reports, the file read (µJ), its range in µJ (None: no wrap) and its kind."""

    name: str
    path: Path
    max_range_uj: int | None
    method: str  # rapl_energy_counter or amd_energy_counter


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _int(path: Path) -> int | None:
    text = _text(path)
    return int(text) if text and text.isdigit() else None


def rapl_zones(root: Path = POWERCAP) -> list[EnergyZone]:
    """The powercap RAPL zones to count (packages and DRAM; psys only without packages), by zone path order."""
    kinds: dict[str, str] = {}
    for zone in sorted(p for p in root.glob("intel-rapl:*") if _ZONE_RE.fullmatch(p.name)):
        kinds[zone.name] = _text(zone / "name") or zone.name

    def entry(zone: str) -> EnergyZone:
        parent = zone.rsplit(":", 1)[0] if zone.count(":") == 2 else None
        name = f"{kinds.get(parent, parent)}/{kinds[zone]}" if parent else kinds[zone]  # package-1/dram
        return EnergyZone(name, root / zone / "energy_uj", _int(root / zone / "max_energy_range_uj"),
                          "rapl_energy_counter")  # fmt: skip

    packages = [entry(z) for z, kind in kinds.items() if kind.startswith("package")]
    dram = [entry(z) for z, kind in kinds.items() if kind == "dram"]
    psys = [entry(z) for z, kind in kinds.items() if kind == "psys"]
    return [*packages, *dram] if packages else psys


def amd_energy_zones(root: Path = HWMON) -> list[EnergyZone]:
    """The sockets of every ``amd_energy`` hwmon device."""
    zones = []
    for device in sorted(root.glob("hwmon*")):
        if _text(device / "name") != "amd_energy":
            continue
        for label in sorted(device.glob("energy*_label")):
            text = _text(label)
            if text and text.startswith("Esocket"):
                source = label.with_name(label.name.replace("_label", "_input"))
                zones.append(EnergyZone(text, source, None, "amd_energy_counter"))
    return zones


class HostEnergyReader:
    """Reads the counters of :func:`rapl_zones` (else :func:`amd_energy_zones`) once per call. Raises RuntimeError: at
    construction, when there is no counter or one cannot be read; the message is the reason shown in reports."""

    def __init__(self, powercap: Path = POWERCAP, hwmon: Path = HWMON) -> None:
        zones = (rapl_zones(powercap) if powercap.is_dir() else []) or amd_energy_zones(hwmon)
        if not zones:
            if not powercap.is_dir():
                raise RuntimeError(
                    f"no {powercap} (no RAPL driver in this kernel, or /sys not mounted here) and no amd_energy hwmon"
                )
            raise RuntimeError(f"no RAPL zone under {powercap} (the intel_rapl driver is not loaded) and no "
                               "amd_energy hwmon")  # fmt: skip
        for zone in zones:
            try:
                zone.path.read_text(encoding="ascii")
            except PermissionError:
                raise RuntimeError(
                    f"permission denied reading {zone.path} (root only since Linux 5.10, CVE-2020-8694): run the "
                    "sidecar as root, or make it readable (chmod o+r, a udev rule)"
                ) from None
            except OSError as exc:
                raise RuntimeError(f"cannot read {zone.path}: {exc.strerror or exc}") from None
        self.zones = zones

    def read(self) -> dict[str, int]:
        """Each zone's counter now, µJ (a zone that fails this time is left out)."""
        values = {zone.name: _int(zone.path) for zone in self.zones}
        return {name: value for name, value in values.items() if value is not None}


def open_host_energy_reader(
    powercap: Path = POWERCAP, hwmon: Path = HWMON
) -> tuple[HostEnergyReader | None, str | None]:
    """A reader of the host's energy counters, or ``(None, reason)`` (never raises)."""
    try:
        return HostEnergyReader(powercap, hwmon), None
    except RuntimeError as exc:
        return None, str(exc)
