"""Environments and tools for multi-turn episodes, registered by name."""

from rlvr.envs.base import ENVIRONMENTS, Environment, Step, make_env, register_env

__all__ = ["ENVIRONMENTS", "Environment", "Step", "make_env", "register_env"]

from rlvr.envs import calculator as _calculator  # noqa: E402,F401  (registers "calculator")
