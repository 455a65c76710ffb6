"""Energy sampled by the sidecar and reported: fake NVML cards (one with the total-energy counter, one with power
only) and a fake RAPL tree give exact joules and J per output token; without either the report says why."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.api import BuildReportRequest
from core.records import RequestRecord
from core.report_schema import BenchmarkConfig, Report
from core.stats import run_metrics
from sidecar.reports.store import ReportStore
from sidecar.reports.writer import ReportService
from sidecar.sampling.enginemetrics import EngineGauges
from sidecar.sampling.gpu import NvmlReader
from sidecar.sampling.rapl import HostEnergyReader, open_host_energy_reader
from sidecar.sampling.resources import Sample, busy_reason, window_energy
from sidecar.sampling.sampler import Sampler
from tests.fakes import FakeNvml, FakeRapl
from tests.unit.sidecar.test_sidecar_app import make_settings, write_run

T0 = 1_700_000_000.0  # Unix s (2023): the report body refuses times before 2000, the sidecar ones in the future
IDLE_TICKS = (996.0, 998.0, 1003.0, 1008.0)  # before the warm-up request sent at 1008
RUN_TICKS = (1009.0, 1010.0, 1015.0, 1020.0)  # the measured rows run from 1010 to 1020
BUILD_TICK = 1022.0  # the sample the sidecar takes when it builds the report


class Clock:
    """A settable clock (Unix s) for the sampler."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


RUN_ID = "20260101_101000"


def run_rows(start: float = 1010.0) -> list[RequestRecord]:
    """A warm-up request at 1008, then 10 measured requests of 1 s each from ``start`` (10 s), 100 output and 50
    prompt tokens each."""
    warmup = RequestRecord(request_id="w", phase="warmup", started_at=T0 + 1008.0, ok=True, e2e_ms=500.0,
                           output_tokens=5)  # fmt: skip
    return [warmup] + [
        RequestRecord(request_id=f"r{i}", started_at=T0 + start + i, ok=True, ttft_ms=50.0, e2e_ms=1000.0,
                      output_tokens=100, prompt_tokens=50, content_chunks=100)
        for i in range(10)
    ]


def request(price: str | None = None, usd_per_kwh: float | None = None) -> BuildReportRequest:
    rows = run_rows()
    config = BenchmarkConfig(concurrency=1, requests=10, warmup_requests=1, max_tokens=100, temperature=0.0,
                             dataset="d", seed=0, vllm_url="http://vllm.invalid:8100", model="m",
                             price_per_hour=price, energy_price_per_kwh=usd_per_kwh)  # fmt: skip
    return BuildReportRequest(config=config, run_id=RUN_ID, metrics=run_metrics(rows), window_start=T0 + 1009.0,
                              window_end=T0 + 1021.0)  # fmt: skip


def report_of(tmp_path: Path, sampler: Sampler, reader: NvmlReader | None, body: BuildReportRequest) -> Report:
    settings = make_settings(tmp_path)
    write_run(run_rows(), settings.logs_dir / "runs", RUN_ID)
    service = ReportService(settings, sampler, reader, None if reader else "NVML unavailable: no driver",
                            ReportStore(settings.reports_dir), lambda url: {"version": "0.32.0"})  # fmt: skip
    return service.build_and_write(body).report


def nvml_sampler() -> tuple[Sampler, NvmlReader, FakeNvml, Clock]:
    """A card with the energy counter (an H100) and one without (a Pascal P4), sampled on a settable clock."""
    fake = FakeNvml(names=["NVIDIA H100", "Tesla P4"], used_bytes=[1024**3], energy_mj=[0, None])
    clock = Clock()
    reader = NvmlReader(fake)
    names = reader.info().name_by_index()
    return Sampler(reader, lambda: None, interval_s=0.5, clock=clock, gpu_names=names), reader, fake, clock


def drive_nvml(fake: FakeNvml, clock: Clock, sampler: Sampler, ticks: tuple[float, ...]) -> None:
    """GPU 0 (counter): 50 W until 1008, then 300 W. GPU 1 (power only): 40 W until 1008, then 200 W."""
    for t in ticks:
        clock.now = T0 + t
        joules = 50.0 * (min(t, 1008.0) - 996.0) + 300.0 * max(0.0, t - 1008.0)
        fake.energy_mj = [round(joules * 1000), None]
        fake.power_mw = [0, 40_000 if t <= 1008.0 else 200_000]
        sampler.sample_once()


