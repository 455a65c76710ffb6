"""The field groups of the one settings object, :class:`core.settings.Settings`, one module each.

Each group is a plain pydantic model (no environment reading of its own): ``serving`` (model, vLLM, service
addresses, chat UI), ``security``, ``folders``, ``benchmark`` and ``sweep`` (load shapes, sweeps, repeats, the gate),
``cluster`` (replicas, load from several hosts) and ``cost`` (prices of the hardware and of electricity).
The settings object inherits them all and adds the environment and ``.env`` reading, the checks across groups and the
properties that combine them. Import settings from :mod:`core.settings`; a new knob is a field in its group here.
"""
