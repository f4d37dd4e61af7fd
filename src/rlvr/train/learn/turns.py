"""Token-level credit over multi-turn ledgers: the estimator sees only the model's own tokens.

A multi-turn response row is a ledger: the model's turns (trained) interleaved with the
environment's messages (context, attended to but never trained on). Token-level estimators (GAE,
an in-reward KL penalty) assume a *prefix* mask: the trained tokens first, then padding, the
sequence reward on the last trained token. :class:`SampledLayout` gives them that: it gathers each
row's sampled tokens into a left-aligned prefix, the estimator runs there (GAE's recursion steps
from one model token to the next, across the environment's messages), and the results are
scattered back to the ledger. For a single-turn batch the mask already is a prefix and the layout
is the identity, so nothing changes bit for bit.

Turn rewards (an environment's :attr:`~rlvr.envs.base.Step.reward`) are placed on each turn's last
sampled token (:func:`turn_end_rewards`); an estimator that takes ``token_rewards`` sees them
there, any other gets their sum added to the sequence reward (``rlvr.train.learn.estimate``).

``algo.turn_advantage: turn`` gives each turn its own advantage (:func:`turn_advantages`): the
discounted return from that turn on, minus the group's mean episode return, over the group's
episode-return std (``grpo``) or not scaled (``dr_grpo``). With no intermediate rewards and
discount 1 every turn's return is the episode's, and the advantages equal ``trajectory`` mode's.
"""

from __future__ import annotations

import inspect

import torch

from rlvr.algo.advantages import _scale, group_mean, group_std
from rlvr.trajectory import Trajectory

TURN_MODE_ESTIMATORS = {"grpo": True, "dr_grpo": False}  # estimator -> scales by the group std


class SampledLayout:
    """Where each row's sampled tokens are: ``compact`` moves [N, T] ledger tensors to [N, S]
    (S = most sampled tokens in a row, left-aligned), ``expand`` moves [N, S] back (0 elsewhere)."""

    def __init__(self, mask: torch.Tensor) -> None:
        valid = mask > 0
        self.lengths = valid.sum(dim=1)
        width = int(self.lengths.max()) if valid.numel() else 0
        prefix = torch.arange(mask.shape[1], device=mask.device)[None, :] < self.lengths[:, None]
        self.identity = bool((valid == prefix).all())
        self.shape, self.width = tuple(mask.shape), width
        # position of the k-th sampled token of each row (rows shorter than S point at column 0)
        order = torch.where(valid, torch.arange(mask.shape[1], device=mask.device), mask.shape[1])
        self.index = order.sort(dim=1).values[:, :width].clamp(max=max(mask.shape[1] - 1, 0))
        self.compact_mask = torch.arange(width, device=mask.device)[None, :] < self.lengths[:, None]

    def compact(self, values: torch.Tensor) -> torch.Tensor:
        if self.identity:
            return values
        gathered = values.gather(1, self.index.to(values.device))
        return torch.where(self.compact_mask.to(values.device), gathered, torch.zeros_like(gathered))

    def expand(self, values: torch.Tensor) -> torch.Tensor:
        if self.identity or values.dim() == 1:
            return values
        out = values.new_zeros(self.shape)
        kept = torch.where(self.compact_mask.to(values.device), values, torch.zeros_like(values))
        return out.scatter_add_(1, self.index.to(values.device), kept)


def _turn_lengths(t: Trajectory) -> list[int]:
    return [len(s.token_ids) for s in t.segments if s.kind == "sampled"]


def has_turn_rewards(trajectories: list[Trajectory]) -> bool:
    return any(r != 0.0 for t in trajectories for r in t.turn_rewards)


def outcome_rewards(trajectories: list[Trajectory]) -> torch.Tensor:
    """Each trajectory's reward without its turn rewards (what the final answer alone earned)."""
    return torch.tensor([float(t.reward) - sum(t.turn_rewards) for t in trajectories], dtype=torch.float32)


def turn_end_rewards(trajectories: list[Trajectory], width: int) -> torch.Tensor:
    """[N, width] in the compact layout: turn ``k``'s reward on the last token of sampled turn ``k``
    (a reward for a turn with no tokens, or beyond the sampled turns, goes on the last token)."""
    out = torch.zeros(len(trajectories), width)
    for row, t in enumerate(trajectories):
        ends, at = [], 0
        for n in _turn_lengths(t):
            at += n
            ends.append(at - 1)
        if not ends or ends[-1] < 0:
            continue
        for k, reward in enumerate(t.turn_rewards):
            column = ends[min(k, len(ends) - 1)]
            out[row, max(column, 0)] += reward
    return out


