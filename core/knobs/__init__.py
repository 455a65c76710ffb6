"""The field groups of :class:`core.settings.Settings`, one plain pydantic model per module; the settings
object inherits them and adds the environment reading and the checks across groups.
"""

from typing import Any

from pydantic import BaseModel, ConfigDict


class Knobs(BaseModel):
    """A field group: each field's docstring is its description, line breaks read as spaces (docs/reference.md)."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        for info in cls.__pydantic_fields__.values():
            if info.description:
                info.description = info.description.replace("\n", " ")
