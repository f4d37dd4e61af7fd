"""Algorithm pieces as pure tensor functions, registered by name (docs/design.md, principle 1).

Importing this package registers every estimator and loss: each module registers its own.
"""

from rlvr.algo.adaptive_clip import bapo_loss
from rlvr.algo.advantages import (
    ADVANTAGE_ESTIMATORS,
    group_count,
    group_mean,
    group_std,
    grpo_advantages,
)
from rlvr.algo.aggregate import AGGREGATIONS, token_weights
from rlvr.algo.astar_po import astar_po_advantages, astar_po_loss
from rlvr.algo.c3po import c3po_advantages
from rlvr.algo.care import grpo_care_advantages
from rlvr.algo.contrastive import copg_loss
from rlvr.algo.demo_mix import chord_mu, chord_token_weights, luffy_loss, sft_token_loss
from rlvr.algo.distill import (
    DIVERGENCES,
    check_same_vocabulary,
    opd_token_advantages,
    vocab_width,
)
from rlvr.algo.entropy import adaptive_entropy_coef, entropy_bonus_loss, positive_entropy_loss
from rlvr.algo.filters import informative_groups, overlong_mask
from rlvr.algo.gae import gae_advantages_and_returns, value_loss
from rlvr.algo.gigpo import gigpo_advantages
from rlvr.algo.grip import grip_advantages
from rlvr.algo.hicra import hicra_loss
from rlvr.algo.importance import masked_is_loss, tis_loss
from rlvr.algo.kl import KL_ESTIMATORS, adaptive_kl_coef, kl_penalized_rewards
from rlvr.algo.losses import POLICY_LOSSES, inner_loss, ppo_clip_loss
from rlvr.algo.lowprob import lowprob_downweight_loss
from rlvr.algo.momentum import aapo_advantages
from rlvr.algo.multi_reward import gdpo_advantages
from rlvr.algo.passk import passk_advantages
from rlvr.algo.preference import PREFERENCE_LOSSES, preference_metrics
from rlvr.algo.ranking import arenarl_advantages
from rlvr.algo.rebn import rebn_advantages
from rlvr.algo.shaping import REWARD_SHAPERS, adaptive_length_penalty
from rlvr.algo.shiq import shiq_loss
from rlvr.algo.sparse_signal import gream_advantages, grpovi_advantages, lens_advantages
from rlvr.algo.step_returns import step_returns_advantages
from rlvr.algo.supervised import pacs_loss
from rlvr.algo.tempo import tempo_advantages
from rlvr.algo.token_selection import clip_cov_loss, forking_tokens_loss, kl_cov_loss
from rlvr.algo.token_weighting import tea_rl_loss, token_reweight_loss
from rlvr.algo.trepo import trepo_advantages
from rlvr.algo.vapo import vapo_advantages
from rlvr.algo.vine import vine_advantages

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATIONS",
    "DIVERGENCES",
    "KL_ESTIMATORS",
    "POLICY_LOSSES",
    "PREFERENCE_LOSSES",
    "REWARD_SHAPERS",
    "aapo_advantages",
    "adaptive_entropy_coef",
    "adaptive_kl_coef",
    "adaptive_length_penalty",
    "arenarl_advantages",
    "astar_po_advantages",
    "astar_po_loss",
    "bapo_loss",
    "c3po_advantages",
    "check_same_vocabulary",
    "chord_mu",
    "chord_token_weights",
    "clip_cov_loss",
    "copg_loss",
    "entropy_bonus_loss",
    "forking_tokens_loss",
    "gae_advantages_and_returns",
    "gdpo_advantages",
    "grpo_care_advantages",
    "gigpo_advantages",
    "grip_advantages",
    "gream_advantages",
    "group_count",
    "group_mean",
    "group_std",
    "grpo_advantages",
    "grpovi_advantages",
    "hicra_loss",
    "informative_groups",
    "inner_loss",
    "kl_cov_loss",
    "kl_penalized_rewards",
    "lens_advantages",
    "lowprob_downweight_loss",
    "luffy_loss",
    "masked_is_loss",
    "opd_token_advantages",
    "overlong_mask",
    "pacs_loss",
    "passk_advantages",
    "positive_entropy_loss",
    "ppo_clip_loss",
    "preference_metrics",
    "rebn_advantages",
    "sft_token_loss",
    "shiq_loss",
    "tea_rl_loss",
    "tempo_advantages",
    "tis_loss",
    "token_reweight_loss",
    "trepo_advantages",
    "vapo_advantages",
    "step_returns_advantages",
    "vine_advantages",
    "token_weights",
    "value_loss",
    "vocab_width",
]
