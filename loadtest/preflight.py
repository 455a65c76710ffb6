"""Before any load: the server answers, the model to measure is chosen, the sidecar answers, the gate is known."""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx

from core.settings import Settings
from loadtest.errors import BenchError
from loadtest.sidecar_api import SidecarClient


@dataclass(frozen=True)
class Target:
    """The server and model a run measures."""

    model: str
    served: list[str]
    backend: str = "vLLM"


def choose_model(served: list[str], settings: Settings) -> str:
    """The model to measure among ``served`` (ids of ``/v1/models``).

    Order: BENCH_MODEL, SERVED_MODEL_NAME, MODEL (when served under that id), else the only model served.

    Raises:
        BenchError: the chosen model is not served, or several are served and none was chosen (lists them).
    """
    listed = ", ".join(served) or "none"
    for variable, wanted in (("BENCH_MODEL", settings.bench_model), ("SERVED_MODEL_NAME", settings.served_model_name)):
        if wanted:
            if wanted not in served:
                raise BenchError(f"{variable}={wanted} is not served at {settings.vllm_url} (served: {listed}).")
            return wanted
    if settings.model and settings.model in served:
        return settings.model
    if len(served) == 1:
        return served[0]
    if not served:
        raise BenchError(f"the server at {settings.vllm_url} lists no model in /v1/models; is it still loading?")
    raise BenchError(
        f"the server at {settings.vllm_url} serves {len(served)} models ({listed}); choose one with BENCH_MODEL=<id>."
    )


def _served(settings: Settings) -> list[str]:
    """Model ids of ``/v1/models``, after ``/health`` where the server has one (retried: a busy server can drop a
    connection).

    Raises:
        BenchError: the server does not answer, or answers that it is not healthy.
    """
    error: Exception | None = None
    for attempt in range(3):
        try:
            health = httpx.get(f"{settings.vllm_url}/health", timeout=10, headers=settings.vllm_headers)
            models = httpx.get(f"{settings.vllm_url}/v1/models", timeout=10, headers=settings.vllm_headers)
            if models.status_code in (401, 403):
                raise BenchError(
                    f"the server at {settings.vllm_url} refuses the API key (/v1/models: HTTP {models.status_code}): "
                    "set VLLM_API_KEY to the key vLLM was started with."
                )
            models.raise_for_status()
            data = models.json().get("data")
            break
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            error = exc
            time.sleep(1.0 + attempt)
    else:
        raise BenchError(
            f"the server is not answering at {settings.vllm_url} ({type(error).__name__}: {error}). Start the stack "
            f"with `make up` and check {settings.vllm_log_file}, or set VLLM_BASE_URL."
        ) from None
    if health.status_code not in (200, 404):  # a server without /health (404) is judged by /v1/models alone
        raise BenchError(f"the server at {settings.vllm_url} is not ready (/health: HTTP {health.status_code}).")
    if not isinstance(data, list):
        return []
    return [str(m["id"]) for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]


def preflight(settings: Settings, sidecar: SidecarClient) -> Target:
    """Check the server and the sidecar answer, choose the model, check GATE names a baseline.

    Raises:
        BenchError: what is wrong and what to do.
    """
    served = _served(settings)
    model = choose_model(served, settings)
    sidecar.check()
    sidecar.check_token()
    if settings.gate:
        baselines = sidecar.baselines()
        if settings.gate not in baselines:
            known = ", ".join(sorted(baselines)) or "none yet"
            raise BenchError(
                f"GATE={settings.gate}: no baseline of that name (known: {known}). Mark one first with "
                f"`make baseline NAME={settings.gate}` after a benchmark of the same workload."
            )
    return Target(model, served, backend_name(settings.vllm_url, settings.vllm_headers))


def backend_name(url: str, headers: dict[str, str] | None = None) -> str:
    """``vLLM`` when the server answers vLLM's ``/version``, else ``OpenAI-compatible``."""
    try:
        response = httpx.get(f"{url}/version", timeout=5, headers=headers)
        version = response.json().get("version") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        version = None
    return "vLLM" if isinstance(version, str) else "OpenAI-compatible"
