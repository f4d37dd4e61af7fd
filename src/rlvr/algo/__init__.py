"""Algorithm pieces as pure tensor functions, registered by name (DESIGN.md, principle 1)."""

from rlvr.algo.advantages import ADVANTAGE_ESTIMATORS, group_mean, group_std, grpo_advantages
from rlvr.algo.aggregate import AGGREGATIONS, token_weights
from rlvr.algo.filters import informative_groups
from rlvr.algo.kl import KL_ESTIMATORS
from rlvr.algo.losses import POLICY_LOSSES, ppo_clip_loss

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "POLICY_LOSSES",
    "grpo_advantages",
    "group_mean",
    "group_std",
    "informative_groups",
    "ppo_clip_loss",
    "token_weights",
]
