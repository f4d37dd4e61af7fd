"""GiGPO: step-level groups built after the fact from the states a group's episodes share.

Episode-level GRPO gives every turn of an episode the same advantage: a game won in 9 moves, 5 of
them into a wall, credits the wall moves like the good ones. GiGPO (Group-in-Group Policy
Optimization; no seed abstract, built as ROLL implements it) adds a second,
step-level group without any extra rollout: the G episodes of one prompt start from the same state
and often pass through the same states again (the same square of a lake, the same range of
numbers), so the turns taken *in one state* across the group form a group of their own, and each
turn's discounted return is compared with the others taken in that state.

For turn ``t`` of episode ``i`` in group ``g``::

    A = A_episode(i) + step_weight · A_step(i, t)
    A_episode(i)  = (R_i − mean_g R) / std_g R                  (GRPO over the episode returns)
    G_{i,t}       = r_{i,t} + discount · G_{i,t+1}              (discounted return from turn t on)
    A_step(i, t)  = (G_{i,t} − mean_S G) / std_S G              over S = the turns of group g taken
                                                                in state s_{i,t} (any episode, any t)

A state seen once in the group (or in episodes whose returns from it are equal) gives
``A_step = 0``: the turn gets the episode advantage alone, as in GRPO. With ``normalize_std``
false neither part is divided by its std (the "mean" normalisation of the GiGPO paper). With a
sparse final reward, ``discount < 1`` is what tells a wall move from a step forward: a move that
leaves the player in place reaches the goal one turn later, so its return is ``discount`` times the
next turn's.

The trainer offers ``turn_rewards`` (each turn's reward; the outcome is added to the last turn, so
a row sums to the episode return), ``turn_states`` (:meth:`rlvr.envs.base.Environment.state` before
each turn; None: not grouped) and ``turn_lengths`` (each turn's trained tokens) to an estimator that
names them; the advantages come back as [N, T] over the trained tokens in order.
"""

from __future__ import annotations

import torch

from rlvr.algo.advantages import ADVANTAGE_ESTIMATORS, _scale, group_count, group_mean, group_std


def discounted_returns(rewards: list[float], discount: float) -> list[float]:
    """``G_t = r_t + discount · G_{t+1}`` for every turn ``t`` (the last turn's return is its reward)."""
    out, running = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        running = rewards[t] + discount * running
        out[t] = running
    return out


def step_group_index(group_index: torch.Tensor, turn_states: list[list[str | None]]) -> list[list[int]]:
    """A step-group id for every turn: turns of one group taken in equal states share an id; a turn
    with no state (None) gets an id of its own."""
    ids: dict[tuple[int, str], int] = {}
    out: list[list[int]] = []
    fresh = 0
    for row, states in enumerate(turn_states):
        row_ids = []
        for state in states:
            if state is None:
                key: tuple[int, str] | None = None
            else:
                key = (int(group_index[row]), state)
            if key is None or key not in ids:
                number = fresh
                fresh += 1
                if key is not None:
                    ids[key] = number
            else:
                number = ids[key]
            row_ids.append(number)
        out.append(row_ids)
    return out


def step_advantages(
    group_index: torch.Tensor,
    turn_rewards: list[list[float]],
    turn_states: list[list[str | None]],
    discount: float,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> tuple[list[list[float]], list[list[int]]]:
    """``A_step`` of every turn (see the module docstring) and the step-group id of every turn."""
    if len(turn_rewards) != len(turn_states) or any(
        len(r) != len(s) for r, s in zip(turn_rewards, turn_states, strict=True)
    ):
        raise ValueError("gigpo: turn_rewards and turn_states must hold one entry per turn of each episode")
    ids = step_group_index(group_index, turn_states)
    returns = [discounted_returns(r, discount) for r in turn_rewards]
    flat_returns = torch.tensor([g for row in returns for g in row], dtype=torch.float64)
    flat_ids = torch.tensor([i for row in ids for i in row], dtype=torch.long)
    if not flat_ids.numel():
        return [[] for _ in turn_rewards], ids
    centered = flat_returns - group_mean(flat_returns, flat_ids)
    if normalize_std:
        centered = _scale(centered, group_std(flat_returns, flat_ids), eps)
    values, at = centered.tolist(), 0
    out = []
    for row in ids:
        out.append(values[at : at + len(row)])
        at += len(row)
    return out, ids


@ADVANTAGE_ESTIMATORS.register("gigpo")
def gigpo_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    turn_rewards: list[list[float]],
    turn_states: list[list[str | None]],
    turn_lengths: list[list[int]],
    step_weight: float = 1.0,
    discount: float = 0.95,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """GiGPO advantages [N, T]: every token of turn ``t`` of episode ``i`` gets
    ``A_episode(i) + step_weight · A_step(i, t)`` (module docstring); T is the most trained tokens
    of a row, and a row's tokens past its turns get 0.

    ``rewards`` [N] is not read: the episode return is the sum of the episode's ``turn_rewards``
    (which hold the outcome on the last turn), so the two parts see the same rewards.
    """
    del rewards  # the returns come from turn_rewards
    if not len(turn_rewards) == len(turn_lengths) == group_index.numel():
        raise ValueError("gigpo: one list of turn rewards, states and lengths per episode")
    if any(len(r) != len(n) for r, n in zip(turn_rewards, turn_lengths, strict=True)):
        raise ValueError("gigpo: turn_rewards and turn_lengths must hold one entry per turn of each episode")
    episode = torch.tensor([sum(r) for r in turn_rewards], dtype=torch.float64)
    episode_adv = episode - group_mean(episode, group_index)
    if normalize_std:
        episode_adv = _scale(episode_adv, group_std(episode, group_index), eps)
    steps, _ = step_advantages(group_index, turn_rewards, turn_states, discount, normalize_std, eps)
    width = max((sum(n) for n in turn_lengths), default=0)
    out = torch.zeros(len(turn_lengths), width, dtype=torch.float64)
    for row, lengths in enumerate(turn_lengths):
        at = 0
        for length, step in zip(lengths, steps[row], strict=True):
            out[row, at : at + length] = float(episode_adv[row]) + step_weight * step
            at += length
    return out.float()


def step_group_metrics(group_index: torch.Tensor, turn_states: list[list[str | None]]) -> dict[str, float]:
    """``gigpo/grouped_turns``: the share of turns whose state another turn of their group shared
    (they get a step advantage); ``gigpo/step_group_size``: the size of a grouped turn's step group,
    averaged over those turns."""
    ids = [i for row in step_group_index(group_index, turn_states) for i in row]
    if not ids:
        return {"gigpo/grouped_turns": 0.0, "gigpo/step_group_size": 0.0}
    flat = torch.tensor(ids)
    sizes = group_count(torch.ones(len(ids)), flat)
    grouped = sizes > 1
    mean_size = float(sizes[grouped].mean()) if bool(grouped.any()) else 0.0
    return {"gigpo/grouped_turns": float(grouped.float().mean()), "gigpo/step_group_size": mean_size}
