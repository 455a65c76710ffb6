"""The benchmark's client of the sidecar's series and comparison endpoints (``POST /series``, ``POST /compare``),
next to :mod:`loadgen.sidecar_client` (same rules: :mod:`core.api` types, failures are :class:`BenchError`)."""

from __future__ import annotations

import httpx
from pydantic import BaseModel

from core.api import BuildSeriesRequest, BuildSeriesResponse, CompareRequest, CompareResponse
from loadgen.errors import BenchError
from loadgen.sidecar_client import SidecarClient


class SidecarRefused(BenchError):
    """The sidecar answered, but not 200: ``status`` is its HTTP status (404: an unknown report, series or name)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def _post(client: SidecarClient, path: str, body: BaseModel, timeout_s: float = 180) -> bytes:
    """POST ``body`` to the sidecar; the answer's bytes.

    Raises:
        SidecarRefused: any answer but 200 (with the sidecar's message). BenchError: unreachable.
    """
    try:
        response = httpx.post(
            f"{client.url}{path}",
            content=body.model_dump_json(),
            timeout=timeout_s,
            headers={"content-type": "application/json", **client.write_headers},
        )
    except httpx.HTTPError as exc:
        raise BenchError(f"the sidecar is unreachable at {client.url}: {exc}") from None
    if response.status_code != 200:
        try:
            detail = response.json().get("detail", response.text)
        except (ValueError, AttributeError):
            detail = response.text
        message = f"the sidecar refused {path} (HTTP {response.status_code}): {str(detail)[:500]}"
        raise SidecarRefused(message, response.status_code)
    return response.content


def post_series(client: SidecarClient, request: BuildSeriesRequest) -> BuildSeriesResponse:
    """Ask the sidecar to build and write the series report of these points.

    Raises:
        BenchError: refused or unreachable.
    """
    return BuildSeriesResponse.model_validate_json(_post(client, "/series", request))


def post_compare(client: SidecarClient, request: CompareRequest) -> CompareResponse:
    """Ask the sidecar to compare two results (report, series or baseline name) and write the comparison.

    Raises:
        BenchError: an unknown reference (the message lists what exists), or the sidecar is unreachable.
    """
    return CompareResponse.model_validate_json(_post(client, "/compare", request))


def mark_series_baseline(client: SidecarClient, name: str, series_id: str) -> str | None:
    """Mark series ``series_id`` as baseline ``name`` (``PUT /series/{id}/baseline/{name}``); returns the id the name
    pointed at before (None: a new name).

    Raises:
        BenchError: refused (the sidecar's reason) or unreachable.
    """
    try:
        response = httpx.put(
            f"{client.url}/series/{series_id}/baseline/{name}", timeout=client.timeout_s, headers=client.write_headers
        )
    except httpx.HTTPError as exc:
        raise BenchError(f"the sidecar is unreachable at {client.url}: {exc}") from None
    if response.status_code != 200:
        raise BenchError(f"the sidecar refused (HTTP {response.status_code}): {response.text[:300]}")
    try:
        previous = response.json().get("previous_id")
    except (ValueError, AttributeError):
        return None
    return previous if isinstance(previous, str) else None
