"""The sidecar's series and A/B comparison endpoints in-process (FastAPI TestClient, real reports, no sockets)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import jsonschema
from fastapi.testclient import TestClient

from core.enginestate import EngineState, write_engine_state
from core.settings import PROJECT_ROOT
from core.stats import run_metrics
from sidecar.reports.rows_link import read_run_rows
from tests.unit.sidecar.test_sidecar_app import RUNS_DIRS, body, client_for, make_settings  # noqa: F401 (client_for is a fixture)


def post_run(client: TestClient, concurrency: int, e2e_ms: float, slo: dict[str, float] | None = None) -> str:
    """Build one report through POST /reports; its id."""
    request = body(concurrency=concurrency, e2e_ms=e2e_ms)
    request["config"]["slo"] = slo or {}
    rows = read_run_rows(RUNS_DIRS[-1], request["run_id"]).records
    request["metrics"] = run_metrics(rows, slo).model_dump(mode="json")
    answer = client.post("/reports", json=request)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["report"]["report_id"])


def series_body(points: list[tuple[str, int, list[str]]], slo: dict[str, float] | None = None) -> dict[str, object]:
    config = body()["config"]
    config["slo"] = slo or {}
    return {
        "config": config,
        "sweep": "concurrency:1,4,16",
        "repeat": 2,
        "points": [
            {"label": label, "kind": "concurrency", "concurrency": users, "report_ids": ids}
            for label, users, ids in points
        ],
    }


def schema_of(name: str) -> dict[str, object]:
    schema = json.loads((PROJECT_ROOT / "reports" / "schema.json").read_text())
    return {"$ref": f"#/$defs/{name}", "$defs": schema["$defs"]}


def test_sweep_series_report_has_intervals_knee_and_curves(client_for: Callable[..., TestClient],  # noqa: F811
                                                           tmp_path: Path) -> None:
    """POST /series over real reports: per-point means with intervals, the knee at the highest point meeting the
    SLO, JSON valid against the committed schema, and a self-contained HTML with both plots."""
    client = client_for()
    points = []
    for users in (1, 4, 16):
        # TTFT of the rows is 20 + i ms (i < 12): every row meets 40 ms; at 16 users the runs use 1 ms (none meets)
        ids = [post_run(client, users, 100.0 * users, {"ttft_ms": 40.0 if users < 16 else 1.0}) for _ in range(2)]
        points.append((f"concurrency {users}", users, ids))
    answer = client.post("/series", json=series_body(points, {"ttft_ms": 40.0}))
    assert answer.status_code == 200, answer.text
    series = answer.json()["series"]
    jsonschema.validate(series, schema_of("SeriesReport"))
    assert [p["meets_slo"] for p in series["points"]] == [True, True, False]
    assert series["knee"]["index"] == 1 and series["knee"]["label"] == "concurrency 4"
    assert [len(p["report_ids"]) for p in series["points"]] == [2, 2, 2]
    e2e = series["points"][2]["metrics"]["e2e_p50_ms"]
    assert e2e["n"] == 2 and e2e["low"] is not None
    path = Path(answer.json()["series_path"])
    assert path.parent == tmp_path / "reports" and path.name.startswith("benchmark_series_")
    page = (path.parent / series["html_file"]).read_text()
    assert page.count("data:image/png;base64,") == 2 and "Knee (SLO" in page
    assert client.get(f"/series/{series['series_id']}").json()["series_id"] == series["series_id"]
    assert client.get("/series").json()[0]["knee"] == series["knee"]["line"]


def test_series_of_an_unknown_report_is_404(client_for: Callable[..., TestClient]) -> None:  # noqa: F811
    """A point naming a report that does not exist is refused with the id."""
    client = client_for()
    answer = client.post("/series", json=series_body([("c1", 1, ["benchmark_report_20200101_000000"])]))
    assert answer.status_code == 404 and "benchmark_report_20200101_000000" in answer.text


def test_compare_lists_the_differing_vllm_flag_first_and_overlays_curves(
    client_for: Callable[..., TestClient], tmp_path: Path  # noqa: F811
) -> None:
    """Two runs whose vLLM differs in --max-num-seqs: the comparison names that flag first, pairs the points and
    writes a page with both curves; references may be baseline names; the /compare page renders it on demand."""
    settings = make_settings(tmp_path)
    client = client_for(settings=settings)
    argv = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--port", "1", "--dtype", "bfloat16"]

    def engine(extra: list[str]) -> None:
        write_engine_state(settings.engine_state_file, EngineState(requested="m", source="local_dir", model_arg="m",
                                                                   served_name="m", argv=argv + extra))

    engine([])
    a = post_run(client, 4, 100.0)
    engine(["--max-num-seqs", "4"])
    b = post_run(client, 4, 300.0)
    assert client.put("/baselines/before", json={"report_id": a}).status_code == 200
    answer = client.post("/compare", json={"a": "before", "b": b})
    assert answer.status_code == 200, answer.text
    comparison = answer.json()["comparison"]
    jsonschema.validate(comparison, schema_of("ABComparison"))
    first = comparison["differences"][0]
    assert (first["group"], first["field"], first["a"], first["b"]) == ("vLLM flags", "--max-num-seqs", None, "4")
    assert comparison["points"][0]["changes"]["e2e_p50_ms"]["change_pct"] > 100
    page = (tmp_path / "reports" / comparison["html_file"]).read_text()
    assert "--max-num-seqs" in page and page.count("data:image/png;base64,") >= 1
    live = client.get("/compare", params={"a": a, "b": b})
    assert live.status_code == 200 and "--max-num-seqs" in live.text
    form = client.get("/compare")
    assert form.status_code == 200 and a in form.text and "before" in form.text
    assert client.post("/compare", json={"a": "nope", "b": b}).status_code == 404


def test_series_baseline_is_marked_and_later_series_compare_with_it(
    client_for: Callable[..., TestClient],  # noqa: F811
) -> None:
    """A series marked as a baseline is the reference of the next series of the same point (vs_<name>)."""
    client = client_for()
    first = client.post("/series", json=series_body([("c4", 4, [post_run(client, 4, 100.0) for _ in range(2)])]))
    series_id = first.json()["series"]["series_id"]
    assert client.put(f"/series/{series_id}/baseline/v1").status_code == 200
    assert client.get("/baselines").json() == {"v1": series_id}
    second = client.post("/series", json=series_body([("c4", 4, [post_run(client, 4, 100.0) for _ in range(2)])]))
    comparison = second.json()["series"]["comparison"]
    assert comparison["vs_v1"]["against"] == series_id and comparison["vs_v1"]["points"]
    assert comparison["vs_previous"]["against"] == series_id
    assert client.put("/series/benchmark_series_20200101_000000/baseline/v2").status_code == 404
    assert client.put(f"/series/{series_id}/baseline/previous").status_code == 400


def test_an_interrupted_series_is_no_baseline(client_for: Callable[..., TestClient]) -> None:  # noqa: F811
    """A series stopped by Ctrl-C (its later points missing) is refused as a baseline with the reason, as an
    interrupted run is; the name is not set."""
    client = client_for()
    stopped = series_body([("c4", 4, [post_run(client, 4, 100.0) for _ in range(2)])])
    stopped["interrupted"] = True
    series_id = client.post("/series", json=stopped).json()["series"]["series_id"]
    answer = client.put(f"/series/{series_id}/baseline/v1")
    assert answer.status_code == 400 and "was interrupted (Ctrl-C)" in answer.text, answer.text
    assert client.get("/baselines").json() == {}


def test_repeats_whose_prefix_cache_warmed_say_so() -> None:
    """REPEAT=2 on a cold engine: the second run found the first's prompts cached (0 % then 81 %, 0.30 then 0.49
    req/s) and the point's interval read as noise; the series notes the spread per point and what to do."""
    from core.intervals import interval
    from core.series_stats import SeriesPoint, prefix_cache_spread_notes

    def point(rates: list[float]) -> SeriesPoint:
        cache = interval(rates)
        assert cache is not None
        return SeriesPoint(label="concurrency 2", kind="concurrency", metrics={"prefix_cache_hit_rate_percent": cache})

    (note,) = prefix_cache_spread_notes([point([0.0, 81.4]), point([70.0, 80.0])])
    assert note.startswith("point concurrency 2: vLLM's prefix cache served 0% to 81% of the prompt tokens")
    assert "restart vLLM between runs" in note
