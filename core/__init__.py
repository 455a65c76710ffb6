"""The core: settings, report schema, row and state types, pure statistics and units. Imports no service."""
