"""The sidecar's reports: assembled, compared, stored in ``reports/`` (the only writer), baselines, retention and
history."""
