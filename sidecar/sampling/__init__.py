"""What the sidecar samples: GPU memory (NVML), the vLLM process tree, vLLM's gauges, and the windows that frame a
run."""
