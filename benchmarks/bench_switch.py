"""A model switch and a restart under a steady stream of chat requests: ``make bench-switch``.

With the stack up, an open-loop stream (``--rate`` requests per second of ``--max-tokens`` tokens, naming no model, so
vLLM answers with whatever it serves) runs while three ``./start_vllm.sh`` commands follow each other, ``--settle-s``
apart: a switch to ``--other`` (default: the synthetic tiny model, or its folder served as ``tiny`` when the stack
serves that), the switch back, and a restart of the same model. Per command: the requests sent until the next one,
how many failed (no answer) and were cut (the stream broke), the longest gap between two successful first tokens,
the slowest first token, and the time from the command to the new model's first token. Every request is a row;
none is dropped. Figures: docs/benchmarks.md ("Model switch under load").
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import httpx
from benchkit import REPO, served_model

from core.enginestate import read_engine_state
from core.settings import Settings, get_settings

PROMPT = "请用三句话介绍一下你自己。"


@dataclass(frozen=True)
class Answer:
    """One request of the stream: Unix times (s) it was sent, got its first token and ended; how it ended."""

    sent_s: float
    first_token_s: float | None
    end_s: float
    ok: bool
    """The stream ended with a finish reason or ``[DONE]``."""
    cut: bool
    """It had begun (HTTP 200) but broke before its end: an answer cut in the middle."""
    model: str | None
    """The model that answered (its chunks' ``model``)."""
    error: str | None = None

    @property
    def failed(self) -> bool:
        """No answer at all: refused, an HTTP error, a timeout before the first byte."""
        return not self.ok and not self.cut

    @property
    def ttft_s(self) -> float | None:
        """Seconds from sending to the first token."""
        return None if self.first_token_s is None else self.first_token_s - self.sent_s


def one_request(client: httpx.Client, url: str, max_tokens: int, timeout_s: float) -> Answer:
    """Send one streamed chat request (no model named) and read it to its end; never raises."""
    body = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": max_tokens, "stream": True,
            "temperature": 0.0}  # fmt: skip
    sent = time.time()
    first: float | None = None
    model: str | None = None
    begun = finished = False
    try:
        with client.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=timeout_s) as response:
            if response.status_code != 200:
                text = response.read().decode("utf-8", "replace")[:200]
                return Answer(sent, None, time.time(), False, False, None, f"HTTP {response.status_code}: {text}")
            begun = True
            for line in response.iter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    finished = True
                    break
                chunk = json.loads(data)
                model = chunk.get("model") or model
                for choice in chunk.get("choices") or []:
                    if first is None and (choice.get("delta") or {}).get("content"):
                        first = time.time()
                    finished = finished or bool(choice.get("finish_reason"))
    except (httpx.HTTPError, ValueError) as exc:
        return Answer(sent, first, time.time(), False, begun, model, f"{type(exc).__name__}: {exc}"[:200])
    return Answer(sent, first, time.time(), finished, begun and not finished, model,
                  None if finished else "the stream ended without its end")  # fmt: skip


class Stream:
    """An open-loop stream: one request every ``1 / rate_per_s`` seconds, each on a thread of its own, until
    :meth:`stop`; :meth:`stop` waits for those in flight and returns every answer, in sending order."""

    def __init__(self, url: str, headers: Mapping[str, str], rate_per_s: float = 2.0, max_tokens: int = 32,
                 timeout_s: float = 300.0) -> None:  # fmt: skip
        self.url, self.rate_per_s, self.max_tokens, self.timeout_s = url, rate_per_s, max_tokens, timeout_s
        self.client = httpx.Client(headers=dict(headers), limits=httpx.Limits(max_connections=1000))
        self._pool = ThreadPoolExecutor(max_workers=10_000)  # a thread per request in flight: never queued here
        self._sent: list[Future[Answer]] = []
        self._stop = threading.Event()
        self._pacer = threading.Thread(target=self._pace, daemon=True)

    def _pace(self) -> None:
        start = time.monotonic()
        while not self._stop.is_set():
            self._sent.append(self._pool.submit(one_request, self.client, self.url, self.max_tokens, self.timeout_s))
            self._stop.wait(max(0.0, start + len(self._sent) / self.rate_per_s - time.monotonic()))

    def start(self) -> Stream:
        """Begin sending."""
        self._pacer.start()
        return self

    def stop(self) -> list[Answer]:
        """Stop sending, wait for every request in flight, return all answers."""
        self._stop.set()
        self._pacer.join()
        self._pool.shutdown(wait=True)
        self.client.close()
        return sorted((sent.result() for sent in self._sent), key=lambda a: a.sent_s)


@dataclass(frozen=True)
class Figures:
    """The stream around one command: requests sent in ``[begin, end)``, their failures and cuts, the longest gap
    between two successful first tokens and the slowest first token there (s), and the time from ``begin`` to the
    first token of ``new_model`` (s; None: it never answered)."""

    requests: int
    failed: int
    cut: int
    longest_gap_s: float | None
    slowest_ttft_s: float | None
    to_new_model_s: float | None


def figures(answers: list[Answer], begin_s: float, end_s: float, new_model: str | None,
            new_after_s: float | None = None) -> Figures:  # fmt: skip
    """:class:`Figures` of the answers sent in ``[begin_s, end_s)``; ``new_model`` counts from ``begin_s`` (or
    ``new_after_s``: the swap, after which every request goes to the new engine — a restart's answers with the same
    name). Pure."""
    window = [a for a in answers if begin_s <= a.sent_s < end_s]
    firsts = sorted(a.first_token_s for a in window if a.ok and a.first_token_s is not None)
    gaps = [b - a for a, b in itertools.pairwise(firsts)]
    ttfts = [t for a in window if a.ok and (t := a.ttft_s) is not None]
    after = begin_s if new_after_s is None else new_after_s
    new = [a.first_token_s for a in answers if a.ok and a.model == new_model and a.sent_s >= after and a.first_token_s]
    return Figures(len(window), sum(a.failed for a in window), sum(a.cut for a in window),
                   round(max(gaps), 3) if gaps else None, round(max(ttfts), 3) if ttfts else None,
                   round(min(new) - begin_s, 3) if new else None)  # fmt: skip


