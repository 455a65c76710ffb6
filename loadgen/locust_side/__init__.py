"""Code that runs inside the Locust processes: users and hooks, per-process state, workers on other hosts, LLM stats."""
