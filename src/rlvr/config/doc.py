"""The config's own documentation, from its fields' descriptions: in each section's docstring (so
``help(RunConfig)`` lists the keys) and beside each value in ``rlvr config show --doc``."""

from __future__ import annotations

import re
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

FIELDS_HEADING = "Fields (config keys; `rlvr config show --doc` prints them beside their values):"


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    # "list[rlvr.config.schema.RewardItem]" -> "list[RewardItem]"; a quoted Literal value is left alone
    return re.sub(r"(?<![\w'\"])(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_])", "", str(annotation))


def _default(field: Any) -> str | None:
    if field.default is not PydanticUndefined:
        return repr(field.default)
    factory = field.default_factory
    if factory in (list, dict):
        return repr(factory())
    return None  # a section: its own docstring lists its defaults


def _is_section(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def fields_doc(cls: type[BaseModel]) -> str:
    """``cls``'s own docstring followed by one entry per field: name, type, default, description."""
    own = (cls.__dict__.get("__doc__") or "").rstrip()
    if FIELDS_HEADING in own:  # already documented (a subclass that kept its parent's text)
        own = own.split(FIELDS_HEADING)[0].rstrip()
    lines = [own, ""] if own else []
    lines.append(FIELDS_HEADING)
    for name, field in cls.model_fields.items():
        annotation = field.annotation
        if _is_section(annotation):
            head = f"{name} ({annotation.__name__}): the {name}.* keys; see {annotation.__name__}."
        else:
            default = _default(field)
            head = f"{name} ({_type_name(annotation)}" + (f", default {default}" if default else "") + ")"
            if field.description:
                head += f": {field.description}"
        lines.append(f"    {head}")
    return "\n".join(lines) + "\n"


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _comment(text: str) -> str:
    return " ".join(text.split())


def _section_lines(section: BaseModel, indent: str) -> list[str]:
    lines: list[str] = []
    for name, field in type(section).model_fields.items():
        value = getattr(section, name)
        description = _comment(field.description or "")
        if isinstance(value, BaseModel) and _is_section(field.annotation):
            summary = _comment((type(value).__doc__ or "").split(FIELDS_HEADING)[0]).split(". ")[0]
            lines.append(f"{indent}{name}:" + (f"  # {summary.rstrip('.')}" if summary else ""))
            lines.extend(_section_lines(value, indent + "  "))
            continue
        dumped = yaml.safe_dump({name: _plain(value)}, sort_keys=False, width=10**9).rstrip("\n").split("\n")
        if len(dumped) == 1 and description:
            lines.append(f"{indent}{dumped[0]}  # {description}")
            continue
        if description:
            lines.append(f"{indent}# {description}")
        lines.extend(f"{indent}{line}" for line in dumped)
    return lines


def dump_config_doc(config: BaseModel) -> str:
    """The resolved config as YAML (it loads back as the same config), each key with its field's
    description as a comment: beside a one-line value, above a longer one."""
    return "\n".join(_section_lines(config, "")) + "\n"


__all__ = ["dump_config_doc", "fields_doc"]
