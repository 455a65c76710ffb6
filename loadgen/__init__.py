"""The load generator: the benchmark command, its orchestration, the request path, workloads, the Locust side,
self-tests."""
