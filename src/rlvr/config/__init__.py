"""Typed configuration, YAML loading, overrides and recipes."""

from rlvr.config import dependent  # noqa: F401 - installs its checks on RunConfig
from rlvr.config.load import dump_config, load_config, parse_override, validate
from rlvr.config.schema import RunConfig

__all__ = ["RunConfig", "dump_config", "load_config", "parse_override", "validate"]
