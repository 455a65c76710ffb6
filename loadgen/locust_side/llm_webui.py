"""The LLM tabs of Locust's web UI (Locust's ``examples/extend_web_ui.py``): extended tabs and tables, their rows
added to the polled ``/stats/requests``, a JSON route ``/llm-stats`` and a CSV download."""

from __future__ import annotations

import csv
import io
import json
import time
from typing import Any

from flask import Response, request
from locust.env import Environment

from loadgen.locust_side.llm_stats import LlmStats

LATENCY_TAB = "llm-latency"
THROUGHPUT_TAB = "llm-throughput"
LATENCY_COLUMNS = (("name", "Metric"), ("unit", "Unit"), ("count", "# Values"), ("median", "Median"),
                   ("p90", "90%ile"), ("p99", "99%ile"), ("avg", "Average"), ("min", "Min"), ("max", "Max"))
THROUGHPUT_COLUMNS = (("name", "Metric"), ("value", "Value"))


def template_args() -> dict[str, Any]:
    """The web UI's extra tabs and their table layouts (merged into ``environment.web_ui.template_args``)."""
    return {
        "extended_tabs": [
            {"title": "LLM latency", "key": LATENCY_TAB},
            {"title": "LLM throughput", "key": THROUGHPUT_TAB},
        ],
        "extended_tables": [
            {"key": LATENCY_TAB, "structure": [{"key": k, "title": t} for k, t in LATENCY_COLUMNS]},
            {"key": THROUGHPUT_TAB, "structure": [{"key": k, "title": t} for k, t in THROUGHPUT_COLUMNS]},
        ],
        "extended_csv_files": [{"href": "/llm-stats/csv", "title": "Download LLM statistics CSV"}],
    }


def elapsed_s(environment: Environment) -> float | None:
    """Seconds of the current test so far (to its last request once it stopped); None before any request."""
    total = environment.stats.total
    if not total.start_time or total.last_request_timestamp is None:
        return None
    running = environment.runner is not None and environment.runner.state in ("spawning", "running")
    end = time.time() if running else total.last_request_timestamp
    return max(0.0, end - total.start_time)


def install(environment: Environment, llm: LlmStats) -> None:
    """Add the LLM tabs to the web UI of ``environment`` (no-op without a web UI, e.g. headless or a worker)."""
    web_ui = environment.web_ui
    if web_ui is None or web_ui.app is None:
        return
    web_ui.template_args.update(template_args())
    app = web_ui.app

    @app.after_request
    def _add_llm_rows(response: Response) -> Response:
        if request.path != "/stats/requests" or response.json is None:
            return response
        extended = [{"key": LATENCY_TAB, "data": llm.latency_rows()},
                    {"key": THROUGHPUT_TAB, "data": llm.throughput_rows(elapsed_s(environment))}]
        response.set_data(json.dumps({**response.json, "extended_stats": extended}))
        return response

    @app.route("/llm-stats")
    def _llm_stats() -> Response:
        return Response(json.dumps(llm.snapshot(elapsed_s(environment))), mimetype="application/json")

    @app.route("/llm-stats/csv")
    def _llm_stats_csv() -> Response:
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow([title for _, title in LATENCY_COLUMNS])
        for row in llm.latency_rows():
            writer.writerow([row[key] for key, _ in LATENCY_COLUMNS])
        for row in llm.throughput_rows(elapsed_s(environment)):
            writer.writerow([row["name"], "", row["value"]])
        return Response(out.getvalue(), mimetype="text/csv",
                        headers={"Content-disposition": f"attachment;filename=llm_stats_{int(time.time())}.csv"})
