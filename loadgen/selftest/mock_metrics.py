"""The mock server's own clock (``--metrics``): what vLLM's output processor would stamp for every streamed answer
(arrival, each token, finish), served under vLLM's ``/metrics`` names, with ``vllm:num_requests_running`` (answers
being streamed; a disconnect leaves it at once, as vLLM aborts) and ``vllm:num_requests_waiting`` (0). With
``--send-delay-ms D`` a client's overhead over these figures must grow by D (the cross-check's test of itself).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

MODEL_LABEL = 'engine="0",model_name="mock-model"'
BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)


@dataclass
class _Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * len(BUCKETS_S))
    total_s: float = 0.0
    count: int = 0

    def observe(self, value_s: float) -> None:
        self.total_s += value_s
        self.count += 1
        for i, bound in enumerate(BUCKETS_S):
            if value_s <= bound:
                self.counts[i] += 1

    def lines(self, name: str) -> list[str]:
        out = [f"# TYPE {name} histogram"]
        out += [f'{name}_bucket{{{MODEL_LABEL},le="{b}"}} {c}.0' for b, c in zip(BUCKETS_S, self.counts, strict=True)]
        out += [f'{name}_bucket{{{MODEL_LABEL},le="+Inf"}} {self.count}.0',
                f"{name}_count{{{MODEL_LABEL}}} {self.count}.0", f"{name}_sum{{{MODEL_LABEL}}} {self.total_s!r}"]
        return out


@dataclass
class MockMetrics:
    """What the mock's engine did so far (one per server process; a test uses one process)."""

    ttft: _Histogram = field(default_factory=_Histogram)
    itl: _Histogram = field(default_factory=_Histogram)
    e2e: _Histogram = field(default_factory=_Histogram)
    succeeded: int = 0
    generated: int = 0
    prompt: int = 0
    running: int = 0
    """Answers being streamed now (begun, neither finished nor cut by their client's disconnect)."""

    def record(self, arrival_s: float, token_times_s: list[float], tokens: int, prompt_tokens: int) -> None:
        """One finished answer: its arrival and the engine time of each content event (seconds, one clock)."""
        if not token_times_s:
            return
        self.ttft.observe(token_times_s[0] - arrival_s)
        for before, after in itertools.pairwise(token_times_s):
            self.itl.observe(after - before)
        self.e2e.observe(token_times_s[-1] - arrival_s)
        self.succeeded += 1
        self.generated += tokens
        self.prompt += prompt_tokens

    def exposition(self) -> bytes:
        """The Prometheus text of everything recorded (vLLM's names and labels)."""
        lines = []
        for name, kind, label, value in (
            ("vllm:num_requests_running", "gauge", "", self.running), ("vllm:num_requests_waiting", "gauge", "", 0),
            ("vllm:request_success_total", "counter", ',finished_reason="length"', self.succeeded),
            ("vllm:generation_tokens_total", "counter", "", self.generated),
            ("vllm:prompt_tokens_total", "counter", "", self.prompt),
        ):
            lines += [f"# TYPE {name} {kind}", f"{name}{{{MODEL_LABEL}{label}}} {value}.0"]
        for histogram, name in ((self.ttft, "time_to_first_token"), (self.itl, "inter_token_latency"),
                                (self.e2e, "e2e_request_latency")):
            lines += histogram.lines(f"vllm:{name}_seconds")
        return ("\n".join(lines) + "\n").encode()