def test_a_counter_card_and_a_power_only_card_give_exact_joules_and_j_per_token(tmp_path: Path) -> None:
    """Over the measured 10 s: GPU 0's counter rises 3000 J, GPU 1's 200 W samples integrate to 2000 J: 5000 J,
    500 W, 5 J per output token (1000 tokens), 500 J per request, 0.2 tokens per J; idle before the warm-up 50 + 40
    W, shown apart with the 4100 J the load added; each device says how it was measured."""
    sampler, reader, fake, clock = nvml_sampler()
    drive_nvml(fake, clock, sampler, IDLE_TICKS + RUN_TICKS)
    clock.now = T0 + BUILD_TICK
    fake.energy_mj = [round((50.0 * 12 + 300.0 * (BUILD_TICK - 1008.0)) * 1000), None]
    report = report_of(tmp_path, sampler, reader, request())
    energy, m = report.resources.energy, report.metrics
    assert energy is not None and energy.method == "mixed" and energy.sample_interval_s == 0.5
    assert [(d.device, d.method, d.energy_j, d.idle_power_w) for d in energy.devices] == [
        ("GPU 0 NVIDIA H100", "nvml_energy_counter", pytest.approx(3000.0), pytest.approx(50.0)),
        ("GPU 1 Tesla P4", "nvml_power_samples", pytest.approx(2000.0), pytest.approx(40.0)),
    ]
    assert energy.window_s == pytest.approx(10.0) and energy.energy_above_idle_j == pytest.approx(4100.0)
    assert m.energy_j == pytest.approx(5000.0) and m.power_w_mean == pytest.approx(500.0)
    assert m.idle_power_w == pytest.approx(90.0) and m.output_tokens_total == 1000
    assert m.energy_j_per_output_token == pytest.approx(5.0) and m.energy_j_per_request == pytest.approx(500.0)
    assert m.output_tokens_per_j == pytest.approx(0.2)
    markdown = (tmp_path / "reports" / f"{report.report_id}.md").read_text()
    assert "| Energy per output token / per request | 5 J / 500 J (0.2 output tokens per J) |" in markdown
    assert "| Idle power before the run | 90 W over the 10 s before the run; the run added 4,100 J above it |" in (
        markdown)


def test_prices_give_exact_costs_and_none_without(tmp_path: Path) -> None:
    """PRICE_PER_HOUR=3.6/gpu on the two GPUs for the 10 s window is 0.02 USD: 20 USD per million output tokens and
    20/1.5 per million total; 5 J/token at 0.36 USD/kWh is 0.5 USD per million output tokens. Unset: no cost."""
    sampler, reader, fake, clock = nvml_sampler()
    drive_nvml(fake, clock, sampler, IDLE_TICKS + RUN_TICKS)
    clock.now = T0 + BUILD_TICK
    priced = report_of(tmp_path / "a", sampler, reader, request("3.6/gpu", 0.36))
    m = priced.metrics
    assert priced.cost is not None and (priced.cost.units, priced.cost.hourly_usd) == (2, 7.2)
    assert m.cost_usd_per_1m_output_tokens == pytest.approx(7.2 * 10 / 3600 / 1000 * 1e6)
    assert m.cost_usd_per_1m_total_tokens == pytest.approx(7.2 * 10 / 3600 / 1500 * 1e6)
    assert m.energy_cost_usd_per_1m_output_tokens == pytest.approx(0.5)
    plain = report_of(tmp_path / "b", sampler, reader, request())
    assert plain.cost is None and plain.metrics.cost_usd_per_1m_output_tokens is None
    assert "Cost" not in (tmp_path / "b" / "reports" / f"{plain.report_id}.md").read_text()


RAPL_ZONES = {
    "intel-rapl:0": ("package-0", 1_000_000_000),  # wraps at 1000 J
    "intel-rapl:0:0": ("core", 1_000_000_000),  # inside the package: not counted again
    "intel-rapl:0:1": ("dram", 65_000_000_000),
    "intel-rapl:1": ("psys", 1_000_000_000),  # the whole SoC, packages included: not counted beside them
}


def test_a_rapl_tree_gives_exact_joules_across_a_wrap(tmp_path: Path) -> None:
    """Package 20 W idle then 100 W (its counter wrapping at 1000 J mid-run), DRAM 5 W: the run's 10 s are 1050 J,
    1.05 J per output token; idle 25 W; core and psys are not counted."""
    rapl = FakeRapl(tmp_path / "sys", RAPL_ZONES)
    (rapl.powercap / "intel-rapl-mmio:0").mkdir()  # the MMIO copy of the package counter is skipped too
    clock = Clock()
    sampler = Sampler(None, lambda: None, interval_s=0.5, clock=clock,
                      host_energy=HostEnergyReader(rapl.powercap, rapl.hwmon))  # fmt: skip
    for t in (*IDLE_TICKS, *RUN_TICKS, BUILD_TICK):
        clock.now = T0 + t
        package_j = 700.0 + 20.0 * (min(t, 1008.0) - 996.0) + 100.0 * max(0.0, t - 1008.0)
        rapl.set("intel-rapl:0", round(package_j * 1e6) % 1_000_000_000)
        rapl.set("intel-rapl:0:1", round(5.0 * (t - 996.0) * 1e6))
        rapl.set("intel-rapl:0:0", 123)
        rapl.set("intel-rapl:1", 456)
        sampler.sample_once()
    report = report_of(tmp_path, sampler, None, request())
    energy = report.resources.energy
    assert energy is not None and energy.method == "rapl_energy_counter"
    assert [(d.device, d.energy_j) for d in energy.devices] == [
        ("package-0", pytest.approx(1000.0)), ("package-0/dram", pytest.approx(50.0))
    ]
    assert report.metrics.energy_j == pytest.approx(1050.0)
    assert report.metrics.energy_j_per_output_token == pytest.approx(1.05)
    assert report.metrics.idle_power_w == pytest.approx(25.0)


