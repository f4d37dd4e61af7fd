"""Rewards: functions registered by name, and a pool that runs them isolated with hard timeouts.

A reward is ``fn(completion: str, example: Example, **params) -> float | dict[str, float]``; a
group reward is ``fn(completions: list[str], example, **params) -> list[float]`` and sees the G
completions of one prompt together. Register one with :func:`register_reward` /
:func:`register_group_reward`, name it in a :class:`RewardSpec`, and score batches with a
:class:`RewardPool`; errors (timeouts, crashes, exceptions, bad values, the batch deadline) come
back per component in :class:`RewardResult`, never as a silent 0.0.

Built-in rewards (see ``docs/rewards.md``): ``math``, ``choice``, ``exact_match``,
``reasoning_gym``, ``verifier`` (routing), ``environment`` (an episode its environment scores),
``format``, ``think_format``, ``repetition_penalty``, ``cosine_length``, ``length_penalty``,
``overlong``, ``code`` (sandboxed), ``ifeval``, ``judge``, ``reward_model``,
``reward_model_group``, ``majority_vote``, ``self_certainty``, ``confidence``; for role games
``generated_tests``, ``test_discrimination``, ``verdict_agreement``.
"""

from rlvr.rewards.extract import EXTRACT_MODES, extract_answer
from rlvr.rewards.pool import RewardPool, RewardResult
from rlvr.rewards.registry import (
    get_reward,
    list_rewards,
    register_group_reward,
    register_reward,
)
from rlvr.rewards.spec import RewardSpec

__all__ = [
    "EXTRACT_MODES",
    "RewardPool",
    "RewardResult",
    "RewardSpec",
    "extract_answer",
    "get_reward",
    "list_rewards",
    "register_group_reward",
    "register_reward",
]
