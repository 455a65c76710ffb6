"""The benchmark's commands: ``./run_benchmark.sh`` / ``make benchmark`` (remote workers too), baselines, compare."""
