"""Environments and tools for multi-turn episodes, registered by name."""

from rlvr.envs.base import ENVIRONMENTS, Environment, Step, make_env, register_env
from rlvr.envs.calculator import Calculator
from rlvr.envs.frozen_lake import FrozenLake
from rlvr.envs.guess_number import GuessNumber
from rlvr.envs.openenv_env import OpenEnvEnvironment
from rlvr.envs.python_tool import PythonTool
from rlvr.envs.search import SearchEnv, search_examples
from rlvr.envs.self_verify import SelfVerify
from rlvr.envs.textarena_game import TextArenaGame
from rlvr.envs.verifiers_env import VerifiersEnv
from rlvr.envs.wordle import Wordle

__all__ = [
    "ENVIRONMENTS",
    "Calculator",
    "Environment",
    "FrozenLake",
    "GuessNumber",
    "OpenEnvEnvironment",
    "PythonTool",
    "SearchEnv",
    "SelfVerify",
    "Step",
    "TextArenaGame",
    "VerifiersEnv",
    "Wordle",
    "make_env",
    "register_env",
    "search_examples",
]
