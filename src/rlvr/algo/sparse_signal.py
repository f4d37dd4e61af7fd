"""Estimators that keep a learning signal where GRPO's is weak: GRPOVI, LENS and GREAM's SRPO.

**GRPOVI** (GRPO with reward Variance Increase; seeds 004:13). A larger reward variance of the
policy speeds RLHF up, so before GRPO's normalisation each group's rewards are replaced by the
rewards of largest variance that (a) keep their order (a better completion never ends below a
worse one; tied rewards stay tied), (b) keep the group mean and (c) stay within ``[low, high]``.
Maximising a convex function over that polytope is attained at a vertex, and the vertices are
"pushed to the bounds" vectors: the lowest reward levels all set to ``low``, the highest all set to
``high``, one block of consecutive levels in between at the common value that restores the mean.
:func:`increase_variance` enumerates those blocks (O(m²) for m distinct rewards in a group, cheap for
group sizes; the paper's algorithm is O(n log n)) and keeps the rewards unchanged unless a vertex
has strictly larger variance. The abstract does not say what bounds the rewards; here the default
is each group's own range (``low``/``high`` unset), or a fixed reward range when given. With 0/1
rewards the rewards are already at the bounds and GRPOVI is GRPO, the abstract's "indirect
explanation" of why GRPO works with rule-based rewards. Ties are allowed to form: the optimum
may merge distinct rewards into one level (e.g. 0/0.4/0.6/1 becomes 0/0/1/1).

**LENS** (Likelihood Estimation with Negative Samples; seeds 003:354). A group with no correct
completion has zero GRPO advantage. LENS derives from a reward-model MLE objective a policy gradient
whose value adds a *confidence-weighted penalty on incorrect responses*, larger for more confident
mistakes. Here: ``A_i = grpo(r)_i − penalty · c_i · [r_i < success_threshold]`` with ``c_i`` the
completion's confidence, the geometric mean of its sampled tokens' probabilities,
``exp(mean_t log π(y_t))``. The penalty is added after the group baseline, so an all-wrong group
gets ``−penalty · c_i``: every mistake is pushed down, a confident one harder. The confidence needs
the completion's sampled log-probs (``sampling_logprobs`` [N, T], its first ``lengths[i]`` entries
valid, the prefix layout of ``token_rewards``). The trainer does not offer them to estimators yet
(only to losses); until it does, every incorrect completion gets ``default_confidence`` (1): the
penalty is then uniform, still signal for all-wrong groups (like negative sample reinforcement)
but without the confidence grading.

**GREAM / SRPO** (Sparse-Regularized Group Policy Optimization, the RL stage of GREAM; seeds
003:326; not the self-reflection SRPO of seeds 000:22, which is a reward for reflections).
"Bonus-Calibrated Group Advantage Estimation ... despite sparse successes": a successful completion
gets a bonus calibrated to how rare success is in its group, ``r'_i = r_i + bonus · (1 − p_g) ·
s_i`` (``s_i`` = reward ≥ ``success_threshold``, ``p_g`` = its group's success rate), and the
advantage is ``r'_i`` minus its group mean, by default without GRPO's std division. With 0/1
rewards this scales a group's Dr. GRPO advantages by ``1 + bonus · (1 − p_g)``: a lone success in a
large group is amplified by at most ``1 + bonus`` (GRPO's ``1/std`` grows without bound as
``p_g → 0`` and equally as ``p_g → 1``), an all-solved group gets no bonus. The abstract gives no
formula; this is a choice. Its "Residual-Sensitive Verifiable Reward" is a reward, not an
estimator, and is not built here.
"""

from __future__ import annotations

import torch

from rlvr.algo.advantages import ADVANTAGE_ESTIMATORS, _scale, group_mean, group_std, grpo_advantages

_TOL = 1e-9


def _max_variance_levels(values: list[float], low: float, high: float) -> dict[float, float]:
    """Map each distinct value of one group to its variance-maximising level (module docstring)."""
    levels = sorted(set(values))
    counts = [values.count(v) for v in levels]
    n, total = len(values), sum(values)
    before = [0]
    for c in counts:
        before.append(before[-1] + c)
    best = sum(v * v for v in values)  # the mean is fixed, so the largest Σx² is the largest variance
    best_map = {v: v for v in levels}
    m = len(levels)
    for a in range(m):  # levels[:a] -> low, levels[a:b] -> the block value, levels[b:] -> high
        for b in range(a + 1, m + 1):
            n_low, n_high = before[a], n - before[b]
            n_mid = n - n_low - n_high
            mid = (total - n_low * low - n_high * high) / n_mid
            if mid < low - _TOL or mid > high + _TOL:
                continue
            mid = min(max(mid, low), high)
            square_sum = n_low * low * low + n_mid * mid * mid + n_high * high * high
            if square_sum > best + _TOL * (1.0 + abs(best)):
                best = square_sum
                best_map = {v: (low if j < a else high if j >= b else mid) for j, v in enumerate(levels)}
    return best_map


