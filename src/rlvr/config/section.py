"""The base of every config section: unknown keys are errors, assignments are validated, and the
docstring lists the section's keys with their types, defaults and descriptions (``help(RunConfig)``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        from rlvr.config.doc import fields_doc

        cls.__doc__ = fields_doc(cls)
