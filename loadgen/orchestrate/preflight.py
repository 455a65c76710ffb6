"""Before any load: the server answers, the model to measure is chosen, the sidecar answers, the gate is known."""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx

from core.api import ServerFacts
from core.fingerprint import differing_fields, fingerprint_fields, fingerprint_of, refusal_reason
from core.gate import refused_line
from core.report_schema import BenchmarkConfig, Report
from core.series_stats import SeriesReport, is_series_id
from core.settings import Settings
from core.shapes import MODEL_LIST, MODEL_LIST_SHAPE, ServedModel, ShapeError, answer_as, snippet
from loadgen.errors import BenchError
from loadgen.sidecar_client import SidecarClient
from loadgen.workloads.dataset import Dataset
from loadgen.workloads.tokenizing import ServerTokenizer


@dataclass(frozen=True)
class Target:
    """The server and model a run measures."""

    model: str
    served: list[str]
    backend: str = "vLLM"
    max_model_len: int | None = None  # the model's context (vLLM lists it in /v1/models); None: not said
    facts: ServerFacts | None = None  # /version and /v1/models as read here: the report's, asked once


def choose_model(served: list[str], settings: Settings) -> str:
    """The model to measure among ``served``: BENCH_MODEL, SERVED_MODEL_NAME, MODEL (if served), else the only one.
    Raises BenchError: the chosen model is not served, or several are served and none was chosen (lists them)."""
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
    raise BenchError(f"the server at {settings.vllm_url} serves {len(served)} models ({listed}); choose one with "
                     "BENCH_MODEL=<id>.")


def _served(settings: Settings) -> list[ServedModel]:
    """The models of ``/v1/models``, after ``/health`` where the server has one (retried on errors and 5xx). Raises
    BenchError: no answer, not healthy, the key refused, or ``/v1/models`` is not a model list."""
    error: Exception | None = None
    for attempt in range(3):
        try:
            health = httpx.get(f"{settings.vllm_url}/health", timeout=10, headers=settings.vllm_headers)
            models = httpx.get(f"{settings.vllm_url}/v1/models", timeout=10, headers=settings.vllm_headers)
        except httpx.HTTPError as exc:
            error = exc
        else:
            if models.status_code < 500:
                break
            error = httpx.HTTPStatusError(f"/v1/models answered HTTP {models.status_code}", request=models.request,
                                          response=models)
        time.sleep(1.0 + attempt)
    else:
        hint = (f"Start the stack with `make up` and check {settings.vllm_log_file}, or set VLLM_BASE_URL"
                if not isinstance(error, httpx.HTTPStatusError) else  # it answers, but cannot serve
                "`make status` shows whether vLLM runs; one that runs but no longer serves is restarted by "
                f"`./start_vllm.sh` (its log: {settings.vllm_log_file})")  # fmt: skip
        raise BenchError(f"the server is not answering at {settings.vllm_url} ({type(error).__name__}: {error}). "
                         f"{hint}.") from None
    if models.status_code in (401, 403):
        raise BenchError(f"the server at {settings.vllm_url} refuses the API key (/v1/models: HTTP "
                         f"{models.status_code}): set VLLM_API_KEY to the key vLLM was started with.")
    if health.status_code not in (200, 404):  # a server without /health (404) is judged by /v1/models alone
        raise BenchError(f"the server at {settings.vllm_url} is not ready (/health: HTTP {health.status_code}).")
    if models.status_code != 200:
        raise BenchError(f"GET {settings.vllm_url}/v1/models answered HTTP {models.status_code}: "
                         f"{snippet(models.content)!r}. VLLM_BASE_URL must be an OpenAI-compatible server's root (no "
                         "/v1).")
    try:
        listed = answer_as(models, MODEL_LIST, MODEL_LIST_SHAPE)
    except ShapeError as exc:
        raise BenchError(f"{exc}. VLLM_BASE_URL must be an OpenAI-compatible server's root (no /v1).") from None
    return listed.data


def preflight(settings: Settings, sidecar: SidecarClient) -> Target:
    """Check the server and the sidecar answer, choose the model, check GATE names a baseline. Raises BenchError: what
    is wrong and what to do."""
    models = _served(settings)
    served = {m.id: m.max_model_len for m in models}
    model = choose_model(list(served), settings)
    sidecar.check_token()  # also: it answers
    if settings.gate:
        baselines = sidecar.baselines()
        if settings.gate not in baselines:
            known = ", ".join(sorted(baselines)) or "none yet"
            raise BenchError(f"GATE={settings.gate}: no baseline of that name (known: {known}). Mark one first with "
                             f"`make baseline NAME={settings.gate}` after a benchmark of the same workload.")
    try:  # vLLM's version from its /version (None: a server without one)
        answer = httpx.get(f"{settings.vllm_url}/version", timeout=5, headers=settings.vllm_headers)
        version = answer.json().get("version") if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        version = None
    version = version if isinstance(version, str) else None
    first = models[0]  # the model the report's environment names (choose_model found one)
    facts = ServerFacts(version=version, model_id=first.id, model_root=first.root, max_model_len=first.max_model_len)
    backend = "vLLM" if version else "OpenAI-compatible"
    return Target(model, list(served), backend, served[model], facts)


