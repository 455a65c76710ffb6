"""The load generator measuring itself: a mock server with known timings (and its ``/metrics``) and ``make
calibrate``."""
