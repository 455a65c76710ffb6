"""What vLLM's router adds: TTFT and ITL through ``vllm-router`` ÷ straight to the same server, side by side.

``make bench-router`` starts one server — the bundled mock (known TTFT and ITL, cheap, so the figures are the
router's) or, with ``--target URL``, a running vLLM — and ``vllm-router --policy round_robin`` in front of it, then
sends the same closed-loop load (``--concurrency`` users, ``--requests`` streamed chat requests of ``--tokens``
tokens, the project's :func:`loadgen.request.client.stream_chat`) straight and through the router in alternating
rounds (``--rounds`` pairs). Per round: mean TTFT and ITL of both paths and the router's added ms and ratio; the
summary is the median over the rounds. With ``--target`` each load is also timed by the engine's own clock (its mean
``vllm:time_to_first_token_seconds`` between two ``/metrics`` scrapes), printed beside the client's. The host's load
average is printed at the start and the end. Figures: docs/benchmarks.md ("Router overhead"). Exits 1 when a request
of any round failed (reported with the first cause; nothing is dropped).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from gevent import monkey

monkey.patch_all()

import gevent.pool  # noqa: E402
import httpx  # noqa: E402
from benchkit import REPO, served_model, serving  # noqa: E402

from core.net import free_port, wait_for_http  # noqa: E402
from core.records import RequestRecord  # noqa: E402
from core.serverview_samples import Samples, latency_view, parse_exposition  # noqa: E402
from loadgen.childprocs import mock_server  # noqa: E402
from loadgen.request.client import chat_payload, new_session, stream_chat  # noqa: E402

APP_BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class PathFigures:
    """One path's figures for one round: means and medians in ms over its successful requests."""

    ttft_mean_ms: float
    ttft_p50_ms: float
    itl_mean_ms: float
    itl_p50_ms: float
    ok: int
    failed: int
    first_error: str | None
    engine_ttft_mean_ms: float | None = None


def figures(rows: list[RequestRecord], engine_ttft_mean_ms: float | None = None) -> PathFigures:
    """Mean/median TTFT and ITL (every gap of every successful request) of ``rows``; ``engine_ttft_mean_ms``: the
    server's own mean TTFT over the same load (None: not known, e.g. the mock)."""
    good = [r for r in rows if r.ok and r.ttft_ms is not None]
    ttft = [r.ttft_ms for r in good if r.ttft_ms is not None]
    gaps = [gap for r in good for gap in r.itl_ms]
    bad = [r for r in rows if not r.ok]
    return PathFigures(
        ttft_mean_ms=statistics.fmean(ttft) if ttft else float("nan"),
        ttft_p50_ms=statistics.median(ttft) if ttft else float("nan"),
        itl_mean_ms=statistics.fmean(gaps) if gaps else float("nan"),
        itl_p50_ms=statistics.median(gaps) if gaps else float("nan"),
        ok=len(good),
        failed=len(bad),
        first_error=(bad[0].error or bad[0].error_kind) if bad else None,
        engine_ttft_mean_ms=engine_ttft_mean_ms,
    )


def scrape(base_url: str, headers: dict[str, str]) -> Samples | None:
    """The server's ``/metrics`` parsed (:func:`core.serverview_samples.parse_exposition`); None when unreadable."""
    try:
        answer = httpx.get(f"{base_url}/metrics", headers=headers, timeout=10)
        answer.raise_for_status()
    except httpx.HTTPError:
        return None
    return parse_exposition(answer.text)


def timed_load(
    url: str, target: str | None, model: str, args: argparse.Namespace, headers: dict[str, str]
) -> PathFigures:
    """:func:`load` on ``url``, with ``target``'s own mean TTFT over it (``/metrics`` before and after) when a real
    server is the target."""
    before = scrape(target, headers) if target else None
    rows = load(url, model, args, headers)
    after = scrape(target, headers) if before is not None and target else None
    engine = None
    if before is not None and after is not None:
        engine = latency_view(before, after, "vllm:time_to_first_token_seconds").mean_ms
    return figures(rows, engine)


def load_average() -> str:
    """The host's 1-minute load average and its CPU count (``2.41 on 2 CPUs``)."""
    return f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"


def load(base_url: str, model: str, args: argparse.Namespace, headers: dict[str, str]) -> list[RequestRecord]:
    """``args.requests`` streamed requests from ``args.concurrency`` closed-loop users, one connection each."""
    rows: list[RequestRecord] = []
    left = iter(range(args.requests))

    def user() -> None:
        session = new_session(headers=headers)
        for _ in left:
            payload = chat_payload(model, [{"role": "user", "content": "你好，请介绍一下你自己。"}], args.tokens, 0.0,
                                   ignore_eos=True)
            rows.append(stream_chat(session, base_url, payload, timeout_s=120))

    pool = gevent.pool.Pool(args.concurrency)
    for _ in range(args.concurrency):
        pool.spawn(user)
    pool.join()
    return rows


