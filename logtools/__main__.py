"""``python -m logtools``: the log analyzer's command line (see :mod:`logtools.cli`)."""

from logtools.cli import main

raise SystemExit(main())
