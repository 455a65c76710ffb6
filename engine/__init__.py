"""The engine: vLLM's launcher, model resolution and synthetic model, engine plan and sizing, doctor, log grammar,
start-up phases, control."""
