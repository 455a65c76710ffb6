"""The benchmark's commands: ``./run_benchmark.sh`` / ``make benchmark``, baselines, comparisons, remote workers, CI
files."""
