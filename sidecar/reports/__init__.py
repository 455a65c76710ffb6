"""The sidecar's reports: assembled, compared, stored in ``reports/``, baselines, retention and history."""
