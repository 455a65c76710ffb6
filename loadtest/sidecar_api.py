"""The benchmark's client of the sidecar's HTTP API (:mod:`core.api` types): health, baselines, sampling windows
and report submission. The load generator never imports the sidecar."""

from __future__ import annotations

from typing import TypeVar

import httpx
from pydantic import BaseModel

from core.api import BuildReportRequest, BuildReportResponse, WindowResult, WindowStarted
from loadtest.errors import BenchError

_M = TypeVar("_M", bound=BaseModel)


class SidecarClient:
    """Calls ``url``'s API; every failure is a :class:`BenchError` saying what to do."""

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def _down(self, exc: Exception) -> BenchError:
        return BenchError(
            f"the sidecar is not answering at {self.url} ({type(exc).__name__}); it writes the report. "
            "Start the stack with `make up` (log: logs/sidecar.log)."
        )

    def check(self) -> None:
        """Raises BenchError unless ``/health`` answers 200."""
        try:
            httpx.get(f"{self.url}/health", timeout=self.timeout_s).raise_for_status()
        except httpx.HTTPError as exc:
            raise self._down(exc) from None

    def baselines(self) -> dict[str, str]:
        """Named baselines: name -> report id."""
        try:
            response = httpx.get(f"{self.url}/baselines", timeout=self.timeout_s)
            response.raise_for_status()
            data = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise self._down(exc) from None
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def _post_model(self, path: str, model: type[_M]) -> _M | None:
        """``POST path`` answered as ``model``; None when the sidecar cannot (a window is best effort)."""
        try:
            response = httpx.post(f"{self.url}{path}", timeout=self.timeout_s)
            response.raise_for_status()
            return model.model_validate_json(response.content)
        except (httpx.HTTPError, ValueError):
            return None

    def start_window(self) -> WindowStarted | None:
        """Open a sampling window; None when the sidecar cannot (the report then uses the run's own bounds)."""
        return self._post_model("/windows/start", WindowStarted)

    def stop_window(self, window_id: str) -> WindowResult | None:
        """Close the sampling window (its summary, or None when the sidecar cannot tell)."""
        return self._post_model(f"/windows/{window_id}/stop", WindowResult)

    def mark_baseline(self, name: str, report_id: str) -> None:
        """Mark report ``report_id`` as baseline ``name`` (``PUT /baselines/{name}``).

        Raises:
            BenchError: refused (the sidecar's reason) or unreachable.
        """
        try:
            response = httpx.put(f"{self.url}/baselines/{name}", json={"report_id": report_id}, timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            raise self._down(exc) from None
        if response.status_code != 200:
            raise BenchError(f"the sidecar refused (HTTP {response.status_code}): {response.text[:300]}")

    def post_report(self, request: BuildReportRequest) -> BuildReportResponse:
        """Ask the sidecar to write the report.

        Raises:
            BenchError: the sidecar refused the run or is unreachable (the message carries its answer).
        """
        try:
            response = httpx.post(
                f"{self.url}/reports",
                content=request.model_dump_json(),
                timeout=120,
                headers={"content-type": "application/json"},
            )
        except httpx.HTTPError as exc:
            raise BenchError(f"the sidecar is unreachable at {self.url}: {exc}") from None
        if response.status_code != 200:
            raise BenchError(f"the sidecar refused the report (HTTP {response.status_code}): {response.text[:500]}")
        return BuildReportResponse.model_validate_json(response.content)
