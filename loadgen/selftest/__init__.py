"""The load generator measuring itself: a mock server with known timings (and ``/metrics``), ``make calibrate``."""
