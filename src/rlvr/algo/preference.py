"""Preference losses over (chosen, rejected) pairs: DPO and its relatives.

The direct-alignment losses train on pairs without a reward model; the seeds use them directly
(DPO on constructed preference pairs, seeds 000:7; per-pair weighted DPO, seeds 002:16; DPO and
SimPO with equal-length truncation, seeds 002:21; IPO as a special case of a contrastive policy
gradient, seeds 003:151; the critique of DPO's degenerate optima, seeds 000:24).

Every registered loss has the signature::

    fn(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps,
       chosen_lengths, rejected_lengths, *, beta=0.1, **params) -> (loss [N], stats)

``*_logps`` are log-probs *summed* over each completion's trained tokens, one per pair; the
``ref_*`` ones come from the frozen reference model (precomputed once) and may be None only for a
reference-free loss. ``*_lengths`` are the trained-token counts (float); a loss that averages
divides by them, clamped to at least 1 so that an empty completion gives 0 rather than NaN. The
loss is per pair (the caller takes the mean); the stats are the same for every loss, computed by
:func:`preference_metrics` from the *implicit reward* each loss optimises.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rlvr.registry import Registry

PREFERENCE_LOSSES: Registry = Registry("preference loss")

Tensor = torch.Tensor


def preference_metrics(
    chosen_rewards: Tensor, rejected_rewards: Tensor, chosen_logps: Tensor, rejected_logps: Tensor
) -> dict[str, float]:
    """Means over pairs of the implicit rewards, their margin and accuracy, and the policy's log-probs.

    ``rewards/accuracy`` is the share of pairs the loss already ranks right (chosen reward strictly
    above rejected). ``logps/*`` are reported because a falling ``logps/chosen`` while the margin
    grows is DPO's known failure (both log-probs drop, the rejected one faster).
    """
    with torch.no_grad():
        chosen, rejected = chosen_rewards.detach().float(), rejected_rewards.detach().float()
        return {
            "rewards/chosen": float(chosen.mean()),
            "rewards/rejected": float(rejected.mean()),
            "rewards/margin": float((chosen - rejected).mean()),
            "rewards/accuracy": float((chosen > rejected).float().mean()),
            "logps/chosen": float(chosen_logps.detach().float().mean()),
            "logps/rejected": float(rejected_logps.detach().float().mean()),
        }


def _check(name: str, beta: float, *refs: Tensor | None) -> None:
    if beta <= 0:
        raise ValueError(f"{name}: beta must be > 0, got {beta}")
    if any(ref is None for ref in refs):
        raise ValueError(
            f"{name} needs reference log-probs (ref_chosen_logps, ref_rejected_logps), got None; "
            "use a reference-free loss such as 'simpo' to train without a reference model"
        )


def _per_token(logps: Tensor, lengths: Tensor) -> Tensor:
    return logps / lengths.clamp(min=1.0)


def _sigmoid_loss(scaled: Tensor, label_smoothing: float) -> Tensor:
    """``−(1−ε)·log σ(z) − ε·log σ(−z)``: Bradley–Terry NLL, and with ε > 0 conservative DPO (cDPO).

    cDPO assumes each label is flipped with probability ε; the loss then no longer drives the margin
    to infinity (its minimum sits at a finite margin, log((1−ε)/ε)).
    """
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must be in [0, 0.5), got {label_smoothing}")
    return -(1.0 - label_smoothing) * F.logsigmoid(scaled) - label_smoothing * F.logsigmoid(-scaled)


@PREFERENCE_LOSSES.register("dpo")
def dpo_loss(
    chosen_logps: Tensor,
    rejected_logps: Tensor,
    ref_chosen_logps: Tensor | None,
    ref_rejected_logps: Tensor | None,
    chosen_lengths: Tensor,
    rejected_lengths: Tensor,
    *,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
) -> tuple[Tensor, dict[str, float]]:
    """DPO (Rafailov et al., 2023): ``−log σ(β·(log-ratio_chosen − log-ratio_rejected))``.

    The log-ratio ``log π/π_ref`` of a whole completion is DPO's implicit reward (times β); the loss
    is the Bradley–Terry likelihood that the chosen one wins. ``label_smoothing`` ε > 0 is the
    conservative form (cDPO, TRL's ``label_smoothing``) for noisy preference labels.
    """
    _check("dpo", beta, ref_chosen_logps, ref_rejected_logps)
    chosen = chosen_logps - ref_chosen_logps
    rejected = rejected_logps - ref_rejected_logps
    loss = _sigmoid_loss(beta * (chosen - rejected), label_smoothing)
    return loss, preference_metrics(beta * chosen, beta * rejected, chosen_logps, rejected_logps)


@PREFERENCE_LOSSES.register("ipo")
def ipo_loss(
    chosen_logps: Tensor,
    rejected_logps: Tensor,
    ref_chosen_logps: Tensor | None,
    ref_rejected_logps: Tensor | None,
    chosen_lengths: Tensor,
    rejected_lengths: Tensor,
    *,
    beta: float = 0.1,
) -> tuple[Tensor, dict[str, float]]:
    """IPO (Azar et al., 2023): ``(h − 1/(2β))²`` on the length-averaged log-ratio difference h.

    DPO's sigmoid keeps pushing the margin when preferences are (near-)deterministic, so the policy
    drifts arbitrarily far from the reference; IPO regresses the margin onto the fixed target
    ``1/(2β)`` instead. As TRL does, h uses per-token *average* log-probs (policy and reference both
    divided by the completion length), which keeps the target meaningful across lengths.
    """
    _check("ipo", beta, ref_chosen_logps, ref_rejected_logps)
    chosen = _per_token(chosen_logps - ref_chosen_logps, chosen_lengths)
    rejected = _per_token(rejected_logps - ref_rejected_logps, rejected_lengths)
    loss = (chosen - rejected - 1.0 / (2.0 * beta)) ** 2
    return loss, preference_metrics(beta * chosen, beta * rejected, chosen_logps, rejected_logps)


@PREFERENCE_LOSSES.register("simpo")
def simpo_loss(
    chosen_logps: Tensor,
    rejected_logps: Tensor,
    ref_chosen_logps: Tensor | None,
    ref_rejected_logps: Tensor | None,
    chosen_lengths: Tensor,
    rejected_lengths: Tensor,
    *,
    beta: float = 0.1,
    gamma: float = 0.5,
    label_smoothing: float = 0.0,
) -> tuple[Tensor, dict[str, float]]:
    """SimPO (Meng et al., 2024): ``−log σ(β·avg_logp_chosen − β·avg_logp_rejected − γ)``, no reference.

    The implicit reward is the *average* log-prob (β times it): the quantity generation ranks by,
    and one that does not favour long completions. The margin γ (TRL's ``simpo_gamma``, default
    0.5) asks the chosen one to win by at least that much. The ``ref_*`` arguments are ignored, so
    no reference model needs to be run. The SimPO paper uses a much larger β (2 to 10) than DPO.
    """
    _check("simpo", beta)
    chosen = beta * _per_token(chosen_logps, chosen_lengths)
    rejected = beta * _per_token(rejected_logps, rejected_lengths)
    loss = _sigmoid_loss(chosen - rejected - gamma, label_smoothing)
    return loss, preference_metrics(chosen, rejected, chosen_logps, rejected_logps)


@PREFERENCE_LOSSES.register("dpo_norm")
def dpo_norm_loss(
    chosen_logps: Tensor,
    rejected_logps: Tensor,
    ref_chosen_logps: Tensor | None,
    ref_rejected_logps: Tensor | None,
    chosen_lengths: Tensor,
    rejected_lengths: Tensor,
    *,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
) -> tuple[Tensor, dict[str, float]]:
    """Length-normalised DPO: each log-ratio divided by its completion's length, then DPO's sigmoid loss.

    Summed log-ratios grow with length, so plain DPO can raise the margin by lengthening chosen
    answers (a known source of verbosity); per-token log-ratios remove that lever. β must then be
    larger than for DPO to give the same margin scale.
    """
    _check("dpo_norm", beta, ref_chosen_logps, ref_rejected_logps)
    chosen = _per_token(chosen_logps - ref_chosen_logps, chosen_lengths)
    rejected = _per_token(rejected_logps - ref_rejected_logps, rejected_lengths)
    loss = _sigmoid_loss(beta * (chosen - rejected), label_smoothing)
    return loss, preference_metrics(beta * chosen, beta * rejected, chosen_logps, rejected_logps)


def bradley_terry_loss(
    chosen_scores: Tensor, rejected_scores: Tensor, margin: float = 0.0
) -> tuple[Tensor, dict[str, float]]:
    """A reward model's Bradley–Terry loss per pair, ``−log σ(s_chosen − s_rejected − margin)``, and
    its stats: ``accuracy`` (chosen scored strictly above rejected), the mean ``margin`` and scores.

    The model's scalar scores play the role of the rewards whose difference the Bradley–Terry
    model turns into the probability that chosen is preferred (the reward-model objective of
    InstructGPT-style RLHF; generative and discriminative verifiers trained from pairs: seeds/002:12).
    """
    if chosen_scores.shape != rejected_scores.shape:
        raise ValueError(
            f"bradley_terry_loss: {tuple(chosen_scores.shape)} chosen vs {tuple(rejected_scores.shape)} "
            "rejected scores; one of each per pair"
        )
    if margin < 0:
        raise ValueError(f"bradley_terry_loss: margin must be >= 0, got {margin}")
    diff = chosen_scores.float() - rejected_scores.float()
    loss = -F.logsigmoid(diff - margin)
    with torch.no_grad():
        stats = {
            "accuracy": float((diff > 0).float().mean()) if diff.numel() else 0.0,
            "margin": float(diff.mean()) if diff.numel() else 0.0,
            "chosen": float(chosen_scores.float().mean()) if diff.numel() else 0.0,
            "rejected": float(rejected_scores.float().mean()) if diff.numel() else 0.0,
        }
    return loss, stats