def turn_returns(trajectories: list[Trajectory], discount: float) -> list[list[float]]:
    """Per trajectory, the discounted return from each sampled turn on: turn ``k``'s own reward plus
    ``discount`` times the next turn's return; the outcome (final answer) reward counts at the last."""
    out = []
    for t in trajectories:
        turns = max(len(_turn_lengths(t)), 1)
        rewards = [0.0] * turns
        for k, reward in enumerate(t.turn_rewards):
            rewards[min(k, turns - 1)] += reward
        rewards[-1] += float(t.reward) - sum(t.turn_rewards)
        returns, running = [0.0] * turns, 0.0
        for k in reversed(range(turns)):
            running = rewards[k] + discount * running
            returns[k] = running
        out.append(returns)
    return out


def turn_context(trajectories: list[Trajectory]) -> dict[str, list]:
    """What an estimator of per-turn credit names (``gigpo``), one list per trajectory and one entry
    per trained segment in ledger order: ``turn_lengths`` (its tokens), ``turn_rewards`` (the turn's
    reward; the outcome on the last sampled turn, so a row sums to the trajectory's reward) and
    ``turn_states`` (the environment's state before the turn; None for a given segment or where the
    environment reported none)."""
    lengths, rewards, states = [], [], []
    for t in trajectories:
        row_lengths, row_rewards, row_states, k = [], [], [], 0
        last = None
        for segment in t.segments:
            if segment.kind == "context":
                continue
            row_lengths.append(len(segment.token_ids))
            sampled = segment.kind == "sampled"
            row_rewards.append(float(t.turn_rewards[k]) if sampled and k < len(t.turn_rewards) else 0.0)
            row_states.append(t.turn_states[k] if sampled and k < len(t.turn_states) else None)
            if sampled:
                last, k = len(row_rewards) - 1, k + 1
        if last is not None:  # the outcome, and turn rewards past the sampled turns, on the last turn
            row_rewards[last] += float(t.reward or 0.0) - sum(row_rewards)
        lengths.append(row_lengths)
        rewards.append(row_rewards)
        states.append(row_states)
    return {"turn_lengths": lengths, "turn_rewards": rewards, "turn_states": states}


def step_token_rewards(trajectories: list[Trajectory], width: int) -> torch.Tensor:
    """[N, width] in the ledger layout: each step reward of a trajectory on its step's last token
    (``Trajectory.step_ends``, from :mod:`rlvr.collect.steps`)."""
    out = torch.zeros(len(trajectories), width)
    for row, t in enumerate(trajectories):
        if not t.step_rewards:  # no step rewards (its ends may be recorded for PRIME's steps)
            continue
        for reward, end in zip(t.step_rewards, t.step_ends, strict=True):
            out[row, min(max(end, 0), width - 1)] += reward
    return out


def check_step_rewards(algo, estimator) -> None:
    """A reward returned per-step rewards: refuse an estimator that would not put them on the steps
    (one that takes no ``token_rewards``, or turn mode, which credits whole turns)."""
    from rlvr.errors import RlvrError

    takes_tokens = "token_rewards" in inspect.signature(estimator).parameters
    if algo.turn_advantage == "turn" or not takes_tokens:
        raise RlvrError(
            f"a reward returned per-step rewards ('steps'), but algo.advantage '{algo.advantage}'"
            f"{' with algo.turn_advantage: turn' if algo.turn_advantage == 'turn' else ''} takes one "
            "reward per sequence and would lose where they are; use algo.advantage: step_returns "
            "(group-relative returns-to-go) or gae, or return a number instead of 'steps'"
        )


def turn_advantages(
    trajectories: list[Trajectory],
    group_index: torch.Tensor,
    width: int,
    discount: float,
    normalize_std: bool,
    eps: float = 1e-6,
) -> torch.Tensor:
    """[N, width] ledger-layout advantages: every token of turn ``k`` gets
    ``(G_k − mean_group(G_0)) / std_group(G_0)`` (no division when ``normalize_std`` is false)."""
    returns = turn_returns(trajectories, discount)
    first = torch.tensor([r[0] for r in returns], dtype=torch.float32)
    baseline = group_mean(first, group_index)
    spread = group_std(first, group_index) if normalize_std else None
    out = torch.zeros(len(trajectories), width)
    for row, t in enumerate(trajectories):
        at, k = 0, 0
        for segment in t.segments:
            n = len(segment.token_ids)
            if segment.kind == "sampled":
                value = torch.tensor(returns[row][k]) - baseline[row]
                if spread is not None:
                    value = _scale(value, spread[row], eps)
                out[row, at : at + n] = value
                k += 1
            at += n
    return out
