"""The FastAPI sidecar (:8200): samples resources, reads logs and vLLM's metrics, writes the reports."""