@dataclass(frozen=True)
class Step:
    """One command of the benchmark: its name and environment changes (None: unset)."""

    name: str
    env: dict[str, str | None]


SWAPPED = "The router sends new requests to"
"""The switch's line once the router sends to the new engine (:mod:`engine.bluegreen`)."""


@dataclass(frozen=True)
class Ran:
    """One command run: its start and end (Unix s), when the router swapped engines (None: no such line, a
    stop-and-start), its exit code and its last lines."""

    begin_s: float
    end_s: float
    swapped_s: float | None
    code: int
    tail: str


def run_step(step: Step) -> Ran:
    """Run ``./start_vllm.sh`` with the step's environment, its output read line by line (the swap's line timed)."""
    env = {k: v for k, v in os.environ.items() if k not in step.env}
    env.update({k: v for k, v in step.env.items() if v is not None})
    begin = time.time()
    swapped: float | None = None
    lines: list[str] = []
    with subprocess.Popen([str(REPO / "start_vllm.sh")], cwd=REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as proc:  # fmt: skip
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip())
            if swapped is None and SWAPPED in line:
                swapped = time.time()
        code = proc.wait()
    return Ran(begin, time.time(), swapped, code, "\n".join(lines[-6:]))


def new_engine_from(ran: Ran, answers: list[Answer]) -> float:
    """From when on requests reach the new engine: the router's swap; for a stop-and-start (no swap), after the last
    request that failed while the command ran (the engine was down until then), else the command's start."""
    if ran.swapped_s is not None:
        return ran.swapped_s
    down = [a.sent_s for a in answers if a.failed and ran.begin_s <= a.sent_s <= ran.end_s]
    return max(down, default=ran.begin_s)


def main(argv: list[str] | None = None) -> int:
    """CLI entry: the three commands under the stream, a table of their figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=2.0, help="requests per second (open loop)")
    parser.add_argument("--max-tokens", type=int, default=32, help="tokens each request asks for")
    parser.add_argument("--settle-s", type=float, default=15.0, help="stream time before and after each command")
    parser.add_argument("--other", default=None, help="the model to switch to (default: see the docstring)")
    args = parser.parse_args(argv)
    settings: Settings = get_settings()
    url, headers = settings.vllm_url, settings.vllm_headers
    state = read_engine_state(settings.engine_state_file)
    try:
        home = served_model(url, headers)
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
        print(f"[ERROR] the stack does not answer at {url} ({exc}): `make up` first", file=sys.stderr)
        return 2
    requested = state.requested if state else settings.requested_model
    other = args.other or (str(REPO / "models" / "tiny") if requested == "synthetic:tiny" else "synthetic:tiny")
    steps = [Step(f"switch to {other}", {"VLLM_MODEL_PATH": other, "MODEL": None}),
             Step(f"switch back to {requested}", {"VLLM_MODEL_PATH": None, "MODEL": requested}),
             Step(f"restart {requested}", {"VLLM_MODEL_PATH": None, "MODEL": requested})]  # fmt: skip
    load = os.getloadavg()[0]
    print(f"[INFO] {args.rate:g} req/s of {args.max_tokens} tokens at {url} (serving {home}); load average {load:.1f}")
    stream = Stream(url, headers, args.rate, args.max_tokens).start()
    time.sleep(args.settle_s)
    runs: list[tuple[Step, Ran, str | None]] = []
    for step in steps:
        ran = run_step(step)
        runs.append((step, ran, served_model(url, headers) if ran.code == 0 else None))
        print(f"[INFO] {step.name}: exit {ran.code} after {ran.end_s - ran.begin_s:.1f} s\n{ran.tail}", flush=True)
        time.sleep(args.settle_s)
    answers = stream.stop()
    print(f"[INFO] load average {os.getloadavg()[0]:.1f}; {len(answers)} requests in all, "
          f"{sum(a.failed for a in answers)} failed, {sum(a.cut for a in answers)} cut")  # fmt: skip
    print("\n| command | exit | command s | requests | failed | cut | longest gap between first tokens s | "
          "slowest TTFT s | command → new model answers s |\n|---|---|---|---|---|---|---|---|---|")
    steady = figures(answers, 0.0, runs[0][1].begin_s, None)
    print(f"| (steady, before the first command) | | | {steady.requests} | {steady.failed} | {steady.cut} | "
          f"{steady.longest_gap_s} | {steady.slowest_ttft_s} | |")
    for i, (step, ran, new_model) in enumerate(runs):
        until = runs[i + 1][1].begin_s if i + 1 < len(runs) else float("inf")
        f = figures(answers, ran.begin_s, until, new_model, new_engine_from(ran, answers))
        print(f"| {step.name} | {ran.code} | {ran.end_s - ran.begin_s:.1f} | {f.requests} | {f.failed} | {f.cut} | "
              f"{f.longest_gap_s} | {f.slowest_ttft_s} | {f.to_new_model_s} |")
    errors = sorted({a.error for a in answers if a.error})
    for error in errors[:5]:
        print(f"[INFO] e.g. {error}")
    return 0 if all(r.code == 0 for _, r, _ in runs) and not any(a.failed or a.cut for a in answers) else 1


if __name__ == "__main__":
    raise SystemExit(main())
