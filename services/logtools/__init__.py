"""Log analyzer for ``logs/vllm.log`` and ``logs/requests.jsonl``: errors, slow requests, stats, startup phase.

Run as ``python -m services.logtools --errors|--slow|--stats [--json] [--since 1h]``. The package imports only the
standard library on the hot path (no pydantic) so that ``--errors`` on a 45 MB log stays near 0.1 s; settings are
read only when no ``--log``/``--requests`` is given. ``startup_phase`` lives in :mod:`services.logtools.startup`.
"""
