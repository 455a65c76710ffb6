"""vLLM's log: how its lines are built (grammar), which messages carry which facts of a start and the phase they
lead to (tracker), and the start-up read from a log family, with where a start spent its time (startup)."""
