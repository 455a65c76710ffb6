"""What the sidecar samples: GPUs (NVML), the vLLM process tree, vLLM's gauges, and the windows of a run."""
