"""Rejection-sampling fine-tuning (RFT): SFT on the policy's own samples that the verifier accepts.

Each step is a *round*: the collector samples ``rollout.group_size`` completions for each of
``rollout.prompts_per_step`` prompts and scores them; the completions whose reward is at least
``rft.min_reward`` are accepted, ``rft.keep`` picks which of a prompt's accepted ones are kept (all,
the shortest, the best), and the kept ones are trained on with cross-entropy
(:class:`rlvr.train.stages.sft.CrossEntropy`, ``rft.epochs`` passes). The rounds repeat with the
improved policy: rejection-sampling SFT and expert iteration (seeds/001:67, seeds/002:17,
seeds/003:364, seeds/003:270).

Two choices the RL collector makes the other way:

- dynamic sampling (``algo.dynamic_sampling``) drops groups whose rewards are all equal, which for
  RL carry no signal; for RFT a prompt solved by every sample is exactly the data it keeps. So
  :class:`VerifiedSource` does not call :meth:`Collector.collect` (the filter) but samples the
  sampler's next prompts with :meth:`Collector.sample_groups`, as ``collect`` does inside, spread
  over the ranks the same way;
- a completion is accepted only if it scored without a reward error and, unless
  ``rft.keep_truncated``, was not cut at ``rollout.max_new_tokens`` (``finish_reason`` length): a
  cut completion has no end-of-turn token, so training on it would teach the model not to stop,
  however its answer scored (``rft/rejected_cut`` counts the ones refused for that alone).

The trajectories log (``train.log_trajectories``) marks ``kept`` per group; so ``seen`` holds each
prompt's samples split in two groups, the kept ones (``kept: true``) and the others, and the file's
kept rows are exactly the round's training data. The ``groups/skipped/*`` counts therefore count
those rejected parts. A round that accepts nothing makes no update (``update/skipped``, with
``rft/kept_trajectories`` 0 saying why).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlvr.collect.records import reward_metrics
from rlvr.trajectory import Trajectory, TrajectoryGroup

if TYPE_CHECKING:
    from rlvr.collect.collector import Collection, Collector
    from rlvr.config import RunConfig
    from rlvr.config.stages import RftConfig


def verified(t: Trajectory, min_reward: float) -> bool:
    """Whether the verifier accepts ``t``'s answer: scored without error, at least ``min_reward``,
    with tokens to train on."""
    return t.reward is not None and not t.errors and t.reward >= min_reward and t.num_trained > 0


def accepted(t: Trajectory, cfg: RftConfig) -> bool:
    """Verified, and complete (not cut at the token limit) unless ``rft.keep_truncated``."""
    return verified(t, cfg.min_reward) and (cfg.keep_truncated or t.finish_reason != "length")


def choose(trajectories: list[Trajectory], cfg: RftConfig) -> list[Trajectory]:
    """The accepted trajectories of one prompt that are kept: all, the shortest (fewest trained
    tokens) or the best (highest reward, then the shortest); ties go to the first sampled."""
    ok = [t for t in trajectories if accepted(t, cfg)]
    if not ok or cfg.keep == "all":
        return ok
    if cfg.keep == "shortest":
        return [min(ok, key=lambda t: t.num_trained)]
    return [max(ok, key=lambda t: (t.reward, -t.num_trained))]


class VerifiedSource:
    """A :class:`~rlvr.train.stages.base.Source` of the verifier-accepted samples of each round."""

    def __init__(self, cfg: RunConfig, collector: Collector) -> None:
        self.cfg, self.collector = cfg, collector

    def collect(self, count: int | None = None, greedy_baseline: bool = False) -> Collection:
        """One round: ``count`` prompts (default ``rollout.prompts_per_step``) sampled and scored,
        filtered to the kept trajectories (``kept``); every sample is in ``seen``."""
        from rlvr.collect.collector import Collection

        c = self.collector
        c.round += 1  # the step the prompt history records these groups at
        sampled = c.sample_round(count or self.cfg.rollout.prompts_per_step)
        kept: list[TrajectoryGroup] = []
        seen: list[TrajectoryGroup] = []
        accepted_count = cut = 0
        for group in sampled:
            accepted_count += sum(accepted(t, self.cfg.rft) for t in group.trajectories)
            cut += sum(
                verified(t, self.cfg.rft.min_reward) and not accepted(t, self.cfg.rft)
                for t in group.trajectories
            )
            chosen = choose(group.trajectories, self.cfg.rft)
            rest = [t for t in group.trajectories if all(t is not k for k in chosen)]
            if chosen:
                kept.append(TrajectoryGroup(group.example_index, chosen, group.baseline_reward))
                seen.append(kept[-1])
            if rest:
                seen.append(TrajectoryGroup(group.example_index, rest, group.baseline_reward))
        total = sum(len(g) for g in sampled)
        kept_count = sum(len(g) for g in kept)
        metrics = {
            "groups/sampled": float(len(sampled)),
            "groups/kept": float(len(kept)),
            **reward_metrics(sampled, c.correctness),
            "rft/accepted_trajectories": float(accepted_count),
            "rft/rejected_cut": float(cut),
            "rft/kept_trajectories": float(kept_count),
            "rft/kept_share": kept_count / max(total, 1),
            "rft/kept_tokens": float(sum(t.num_trained for g in kept for t in g.trajectories)),
        }
        return Collection(kept, seen, metrics)

    def state(self) -> dict[str, Any]:
        return self.collector.state()

    def load_state(self, state: dict[str, Any]) -> None:
        self.collector.load_state(state)
