"""The field groups of :class:`core.settings.Settings`, one plain pydantic model per module; the settings
object inherits them and adds the environment reading and the checks across groups.
"""

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, BeforeValidator, ConfigDict


class Knobs(BaseModel):
    """A field group: each field's docstring is its description, line breaks read as spaces (docs/reference.md)."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        for info in cls.__pydantic_fields__.values():
            if info.description:
                info.description = info.description.replace("\n", " ")


def from_text(parse: Callable[[str], Any]) -> BeforeValidator:
    """A field rule (``Annotated[T, from_text(parse)]``): a string (environment, ``.env``, flag) is ``parse(text)``;
    other values pass as they are. ``parse`` raises ValueError on bad text."""
    return BeforeValidator(lambda value: parse(value) if isinstance(value, str) else value)