def smallest_prompt_tokens(settings: Settings, model: str, input_len_tokens: int | None, texts: list[str]) -> int:
    """Tokens of the smallest chat prompt: ``input_len_tokens``, else ``/tokenize`` of the shortest text, else 1."""
    if input_len_tokens is not None:
        return input_len_tokens
    if not texts:
        return 1
    tokenizer = ServerTokenizer(settings.vllm_url, model, timeout_s=10.0, headers=settings.vllm_headers)
    try:
        return max(1, tokenizer.chat_count(min(texts, key=len)))
    except BenchError:  # no usable /tokenize (its shape is checked there), or no answer
        return 1
    finally:
        tokenizer.close()


def context_problem(max_output_tokens: int, prompt_tokens: int, max_model_len: int | None, knob: str) -> str | None:
    """Why ``max_output_tokens`` cannot fit the context ``max_model_len`` (None: unknown) with ``prompt_tokens``
    (pure; all in tokens; ``knob`` named in the message); None when it fits."""
    if max_model_len is None or max_output_tokens + prompt_tokens <= max_model_len:
        return None
    room = max_model_len - prompt_tokens
    return (f"{knob}={max_output_tokens} cannot fit the model's context: max_model_len={max_model_len} tokens, and "
            f"the smallest prompt takes {prompt_tokens} token(s), so at most {max(room, 0)} output tokens fit. Lower "
            f"{knob} to {max(room, 1)} or less (or serve a longer context: VLLM_MAX_MODEL_LEN).")


def gate_problem(settings: Settings, sidecar: SidecarClient, plan: BenchmarkConfig, served: list[str]) -> str | None:
    """GATE=name before any load: the gate's ``[GATE] ERROR vs name: not comparable: …`` line when the baseline cannot
    judge this plan (:func:`core.fingerprint.refusal_reason`; hardware taken from the baseline, the model the first of
    ``served``); None when it can. Raises BenchError: the sidecar is unreachable."""
    if not settings.gate:
        return None
    target = sidecar.baselines().get(settings.gate)
    if target is None:
        return None
    model = served[0] if served else plan.model
    if is_series_id(target):
        reason = None if settings.sweep else series_refusal(sidecar, target, plan, model)
    elif (baseline := sidecar.get(f"/reports/{target}", Report)) is None:
        reason = f"its report {target} no longer exists"
    else:
        env = baseline.environment.model_copy(update={"served_model_name": model})
        reason = refusal_reason(baseline, fingerprint_fields(plan, env))
    return refused_line(settings.gate, reason) if reason else None


def series_refusal(sidecar: SidecarClient, series_id: str, plan: BenchmarkConfig, model: str) -> str | None:
    """One load point against a series baseline: why no point of it has the plan's workload (how it differs from the
    first); None when one has or it cannot be read. Raises BenchError: the sidecar is unreachable."""
    series = sidecar.get(f"/series/{series_id}", SeriesReport)
    if series is None:
        return f"its series {series_id} no longer exists"
    first = next((p.report_ids[0] for p in series.points if p.report_ids), None)
    reference = sidecar.get(f"/reports/{first}", Report) if first else None
    if reference is None:
        return None
    env = reference.environment.model_copy(update={"served_model_name": model})
    fields = fingerprint_fields(plan, env)
    if any(p.fingerprint == fingerprint_of(fields) for p in series.points):
        return None
    old = fingerprint_fields(reference.config, reference.environment)
    return (f"no load point of {series_id} has this workload; it differs from its first point ({first}: "
            f"{'; '.join(differing_fields(old, fields))})")


def plan_problem(
    settings: Settings, sidecar: SidecarClient, plan: BenchmarkConfig, target: Target, dataset: Dataset | None
) -> str | None:
    """The plan's checks before any load (:func:`context_problem`, :func:`gate_problem`): the line to print, or None.
    Raises BenchError: the sidecar is unreachable."""
    if target.max_model_len is not None:
        texts = [] if dataset is None else ["\n".join(m["content"] for m in p.messages) for p in dataset.prompts]
        prompt = smallest_prompt_tokens(settings, plan.model, plan.input_len_tokens, texts)
        knob = "MAX_TOKENS" if settings.fixed_max_tokens is not None else "OUTPUT_LEN_CAP"  # sets the longest output
        knob = "RANDOM_OUTPUT_LEN" if settings.random_dataset else knob
        problem = context_problem(plan.max_tokens, prompt, target.max_model_len, knob)
        if problem:
            return f"[ERROR] {problem}"
    return gate_problem(settings, sidecar, plan, target.served)
