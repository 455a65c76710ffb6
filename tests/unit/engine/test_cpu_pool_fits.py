"""vLLM's CPU build keeps the KV pool in host memory: a KV_CACHE_GB the host cannot hold is refused before the running
vLLM is stopped (engine/engineplan.py ``fits_host``; ``./start_vllm.sh --kv-cache-gb 10000`` once took a working vLLM
down and left it exited)."""

from __future__ import annotations

import pytest

from core.settings import Settings
from engine.engineplan import fits_host
from engine.kvsizing import KvSizingError

GIB = 2**30


def test_a_pool_beyond_the_hosts_memory_is_refused_on_the_cpu_build_only() -> None:
    settings = Settings(_env_file=None, kv_cache_gb=10000)  # type: ignore[call-arg]
    with pytest.raises(KvSizingError, match=r"KV_CACHE_GB=10000 does not fit this host's 24\.0 GiB of memory"):
        fits_host(settings, "cpu", 24 * GIB)
    assert fits_host(settings, "gpu", 24 * GIB) == "gpu"  # the GPU plan judges GPU memory
    small = Settings(_env_file=None, kv_cache_gb=4)  # type: ignore[call-arg]
    assert fits_host(small, "cpu", 24 * GIB) == "cpu"
