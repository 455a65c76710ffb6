"""``python -m services.logtools``: the log analyzer's command line (see :mod:`services.logtools.cli`)."""

from services.logtools.cli import main

raise SystemExit(main())
