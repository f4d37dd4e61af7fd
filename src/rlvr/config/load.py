"""Build a :class:`RunConfig` from a YAML file, a recipe name and ``key=value`` overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from rlvr.config.schema import DataConfig, RunConfig
from rlvr.errors import RlvrError
from rlvr.safe_parse import load_yaml

# Shipped inside the package (a wheel has them); the repository's recipes/ is a link to it.
RECIPES_DIR = Path(__file__).resolve().parents[1] / "recipes"


def recipe_names() -> list[str]:
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def recipe_summary(name: str) -> str:
    """A recipe's opening comment, cut to one line."""
    lines = []
    for line in (RECIPES_DIR / f"{name}.yaml").read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# ").rstrip())
    text = " ".join(lines)
    return text if len(text) <= 100 else text[:97].rstrip() + "..."


def parse_override(item: str) -> tuple[list[str], Any]:
    """``"algo.kl_coef=0.01"`` → (["algo", "kl_coef"], 0.01); the value is parsed as YAML."""
    if "=" not in item:
        raise RlvrError(f"override '{item}' is not of the form key=value (e.g. optim.lr=1e-5)")
    key, raw = item.split("=", 1)
    if not key or any(not part for part in key.split(".")):
        raise RlvrError(f"override '{item}' has an empty key")
    try:
        value = load_yaml(raw, f"override {key}=...") if raw else ""
    except yaml.YAMLError as err:
        raise RlvrError(f"override '{item}': value is not valid YAML ({err})") from err
    if isinstance(value, str):
        try:  # YAML 1.1 reads "1e-5" (no dot) as a string; users mean a number
            value = float(value) if any(c in value.lower() for c in ".e") else int(value)
        except ValueError:
            pass
    return key.split("."), value


def _set(tree: dict, path: list[str], value: Any, item: str) -> None:
    node = tree
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise RlvrError(f"override '{item}': '{part}' is a value, not a section")
        node = child
    node[path[-1]] = value


def read_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        recipe = RECIPES_DIR / f"{path.name}.yaml"
        if recipe.is_file() and not path.suffix and len(path.parts) == 1:
            path = recipe
        elif not path.suffix and len(path.parts) == 1:
            raise RlvrError(
                f"'{path}' is neither a config file nor a recipe; recipes: {', '.join(recipe_names())} "
                "(rlvr recipes describes them)"
            )
        else:
            raise RlvrError(f"config file {path} does not exist")
    try:
        data = load_yaml(path.read_text(), f"config file {path}") or {}
    except (OSError, UnicodeDecodeError) as err:
        raise RlvrError(f"cannot read config file {path}: {err}") from err
    except yaml.YAMLError as err:
        raise RlvrError(f"config file {path} is not valid YAML: {err}") from err
    if not isinstance(data, dict):
        raise RlvrError(f"config file {path} must hold a mapping of keys, not {type(data).__name__}")
    return data


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """The resolved config: defaults ← YAML file ← overrides; errors name the offending key."""
    tree = read_yaml(path) if path else {}
    for item in overrides:
        keys, value = parse_override(item)
        _set(tree, keys, value, item)
    return validate(tree, source=str(path) if path else "overrides")


def validate(tree: dict, source: str = "config") -> RunConfig:
    try:
        return RunConfig.model_validate(tree)
    except ValidationError as err:
        raise RlvrError(f"invalid config ({source}):\n" + format_errors(err)) from err


def format_errors(err: ValidationError) -> str:
    lines = []
    for problem in err.errors():
        key = ".".join(str(p) for p in problem["loc"]) or "(top level)"
        if problem["type"] == "extra_forbidden":
            parent = problem["loc"][:-1]
            allowed = _allowed_keys(parent)
            lines.append(f"  {key}: unknown key" + (f"; allowed: {', '.join(allowed)}" if allowed else ""))
        elif not problem["loc"]:  # a check across sections: its message names the keys
            lines.append(f"  {problem['msg'].removeprefix('Value error, ')}")
        else:
            lines.append(f"  {key}: {problem['msg']} (got {problem.get('input')!r})")
    return "\n".join(lines)


def _allowed_keys(loc: tuple) -> list[str]:
    model: Any = RunConfig
    for part in loc:
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        model = field.annotation
    return list(getattr(model, "model_fields", {}))


# the stage sections (rlvr.config.stages) and the stage that reads each; a config.yaml shows a section
# only when the run reads it or sets it, so an RL run's file does not list every stage's defaults
_STAGE_SECTIONS = {
    "sft": ("sft",),
    "rft": ("rft",),
    "dpo": ("dpo",),
    "distill": ("distill",),
    "rm": ("rm",),
    "mix": (),
}


def dump_config(config: RunConfig) -> str:
    """The resolved config as YAML (what ``config show`` prints and a run saves as config.yaml).
    Stage sections the run neither reads nor changes from their defaults are left out; loading the
    text gives back the same config."""
    tree = config.model_dump(mode="json")
    defaults = RunConfig.model_fields
    for section, readers in _STAGE_SECTIONS.items():
        used = config.stage in readers or (section == "mix" and config.mix.demos != "none")
        default = defaults[section].default_factory().model_dump(mode="json")  # type: ignore[misc]
        if not used and tree[section] == default:
            del tree[section]
    if not tree["stages"]:
        del tree["stages"]
    data_fields = DataConfig.model_fields
    for section in ("selection", "curriculum", "replay", "sources"):  # off unless set (docs/data.md)
        default = data_fields[section].default_factory()  # type: ignore[misc]
        default = default.model_dump(mode="json") if hasattr(default, "model_dump") else default
        if tree["data"][section] == default:
            del tree["data"][section]
    return yaml.dump(tree, Dumper=_Dumper, sort_keys=False)


class _Dumper(yaml.SafeDumper):
    """safe_dump, with strings that hold a line break written double-quoted (``"\\n\\n"``), not folded."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = '"' if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)
