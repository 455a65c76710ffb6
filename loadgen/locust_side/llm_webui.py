"""Locust's web UI: the LLM tabs (Locust's ``examples/extend_web_ui.py``): extended tabs and tables, their rows added
to the polled ``/stats/requests``, a JSON route ``/llm-stats`` and a CSV download; and a login (``--web-login``,
Locust's ``examples/web_ui_auth``) when LOCUST_WEB_PASSWORD is set: one user, LOCUST_WEB_USERNAME. The cookie is
``SameSite=Strict`` and signed with a key made per start (no cross-site test starts; logins end when Locust restarts).
"""

from __future__ import annotations

import csv
import io
import json
import secrets
import time
from typing import TYPE_CHECKING, Any

import requests
from flask import Blueprint, Response, redirect, request, session, url_for
from flask_login import UserMixin, login_user

if TYPE_CHECKING:  # importing Locust monkey-patches the process: not for the login's unit tests
    from locust.env import Environment

    from loadgen.locust_side.llm_stats import LlmStats

LATENCY_TAB = "llm-latency"
THROUGHPUT_TAB = "llm-throughput"
LATENCY_COLUMNS = (("name", "Metric"), ("unit", "Unit"), ("count", "# Values"), ("median", "Median"),
                   ("p90", "90%ile"), ("p99", "99%ile"), ("avg", "Average"), ("min", "Min"), ("max", "Max"))
THROUGHPUT_COLUMNS = (("name", "Metric"), ("value", "Value"))
SUBMIT_PATH = "/login_submit"


def elapsed_s(environment: Environment) -> float | None:
    """Seconds of the current test so far (to its last request once it stopped); None before any request."""
    total = environment.stats.total
    if not total.start_time or total.last_request_timestamp is None:
        return None
    running = environment.runner is not None and environment.runner.state in ("spawning", "running")
    end = time.time() if running else total.last_request_timestamp
    return max(0.0, end - total.start_time)


def discover_model(base_url: str, fallback: str | None, headers: dict[str, str] | None = None) -> str:
    """The first model ``/v1/models`` lists, for the interactive web UI's runs (``fallback`` or "unknown" when the
    server does not answer or lists none); ``headers`` carry the API key."""
    try:
        data = requests.get(f"{base_url}/v1/models", timeout=10.0, headers=headers).json().get("data")
    except (requests.RequestException, ValueError, AttributeError):
        data = None
    models = data if isinstance(data, list) else []
    ids = [str(m["id"]) for m in models if isinstance(m, dict) and isinstance(m.get("id"), str)]
    return ids[0] if ids else fallback or "unknown"


def install(environment: Environment, llm: LlmStats) -> None:
    """Add the LLM tabs to the web UI of ``environment`` (no-op without a web UI, e.g. headless or a worker)."""
    web_ui = environment.web_ui
    if web_ui is None or web_ui.app is None:
        return
    web_ui.template_args.update({  # the extra tabs and their table layouts
        "extended_tabs": [{"title": "LLM latency", "key": LATENCY_TAB},
                          {"title": "LLM throughput", "key": THROUGHPUT_TAB}],
        "extended_tables": [{"key": tab, "structure": [{"key": k, "title": t} for k, t in columns]}
                            for tab, columns in ((LATENCY_TAB, LATENCY_COLUMNS), (THROUGHPUT_TAB, THROUGHPUT_COLUMNS))],
        "extended_csv_files": [{"href": "/llm-stats/csv", "title": "Download LLM statistics CSV"}],
    })
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


def credentials_match(username: str, password: str, expected_user: str, expected_password: str) -> bool:
    """True when both match (constant-time comparisons, both always made)."""
    user_ok = secrets.compare_digest(username.encode("utf-8"), expected_user.encode("utf-8"))
    password_ok = secrets.compare_digest(password.encode("utf-8"), expected_password.encode("utf-8"))
    return user_ok and password_ok


def install_login(web_ui: Any, username: str, password: str, base_path: str = "") -> None:
    """Make the login page of ``web_ui`` (``environment.web_ui`` with ``--web-login``) accept exactly
    ``username``/``password``; ``base_path``: Locust's ``--web-base-path``."""

    class WebUser(UserMixin):
        def __init__(self, name: str) -> None:
            self.name = name

        def get_id(self) -> str:
            return self.name

    def load_user(user_id: str) -> WebUser | None:
        return WebUser(user_id) if secrets.compare_digest(user_id.encode(), username.encode()) else None

    web_ui.login_manager.user_loader(load_user)
    web_ui.app.config.update(SECRET_KEY=secrets.token_hex(32), SESSION_COOKIE_SAMESITE="Strict",
                             REMEMBER_COOKIE_SAMESITE="Strict", SESSION_COOKIE_HTTPONLY=True)
    web_ui.auth_args = {"username_password_callback": f"{base_path}{SUBMIT_PATH}"}
    blueprint = Blueprint("llm_stack_login", __name__, url_prefix=base_path or None)

    @blueprint.route(SUBMIT_PATH, methods=["POST"])
    def login_submit() -> Any:
        given_user = request.form.get("username") or ""
        given_password = request.form.get("password") or ""
        if credentials_match(given_user, given_password, username, password):
            login_user(WebUser(username))
            return redirect(url_for("locust.index"))
        session["auth_error"] = "Invalid username or password"
        return redirect(url_for("locust.login"))

    web_ui.app.register_blueprint(blueprint)