def increase_variance(
    rewards: torch.Tensor, group_index: torch.Tensor, low: float | None = None, high: float | None = None
) -> torch.Tensor:
    """GRPOVI's reward adjustment: per group, the order-, tie- and mean-preserving rewards in
    ``[low, high]`` of largest variance (``low``/``high`` unset: the group's own min/max)."""
    if low is not None and high is not None and low > high:
        raise ValueError(f"grpovi: low must be <= high, got low={low}, high={high}")
    values, groups = rewards.tolist(), group_index.tolist()
    members: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    out = list(values)
    for rows in members.values():
        group = [values[i] for i in rows]
        lo = min(group) if low is None else low
        hi = max(group) if high is None else high
        if min(group) < lo - _TOL:
            raise ValueError(f"grpovi: low={low} is above a reward of {min(group)}")
        if max(group) > hi + _TOL:
            raise ValueError(f"grpovi: high={high} is below a reward of {max(group)}")
        mapping = _max_variance_levels(group, lo, hi)
        for i in rows:
            out[i] = mapping[values[i]]
    return torch.tensor(out, dtype=rewards.dtype, device=rewards.device).reshape(rewards.shape)


@ADVANTAGE_ESTIMATORS.register("grpovi")
def grpovi_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    low: float | None = None,
    high: float | None = None,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """GRPOVI (seeds 004:13): GRPO on :func:`increase_variance`'s adjusted rewards."""
    adjusted = increase_variance(rewards, group_index, low, high)
    return grpo_advantages(adjusted, group_index, normalize_std, eps)


def sequence_confidence(sampling_logprobs: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``exp(mean log-prob)`` over each row's first ``lengths[i]`` tokens [N]; 0 for an empty row."""
    if sampling_logprobs.dim() != 2 or sampling_logprobs.shape[0] != lengths.shape[0]:
        raise ValueError(
            f"lens: sampling_logprobs {tuple(sampling_logprobs.shape)} must be [N={lengths.shape[0]}, T]"
        )
    width = sampling_logprobs.shape[1]
    valid = torch.arange(width, device=lengths.device)[None, :] < lengths[:, None]
    total = torch.where(valid, sampling_logprobs, torch.zeros_like(sampling_logprobs)).sum(dim=1)
    count = valid.sum(dim=1).to(sampling_logprobs.dtype)
    return torch.where(count > 0, (total / count.clamp(min=1)).exp(), torch.zeros_like(total))


@ADVANTAGE_ESTIMATORS.register("lens")
def lens_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    lengths: torch.Tensor,
    sampling_logprobs: torch.Tensor,
    penalty: float = 0.5,
    success_threshold: float = 0.5,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """LENS (seeds 003:354): ``grpo(r)_i − penalty · c_i`` for every incorrect completion
    (``r_i < success_threshold``), correct ones keep their GRPO advantage.

    ``c_i`` is :func:`sequence_confidence` of the rollout's ``sampling_logprobs`` [N, T] over each
    row's ``lengths`` [N] sampled tokens (the trainer offers both to an estimator that names them).
    """
    if penalty < 0:
        raise ValueError(f"lens: penalty must be >= 0, got {penalty}")
    if sampling_logprobs.shape[0] != rewards.shape[0] or lengths.shape[0] != rewards.shape[0]:
        raise ValueError(
            f"lens: sampling_logprobs ({tuple(sampling_logprobs.shape)}) and lengths "
            f"({tuple(lengths.shape)}) need one row per reward ({rewards.shape[0]})"
        )
    confidence = sequence_confidence(sampling_logprobs.to(rewards.dtype), lengths).to(rewards.dtype)
    wrong = (rewards < success_threshold).to(rewards.dtype)
    return grpo_advantages(rewards, group_index, normalize_std, eps) - penalty * confidence * wrong


@ADVANTAGE_ESTIMATORS.register("gream")
def gream_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    bonus: float = 1.0,
    success_threshold: float = 0.5,
    normalize_std: bool = False,
    eps: float = 1e-6,
) -> torch.Tensor:
    """SRPO of GREAM (seeds 003:326): ``r + bonus · (1 − p_g) · s`` minus its group mean (module
    docstring); over its group std when ``normalize_std``."""
    if bonus < 0:
        raise ValueError(f"gream: bonus must be >= 0, got {bonus}")
    success = (rewards >= success_threshold).to(rewards.dtype)
    if rewards.numel() == 0:
        return rewards.clone()
    rate = group_mean(success, group_index)
    shaped = rewards + bonus * (1.0 - rate) * success
    advantages = shaped - group_mean(shaped, group_index)
    if normalize_std:
        advantages = _scale(advantages, group_std(shaped, group_index), eps)
    return advantages