def test_amd_energy_sockets_are_read_where_there_is_no_rapl(tmp_path: Path) -> None:
    """Without powercap zones, an amd_energy hwmon device's socket counters (not its cores) are read, in µJ."""
    rapl = FakeRapl(tmp_path, {})
    rapl.amd_energy({1: ("Ecore000", 5), 17: ("Esocket0", 7_000_000), 18: ("Esocket1", 9_000_000)})
    reader = HostEnergyReader(rapl.powercap, rapl.hwmon)
    assert [z.method for z in reader.zones] == ["amd_energy_counter"] * 2
    assert reader.read() == {"Esocket0": 7_000_000, "Esocket1": 9_000_000}


def test_missing_or_unreadable_counters_are_a_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No powercap folder, no zone, or energy_uj readable by root only: no reader, and the reason says which."""
    reader, reason = open_host_energy_reader(tmp_path / "nothing", tmp_path / "nothing")
    assert reader is None and "no " + str(tmp_path / "nothing") in (reason or "")
    (tmp_path / "empty").mkdir()
    assert "no RAPL zone" in (open_host_energy_reader(tmp_path / "empty", tmp_path / "none")[1] or "")
    rapl = FakeRapl(tmp_path / "sys", {"intel-rapl:0": ("package-0", 10)})
    real_read = Path.read_text

    def root_only(path: Path, *args: object, **kwargs: object) -> str:
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied")
        return real_read(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", root_only)
    reader, reason = open_host_energy_reader(rapl.powercap, rapl.hwmon)
    assert reader is None and "permission denied" in (reason or "") and "CVE-2020-8694" in (reason or "")


def test_without_nvml_or_readable_counters_the_report_says_why(tmp_path: Path) -> None:
    """On a host like this one (no GPU; RAPL absent or root-only) the report's energy is None with the reason, in its
    gaps and its Markdown; where RAPL is readable the energy is measured instead."""
    settings = make_settings(tmp_path)
    service = ReportService.from_settings(settings, gpu=(None, "NVML unavailable: Driver Not Loaded"),
                                          server_facts=lambda url: {"version": "0.32.0"})  # fmt: skip
    body = request()
    service.sampler.sample_once()
    rows = [r.model_copy(update={"started_at": r.started_at - T0 + service.clock() - 1030.0}) for r in run_rows()]
    write_run(rows, settings.logs_dir / "runs", RUN_ID)
    now = service.clock()
    body = body.model_copy(update={"window_start": now - 21.0, "window_end": now - 9.0})
    report = service.build_and_write(body).report
    energy = report.resources.energy
    assert energy is not None
    if open_host_energy_reader()[0] is None:
        assert report.metrics.energy_j is None and "Driver Not Loaded" in (energy.unavailable_reason or "")
        assert any(g.startswith("energy not available: ") for g in report.gaps)
        markdown = (tmp_path / "reports" / f"{report.report_id}.md").read_text()
        assert "| Energy | not available: no GPU energy (NVML unavailable: Driver Not Loaded); no host energy:" in (
            markdown)


def test_an_engine_serving_before_the_run_gives_no_idle_figure() -> None:
    """Samples in the idle span with vLLM's gauges showing requests: no idle power, and why."""
    busy = EngineGauges(kv_usage_percent=5.0, running=3.0, waiting=1.0, preemptions_total=0.0)
    assert "up to 4 request(s)" in (busy_reason([Sample(t=1.0, engine=busy)]) or "")
    quiet = EngineGauges(kv_usage_percent=0.0, running=0.0, waiting=0.0, preemptions_total=0.0)
    assert busy_reason([Sample(t=1.0, engine=quiet)]) is None
    fake = FakeNvml(energy_mj=[0])
    samples = []
    for t, gauges, mj in ((0.0, busy, 0), (5.0, busy, 500_000), (10.0, quiet, 1_000_000), (20.0, quiet, 2_000_000)):
        fake.energy_mj = [mj]
        samples.append(Sample(t=t, gpus=NvmlReader(fake).read(), engine=gauges))
    stats = window_energy(lambda lo, hi: [s for s in samples if lo <= s.t <= hi], 10.0, 20.0, 10.0)
    assert stats.energy_j == pytest.approx(1000.0) and stats.idle_power_w is None
    assert "not idle" in (stats.idle_unavailable_reason or "")
