"""Rewards: functions registered by name, and a pool that runs them isolated with hard timeouts.

A reward is ``fn(completion: str, example: Example, **params) -> float | dict[str, float]``.
Register one with :func:`register_reward`, name it in a :class:`RewardSpec`, and score batches with
a :class:`RewardPool`; errors (timeouts, crashes, exceptions, bad values) come back per component in
:class:`RewardResult`, never as a silent 0.0.
"""

from rlvr.rewards import builtin as _builtin  # noqa: F401 - registers the built-in rewards
from rlvr.rewards.extract import EXTRACT_MODES, extract_answer
from rlvr.rewards.pool import RewardPool, RewardResult
from rlvr.rewards.registry import get_reward, list_rewards, register_reward
from rlvr.rewards.spec import RewardSpec

__all__ = [
    "EXTRACT_MODES",
    "RewardPool",
    "RewardResult",
    "RewardSpec",
    "extract_answer",
    "get_reward",
    "list_rewards",
    "register_reward",
]
