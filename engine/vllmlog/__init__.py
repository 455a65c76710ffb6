"""vLLM's log: how its lines are built (grammar), which messages carry which facts of a start (messages),
and the start-up read from them: the phase of the latest start (tracker, startup) and where it spent its time."""
