"""Several roles of one policy in one run: role games (docs/roles.md).

Built in: ``coder_tester`` (a coder and a unit-test writer, :mod:`rlvr.roles.coder_tester`) and
``solver_verifier`` (a solver and a generative verifier, :mod:`rlvr.roles.solver_verifier`).
:mod:`rlvr.roles.play` plays a game for the collector.
"""

from rlvr.roles import coder_tester, solver_verifier  # noqa: F401  (register the built-in games)
from rlvr.roles.base import GAMES, RoleGame, RoleGroup, RolePrompt, register_game

__all__ = ["GAMES", "RoleGame", "RoleGroup", "RolePrompt", "register_game"]
