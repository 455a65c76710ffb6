"""One vLLM start read from its log: the seconds of each start-up phase (the engine's own reading,
:func:`engine.vllmlog.startup.start_breakdown`, also ``make status``'s) and what the compile cache did. Pure; used by
``bench_engine_defaults.py`` (``make bench-engine``) for each run."""

from __future__ import annotations

from collections.abc import Sequence

from engine.vllmlog.startup import start_breakdown

__all__ = ["compile_cache", "start_breakdown"]


def compile_cache(lines: Sequence[bytes]) -> str:
    """What vLLM's compile cache did in one start (pure): its AOT artifact loaded, failed to load (then it compiles
    again), was first written, or AOT was off (torch.compile's own caches, which log nothing) or nothing compiled."""
    text = b"\n".join(lines)
    if b"Directly load AOT compilation" in text:
        return "aot-hit"
    if b"due to a load failure" in text:
        return "aot-load-failed"
    if b"saved AOT compiled function" in text:
        return "aot-written"
    return "no-aot" if b"Warming up model" in text else "no-compile"
