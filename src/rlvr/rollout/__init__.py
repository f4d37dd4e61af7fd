"""Rollout engines: generate completions as token ids with their sampling logprobs."""

from rlvr.rollout.base import Completion, RolloutEngine, SamplingParams
from rlvr.rollout.hf_engine import HFEngine

__all__ = ["Completion", "HFEngine", "RolloutEngine", "SamplingParams"]
