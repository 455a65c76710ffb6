"""Running a benchmark: preflight, warmup, the Locust run between two scrapes, sweeps, the stack's lock, profiling."""
