"""Log analyzer for ``logs/vllm.log`` and ``logs/requests.jsonl``: errors, slow requests, stats (:mod:`.cli`).

The ``--errors`` path imports only the standard library and scans bytes: ~0.08 s of CPU for a 45 MB log
(``benchmarks/bench_log_analyzer.py``); the settings (~0.3 s) are read only when no file is named.
"""