def row(label: str, direct: PathFigures, routed: PathFigures) -> str:
    """One table row: both paths' TTFT/ITL means and the router's added ms and ratio, and the engine's own mean TTFT
    on both paths (``31.2 / 29.8``; ``-`` when unknown: the mock)."""
    engine = "-"
    if direct.engine_ttft_mean_ms is not None and routed.engine_ttft_mean_ms is not None:
        engine = f"{direct.engine_ttft_mean_ms:.1f} / {routed.engine_ttft_mean_ms:.1f}"
    return (f"| {label} | {direct.ttft_mean_ms:.1f} | {routed.ttft_mean_ms:.1f} | {engine} | "
            f"{routed.ttft_mean_ms - direct.ttft_mean_ms:+.2f} ({routed.ttft_mean_ms / direct.ttft_mean_ms:.3f}) | "
            f"{direct.itl_mean_ms:.2f} | {routed.itl_mean_ms:.2f} | "
            f"{routed.itl_mean_ms - direct.itl_mean_ms:+.3f} ({routed.itl_mean_ms / direct.itl_mean_ms:.3f}) |")


def main(argv: list[str] | None = None) -> int:
    """Command line (``make bench-router``); exit 0 when every request of every round succeeded, 1 otherwise."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", help="an OpenAI-compatible server to put behind the router (default: the mock)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--ttft-ms", type=float, default=50.0, help="the mock's TTFT")
    parser.add_argument("--itl-ms", type=float, default=10.0, help="the mock's inter-token latency")
    parser.add_argument("--policy", default="round_robin")
    parser.add_argument("--workdir", type=Path, default=REPO / "logs" / "bench_router")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    headers = {"Authorization": f"Bearer {os.environ['VLLM_API_KEY']}"} if os.environ.get("VLLM_API_KEY") else {}

    with ExitStack() as stack:
        mock = mock_server(args.workdir / "mock.log", tokens=args.tokens, ttft_ms=args.ttft_ms, itl_ms=args.itl_ms)
        direct_url = args.target.rstrip("/") if args.target else stack.enter_context(mock).url
        ready, why = wait_for_http(f"{direct_url}/v1/models", 60, interval_s=0.2)
        if not ready:
            raise TimeoutError(f"{direct_url}/v1/models did not answer 200 within 60 s: {why}")
        router_port = free_port()
        router_argv = [str(APP_BIN / "vllm-router"), "--host", "127.0.0.1", "--port", str(router_port),
                       "--worker-urls", direct_url, "--policy", args.policy,
                       "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
        router_url = f"http://127.0.0.1:{router_port}"
        with serving(router_argv, args.workdir / "router.log", f"{router_url}/readiness", 60):
            model = served_model(direct_url, headers)
            server = model if args.target else f"the mock, TTFT {args.ttft_ms:.0f} ms, ITL {args.itl_ms:.0f} ms"
            print(f"[INFO] {args.rounds} rounds x (direct, router): {args.concurrency} users, {args.requests} "
                  f"requests of {args.tokens} tokens; server {direct_url} ({server}), "
                  f"vllm-router --policy {args.policy}; load average {load_average()}")
            load(direct_url, model, args, headers)  # warm both paths' connections and the server
            load(router_url, model, args, headers)
            print("| round | TTFT direct ms | TTFT router ms | engine's TTFT direct / router ms "
                  "| router adds ms (ratio) | ITL direct ms | ITL router ms | router adds ms (ratio) |")
            print("|---|---|---|---|---|---|---|---|")
            pairs = []
            failed = False
            for index in range(args.rounds):
                direct = timed_load(direct_url, args.target and direct_url, model, args, headers)
                routed = timed_load(router_url, args.target and direct_url, model, args, headers)
                for name, fig in (("direct", direct), ("router", routed)):
                    if fig.failed:
                        failed = True
                        print(f"[WARN] round {index}: {fig.failed} {name} request(s) failed: {fig.first_error}")
                pairs.append((direct, routed))
                print(row(str(index), direct, routed), flush=True)
    ttft_added = statistics.median(r.ttft_mean_ms - d.ttft_mean_ms for d, r in pairs)
    itl_added = statistics.median(r.itl_mean_ms - d.itl_mean_ms for d, r in pairs)
    ttft_ratio = statistics.median(r.ttft_mean_ms / d.ttft_mean_ms for d, r in pairs)
    itl_ratio = statistics.median(r.itl_mean_ms / d.itl_mean_ms for d, r in pairs)
    print(f"[RESULT] router adds, median of {args.rounds} rounds: TTFT {ttft_added:+.2f} ms ({ttft_ratio:.3f} x), "
          f"ITL {itl_added:+.3f} ms ({itl_ratio:.3f} x); load average {load_average()}")
    engine_gaps = [d.ttft_mean_ms - d.engine_ttft_mean_ms for d, _ in pairs if d.engine_ttft_mean_ms is not None]
    if engine_gaps:
        print(f"[RESULT] straight to the server the client's TTFT is {statistics.median(engine_gaps):+.2f} ms above "
              "the engine's own (median of the rounds): the API server's and the client's time, not the router's")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
