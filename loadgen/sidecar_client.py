"""The load generator's one client of the sidecar's HTTP API (:mod:`core.api` types); the load generator never imports
the sidecar. Every failure is a :class:`BenchError`: unreachable, or refused (:class:`SidecarRefused`). Writes carry
the sidecar token (``Authorization: Bearer``)."""

from __future__ import annotations

from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter

from core.api import BaselineMarked, WindowStarted
from core.settings import Settings
from core.shapes import ShapeError, answer_as
from loadgen.errors import BenchError

_M = TypeVar("_M", bound=BaseModel)
_T = TypeVar("_T")
BASELINE_NAMES: TypeAdapter[dict[str, str]] = TypeAdapter(dict[str, str])


class SidecarRefused(BenchError):
    """The sidecar answered, but not as asked: ``status`` is its HTTP status (404: unknown; 400/422: bad)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def _detail(response: httpx.Response, limit: int) -> str:
    """FastAPI's ``detail`` message, or the raw body, at most ``limit`` characters."""
    try:
        detail = response.json().get("detail", response.text)
    except (ValueError, AttributeError):
        detail = response.text
    return str(detail)[:limit]


class SidecarClient:
    """Calls ``url``'s API, ``token`` sent with every write; every failure a :class:`BenchError` saying what to do."""

    def __init__(self, url: str, timeout_s: float = 10.0, token: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.write_headers = {"Authorization": f"Bearer {token}"} if token else {}

    @classmethod
    def of(cls, settings: Settings) -> SidecarClient:
        """The client of ``settings``' sidecar: its URL and token."""
        return cls(settings.sidecar_url, token=settings.sidecar_auth_token())

    def _call(self, method: str, path: str, what: str, ok: tuple[int, ...] = (200,), **kwargs: Any) -> httpx.Response:
        """``httpx.<method>`` of ``path`` (``kwargs`` to it); its answer when its status is in ``ok``. Raises
        SidecarRefused: another status (a missing or wrong token says what to set). BenchError: unreachable."""
        kwargs.setdefault("timeout", self.timeout_s)
        try:
            response = getattr(httpx, method)(f"{self.url}{path}", **kwargs)
        except httpx.HTTPError as exc:
            raise BenchError(f"the sidecar is not answering at {self.url} ({type(exc).__name__}); it writes the "
                             "report. Start the stack with `make up` (log: logs/sidecar.log).") from None
        status = response.status_code
        if status in ok:
            return response
        if status in (401, 403, 503):
            raise SidecarRefused(f"the sidecar refused {what} (HTTP {status}: {response.text[:200]}): the benchmark "
                                 "needs the sidecar's token — SIDECAR_TOKEN, or the file SIDECAR_TOKEN_FILE "
                                 "(run/sidecar_token, made by `make up`).", status)
        raise SidecarRefused(f"the sidecar refused {what} (HTTP {status}): {_detail(response, 500)}", status)

    def check_token(self) -> None:
        """Raises BenchError unless the sidecar answers and accepts this client's token (``GET /auth``), so a run
        never measures load whose report could not be written."""
        self._call("get", "/auth", "the benchmark's token", (204,), headers=self.write_headers)

    def baselines(self) -> dict[str, str]:
        """Named baselines: name -> report id. Raises BenchError: unreachable, refused, or not a JSON object of names
        and ids."""
        response = self._call("get", "/baselines", "reading /baselines")
        return self._answer(response, BASELINE_NAMES, "a JSON object of baseline name -> report id")

    @staticmethod
    def _answer(response: httpx.Response, shape: TypeAdapter[_T], expected: str) -> _T:
        """The sidecar's 200 answer read as ``shape``. Raises BenchError: it is not (a sidecar of another version, or
        something else on its port)."""
        try:
            return answer_as(response, shape, expected)
        except ShapeError as exc:
            raise BenchError(f"the sidecar's answer is unusable: {exc}. Is SIDECAR_BASE_URL this stack's sidecar, of "
                             "this version (`make up` restarts it)?") from None

    def get(self, path: str, model: type[_M]) -> _M | None:
        """``GET path`` (``/reports/{id}``, ``/series/{id}``) read as ``model``; None on 404 (the sidecar has none).
        Raises BenchError: unreachable, refused, or an answer that does not read as ``model``."""
        response = self._call("get", path, f"reading {path}", (200, 404))
        if response.status_code == 404:
            return None
        try:
            return model.model_validate_json(response.content)
        except ValueError as exc:
            first = str(exc).splitlines()[0]
            raise BenchError(f"the sidecar's {path} does not read as a {model.__name__}: {first}") from None

    def start_window(self, run_id: str) -> WindowStarted | None:
        """Open a sampling window for run ``run_id`` (closed when the sidecar builds the report); None when the sidecar
        cannot (the report then uses the run's own bounds). Raises SidecarRefused: the sidecar cannot see the run's rows
        file in its ``LOGS_DIR/runs`` (422) or the id is malformed (400): the run must not measure."""
        try:
            response = self._call("post", "/windows/start", "a sampling window", (200, 400, 422),
                                  params={"run_id": run_id}, headers=self.write_headers)  # fmt: skip
        except BenchError:  # unreachable, or any other refusal
            return None
        if response.status_code != 200:
            raise SidecarRefused(f"the sidecar cannot write this run's report: {_detail(response, 600)}. Run the "
                                 "benchmark with the sidecar's logs folder (drop --logs-dir, or start the sidecar with "
                                 "the same LOGS_DIR).", response.status_code)
        try:
            return WindowStarted.model_validate_json(response.content)
        except ValueError:
            return None

    def mark_baseline(self, name: str, report_id: str | None) -> BaselineMarked:
        """Mark report ``report_id`` (None: the latest) as baseline ``name``; the answer's ``previous_id`` is what
        the name pointed at before. Raises BenchError: refused or unreachable."""
        response = self._call("put", f"/baselines/{name}", f"baseline {name}", headers=self.write_headers,
                              json={"report_id": report_id} if report_id else {})  # fmt: skip
        try:
            return BaselineMarked.model_validate_json(response.content)
        except ValueError:  # an older sidecar's answer: marked, but what it replaced is unknown
            return BaselineMarked(name=name, report_id=report_id or "?", timestamp="", throughput_req_per_sec=0.0,
                                  latency_p99_ms=None)

    def mark_series_baseline(self, name: str, series_id: str) -> str | None:
        """Mark series ``series_id`` as baseline ``name``; the id the name pointed at before (None: a new name).
        Raises BenchError: refused or unreachable."""
        path = f"/series/{series_id}/baseline/{name}"
        response = self._call("put", path, f"baseline {name}", headers=self.write_headers)
        try:
            previous = response.json().get("previous_id")
        except (ValueError, AttributeError):
            return None
        return previous if isinstance(previous, str) else None

    def post(self, path: str, body: BaseModel, answer: type[_M]) -> _M:
        """``POST path`` with ``body``, answered as ``answer``: the sidecar writes a run's report (``/reports``), a
        series report (``/series``) or a comparison (``/compare``; 404: an unknown reference). Raises SidecarRefused
        (not 200) or BenchError."""
        headers = {"content-type": "application/json", **self.write_headers}
        response = self._call("post", path, path, content=body.model_dump_json(), timeout=180, headers=headers)
        return self._answer(response, TypeAdapter(answer), f"the sidecar's {answer.__name__}")
