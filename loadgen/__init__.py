"""The load generator: the benchmark command, orchestration, request path, workloads, Locust side, self-tests."""
