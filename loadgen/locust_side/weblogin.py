"""A login for Locust's web UI (``--web-login``, Locust's ``examples/web_ui_auth``) when LOCUST_WEB_PASSWORD is set:
one user, LOCUST_WEB_USERNAME. The cookie is ``SameSite=Strict`` and signed with a key made per start (no cross-site
test starts; logins end when Locust restarts).
"""

from __future__ import annotations

import secrets
from typing import Any

SUBMIT_PATH = "/login_submit"


def credentials_match(username: str, password: str, expected_user: str, expected_password: str) -> bool:
    """True when both match (constant-time comparisons, both always made)."""
    user_ok = secrets.compare_digest(username.encode("utf-8"), expected_user.encode("utf-8"))
    password_ok = secrets.compare_digest(password.encode("utf-8"), expected_password.encode("utf-8"))
    return user_ok and password_ok


def install_login(web_ui: Any, username: str, password: str, base_path: str = "") -> None:
    """Make the login page of ``web_ui`` (``environment.web_ui`` with ``--web-login``) accept exactly
    ``username``/``password``; ``base_path``: Locust's ``--web-base-path``."""

    from flask import Blueprint, redirect, request, session, url_for
    from flask_login import UserMixin, login_user

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
