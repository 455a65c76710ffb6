"""The field groups of :class:`core.settings.Settings`, one plain pydantic model per module; the settings
object inherits them and adds the environment reading and the checks across groups.
"""
