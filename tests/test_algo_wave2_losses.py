"""The algorithm zoo's second wave, policy losses: PACS, TEA-RL, perplexity/position reweighting, CoPG.

Each against values worked out by hand on a small batch (the arithmetic is in the comments), both
the per-token loss and its gradient w.r.t. the log-probs, with the edge cases: empty masks, all-zero
advantages, a single token, bad parameters.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from rlvr.algo import POLICY_LOSSES, copg_loss, pacs_loss, tea_rl_loss, token_reweight_loss
from rlvr.algo.token_weighting import entropy_weights, perplexity_weights, position_weights


def _close(a: torch.Tensor, b: list, tol: float = 1e-5) -> None:
    assert torch.allclose(a.detach().float(), torch.tensor(b, dtype=torch.float32), atol=tol), (a.tolist(), b)


def _grad(
    fn, logprobs: torch.Tensor, mask: torch.Tensor, *args, **kw
) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """(loss, d Σ(loss·mask) / d logprobs, stats): the gradient under a plain token-sum aggregation."""
    lp = logprobs.clone().requires_grad_(True)
    loss, stats = fn(lp, *args, mask, **kw) if args else fn(lp, mask, **kw)
    (loss * mask).sum().backward()
    return loss, lp.grad, stats


def _sig(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


# ------------------------------------------------------------------------------------------- PACS
# row 0: valid tokens 0,1; log-ratios 0.5 + 0.5 = 1 (the padding's -6 must not count); A > 0 → y = 1
# row 1: on-policy, A < 0 → y = 0;  row 2: one valid token, A = 0 → no label
PACS_LP = torch.tensor([[-1.0, -2.0, -9.0], [-0.5, -0.5, -0.5], [-1.0, 0.0, 0.0]])
PACS_OLD = torch.tensor([[-1.5, -2.5, -3.0], [-0.5, -0.5, -0.5], [-2.0, 0.0, 0.0]])
PACS_MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])


def test_pacs_bce_of_the_label_against_the_scaled_log_ratio_and_its_gradient() -> None:
    adv = torch.tensor([1.0, -0.5, 0.0])
    loss, grad, stats = _grad(pacs_loss, PACS_LP, PACS_MASK, PACS_OLD, adv, beta=2.0)
    # row 0: ψ = 2·1 = 2, BCE = log(1 + e^-2) = 0.126928; ∂/∂log π_t = β(σ(2) − 1) = 2(0.880797 − 1)
    # row 1: ψ = 0, BCE = log 2 = 0.693147; ∂ = 2(0.5 − 0) = 1;  row 2: no label, nothing
    b0, g0 = math.log1p(math.exp(-2.0)), 2.0 * (_sig(2.0) - 1.0)
    _close(loss * PACS_MASK, [[b0, b0, 0.0], [math.log(2), math.log(2), math.log(2)], [0.0, 0.0, 0.0]])
    _close(grad, [[g0, g0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    assert loss[0, 2] == 0  # padding holds 0, not the sequence's loss
    assert stats["pacs_labelled_frac"] == pytest.approx(2 / 3)
    assert stats["pacs_bce"] == pytest.approx((b0 + math.log(2)) / 2, abs=1e-6)


def test_pacs_gradient_is_the_gradient_of_the_sequence_bce() -> None:
    # the same rows through autograd on BCE(β Σ_t log π/π_old, y) directly: the two must agree
    adv = torch.tensor([1.0, -0.5, 2.0])
    lp = PACS_LP.clone().requires_grad_(True)
    score = 0.7 * ((lp - PACS_OLD) * PACS_MASK).sum(dim=1)
    F.binary_cross_entropy_with_logits(score, torch.tensor([1.0, 0.0, 1.0]), reduction="sum").backward()
    _, grad, _ = _grad(pacs_loss, PACS_LP, PACS_MASK, PACS_OLD, adv, beta=0.7)
    assert torch.allclose(grad, lp.grad * PACS_MASK, atol=1e-6)


def test_pacs_length_norm_per_token_advantages_single_token_and_edges() -> None:
    # length_norm: row 0's ψ = 2·(1/2) = 1, BCE = log(1 + e^-1) = 0.313262, ∂ = 2(σ(1) − 1)/2
    adv = torch.tensor([1.0, -0.5, 0.0])
    loss, grad, _ = _grad(pacs_loss, PACS_LP, PACS_MASK, PACS_OLD, adv, beta=2.0, length_norm=True)
    _close(loss[0, :2], [math.log1p(math.exp(-1.0))] * 2)
    _close(grad[0], [_sig(1.0) - 1.0, _sig(1.0) - 1.0, 0.0])
    _close(grad[1], [1.0 / 3] * 3)  # ψ = 0: β·½ / 3 tokens
    # per-token advantages: row 0's valid mean (1 + 3)/2 > 0 (the padding's −100 ignored) → y = 1;
    # row 2 (a single token, ratio e^1, ψ = 2): mean −1 → y = 0, ∂ = 2σ(2)
    per_tok = torch.tensor([[1.0, 3.0, -100.0], [-1.0, 0.0, 0.5], [-1.0, 5.0, 5.0]])
    _, grad, _ = _grad(pacs_loss, PACS_LP, PACS_MASK, PACS_OLD, per_tok, beta=2.0)
    _close(grad[:, 0], [2.0 * (_sig(2.0) - 1.0), 1.0, 2.0 * _sig(2.0)])
    # all-zero advantages: no labels, no loss, no gradient; an empty mask: finite, nothing
    loss, grad, stats = _grad(pacs_loss, PACS_LP, PACS_MASK, PACS_OLD, torch.zeros(3))
    assert loss.abs().sum() == 0 and grad.abs().sum() == 0 and stats["pacs_bce"] == 0
    loss, grad, stats = _grad(pacs_loss, PACS_LP, torch.zeros(3, 3), PACS_OLD, torch.ones(3))
    assert torch.isfinite(loss).all() and grad.abs().sum() == 0
    assert all(math.isfinite(v) for v in stats.values())
    with pytest.raises(ValueError, match="beta"):
        pacs_loss(PACS_LP, PACS_OLD, adv, PACS_MASK, beta=0.0)


# ----------------------------------------------------------------------------------------- TEA-RL
ENT = torch.tensor([[1.0, 3.0, 9.0], [0.0, 2.0, 9.0]])  # the 9s are padding
MASK2 = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
LP2 = torch.tensor([[-0.5, -1.0, -2.0], [-0.1, -3.0, -2.0]])
ADV2 = torch.tensor([1.0, -2.0])


def test_tea_rl_scales_advantages_by_relative_entropy() -> None:
    # mean entropy over the valid tokens (1 + 3 + 0 + 2)/4 = 1.5; α = 0.5:
    # w = [√(1/1.5), √(3/1.5)], [≈0, √(2/1.5)] = [0.816497, 1.414214], [0.000816, 1.154701]
    w = [[math.sqrt(1 / 1.5), math.sqrt(2.0)], [math.sqrt(1e-6 / 1.5), math.sqrt(2 / 1.5)]]
    loss, grad, stats = _grad(tea_rl_loss, LP2, MASK2, LP2, ADV2, entropy=ENT, alpha=0.5, inner="reinforce")
    # inner reinforce: loss −A·w·log π, gradient −A·w
    _close(loss[:, :2], [[0.5 * w[0][0], 1.0 * w[0][1]], [-0.2 * w[1][0], -6.0 * w[1][1]]], tol=1e-4)
    _close(grad, [[-w[0][0], -w[0][1], 0.0], [2 * w[1][0], 2 * w[1][1], 0.0]], tol=1e-4)
    assert stats["tea_weight_mean"] == pytest.approx(sum(w[0] + w[1]) / 4, abs=1e-4)
    # α = 2 and the cap: (3/1.5)² = 4 → 3; (2/1.5)² = 1.777778; (1/1.5)² = 0.444444
    _close(entropy_weights(ENT, MASK2, 2.0, 3.0)[:, :2], [[4 / 9, 3.0], [0.0, 16 / 9]], tol=1e-4)


def test_tea_rl_edges_and_default_ppo_inner() -> None:
    # on-policy PPO: ratio 1, gradient −A·w (the same as reinforce's)
    _, grad, _ = _grad(tea_rl_loss, LP2, MASK2, LP2, ADV2, entropy=ENT, alpha=1.0)
    _close(grad, [[-1 / 1.5, -2.0, 0.0], [2e-6 / 1.5, 2 * 2 / 1.5, 0.0]], tol=1e-4)
    # α = 0, or every entropy 0: the inner loss unchanged
    plain, _ = POLICY_LOSSES.get("reinforce")(LP2, LP2, ADV2, MASK2)
    for ent, alpha in ((ENT, 0.0), (torch.zeros(2, 3), 1.0)):
        loss, _ = tea_rl_loss(LP2, LP2, ADV2, MASK2, entropy=ent, alpha=alpha, inner="reinforce")
        assert torch.allclose(loss, plain)
    loss, grad, stats = _grad(tea_rl_loss, LP2, torch.zeros(2, 3), LP2, ADV2, entropy=ENT)
    assert (
        torch.isfinite(loss).all() and torch.isfinite(grad).all() and math.isfinite(stats["tea_weight_mean"])
    )
    _, grad, _ = _grad(tea_rl_loss, LP2, MASK2, LP2, torch.zeros(2), entropy=ENT)
    assert grad.abs().sum() == 0
    with pytest.raises(ValueError, match="alpha"):
        tea_rl_loss(LP2, LP2, ADV2, MASK2, entropy=ENT, alpha=-0.1)
    with pytest.raises(ValueError, match="max_weight"):
        tea_rl_loss(LP2, LP2, ADV2, MASK2, entropy=ENT, max_weight=0.5)


# --------------------------------------------------------------------------------- token_reweight
# log-perplexities −mean log π_old: row 0 (−1 −3)/2 → 2, row 1 → 1, row 2 → 0; row 3 has no token
PPL_OLD = torch.tensor([[-1.0, -3.0], [-1.0, -1.0], [0.0, 0.0], [-7.0, -7.0]])
PPL_MASK = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
Z = math.sqrt(1.5)  # (λ − 1)/std with std = √(2/3): z = [1.224745, 0, −1.224745]


def test_perplexity_weights_favour_low_perplexity_completions() -> None:
    _close(perplexity_weights(PPL_OLD, PPL_MASK, 0.2)[:, 0], [1 - 0.2 * Z, 1.0, 1 + 0.2 * Z, 1.0])
    _close(perplexity_weights(PPL_OLD, PPL_MASK, 1.0)[:, 0], [0.0, 1.0, 1 + Z, 1.0])  # 1 − 1.22 → 0
    # one valid row, or all equal: 1 everywhere
    _close(perplexity_weights(PPL_OLD, torch.tensor([[1.0, 0.0]] + [[0.0, 0.0]] * 3), 0.5)[:, 0], [1.0] * 4)
    _close(perplexity_weights(torch.full((2, 2), -1.0), torch.ones(2, 2), 0.5)[:, 0], [1.0, 1.0])
    # through the loss (inner reinforce): gradient −A·w per token
    adv = torch.tensor([1.0, 1.0, -1.0, 1.0])
    _, grad, stats = _grad(
        token_reweight_loss, PPL_OLD, PPL_MASK, PPL_OLD, adv, mode="perplexity", alpha=0.2, inner="reinforce"
    )
    _close(grad, [[-(1 - 0.2 * Z)] * 2, [-1.0] * 2, [1 + 0.2 * Z] * 2, [0.0, 0.0]])
    assert stats["reweight_weight_mean"] == pytest.approx(1.0, abs=1e-6)  # standardised: mean 1


def test_position_weights_rise_along_each_completion() -> None:
    # α = 0.5, w = 1 + α(2(t + ½)/L − 1), t counted over valid tokens only
    # row 0, L = 3: 1 − 1/3, 1, 1 + 1/3; row 1, one token: 1; row 2, tokens at 1, 2 (L = 2): 0.75, 1.25
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 1.0, 0.0]])
    expected = [[2 / 3, 1.0, 4 / 3, 1.0], [1.0, 1.0, 1.0, 1.0], [1.0, 0.75, 1.25, 1.0]]
    _close(position_weights(mask, 0.5), expected)
    lp = torch.full((3, 4), -1.0)
    _, grad, stats = _grad(
        token_reweight_loss, lp, mask, lp, torch.tensor([2.0, 1.0, -1.0]), mode="position", alpha=0.5,
        inner="reinforce",
    )  # fmt: skip
    _close(grad, [[-4 / 3, -2.0, -8 / 3, 0.0], [-1.0, 0.0, 0.0, 0.0], [0.0, 0.75, 1.25, 0.0]])
    assert stats["reweight_weight_mean"] == pytest.approx(1.0, abs=1e-6)


def test_token_reweight_edges_nesting_and_bad_parameters() -> None:
    lp = torch.full((2, 3), -1.0)
    for mode in ("perplexity", "position"):
        loss, grad, stats = _grad(token_reweight_loss, lp, torch.zeros(2, 3), lp, torch.ones(2), mode=mode)
        assert (
            torch.isfinite(loss).all()
            and grad.abs().sum() == 0
            and math.isfinite(stats["reweight_weight_mean"])
        )
        _, grad, _ = _grad(token_reweight_loss, lp, torch.ones(2, 3), lp, torch.zeros(2), mode=mode)
        assert grad.abs().sum() == 0
    # modifiers nest: the entropy reaches tea_rl through token_reweight (position weights × entropy weights)
    ent = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 4.0]])  # mean 1.5
    _, grad, _ = _grad(
        token_reweight_loss, lp, torch.ones(2, 3), lp, torch.ones(2), mode="position", alpha=0.5,
        entropy=ent, inner="tea_rl", inner_params={"alpha": 1.0, "inner": "reinforce"},
    )  # fmt: skip
    pos = [2 / 3, 1.0, 4 / 3]
    _close(grad, [[-p / 1.5 for p in pos], [-pos[0] / 1.5, -pos[1] / 1.5, -pos[2] * 4 / 1.5]], tol=1e-4)
    with pytest.raises(ValueError, match="mode"):
        token_reweight_loss(lp, lp, torch.ones(2), torch.ones(2, 3), mode="length")
    with pytest.raises(ValueError, match="alpha"):
        token_reweight_loss(lp, lp, torch.ones(2), torch.ones(2, 3), mode="position", alpha=1.5)
    with pytest.raises(ValueError, match="alpha"):
        token_reweight_loss(lp, lp, torch.ones(2), torch.ones(2, 3), mode="perplexity", alpha=-1.0)


# ------------------------------------------------------------------------------------------- CoPG
# per-row Σ log π/π_old: row 0: 0.2, row 1: 0, row 2: −0.2 − 0.2 = −0.4, row 3: 0.1 (its padding's 5 ignored)
COPG_LP = torch.tensor([[-1.0, -1.0], [-1.0, -1.0], [-1.0, -2.0], [-1.0, 5.0]])
COPG_OLD = torch.tensor([[-1.2, -1.0], [-1.0, -1.0], [-0.8, -1.8], [-1.1, 0.0]])
COPG_MASK = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
COPG_ADV = torch.tensor([1.0, 0.0, -1.0, 0.5])
COPG_GROUPS = torch.tensor([0, 0, 0, 1])  # rows 0-2 one prompt; row 3 alone


def test_copg_pairwise_contrast_values_and_gradient() -> None:
    # β = 0.5: u = A − βℓ = [0.9, 0, −0.8, 0.45]; group 0 has n = 3, each row 2 partners
    # g0 = 0.9 − (0 − 0.8)/2 = 1.3; g1 = 0 − (0.9 − 0.8)/2 = −0.05; g2 = −0.8 − (0.9 + 0)/2 = −1.25
    # L0 = (0.9² + 1.7²)/(4·0.5·2) = 0.925; L1 = (0.9² + 0.8²)/4 = 0.3625; L2 = (1.7² + 0.8²)/4 = 0.8825
    # row 3 has no partner: no loss, no gradient
    loss, grad, stats = _grad(
        copg_loss, COPG_LP, COPG_MASK, COPG_OLD, COPG_ADV, group_index=COPG_GROUPS, beta=0.5
    )
    _close(loss * COPG_MASK, [[0.925, 0.925], [0.3625, 0.3625], [0.8825, 0.8825], [0.0, 0.0]])
    _close(grad, [[-1.3, -1.3], [0.05, 0.05], [1.25, 1.25], [0.0, 0.0]])
    assert stats["copg_loss"] == pytest.approx((0.925 + 0.3625 + 0.8825) / 3, abs=1e-6)
    assert stats["copg_paired_frac"] == pytest.approx(0.75)


def test_copg_gradient_is_that_of_the_summed_pair_losses() -> None:
    # autograd through Σ_i L_i with ℓ carrying the gradient: each token of row i gets −g_i
    lp = COPG_LP.clone().requires_grad_(True)
    beta, adv = 0.3, torch.tensor([0.4, -1.0, 2.0, 0.5])
    u = adv - beta * ((lp - COPG_OLD) * COPG_MASK).sum(dim=1)
    same = (COPG_GROUPS[:, None] == COPG_GROUPS[None, :]) & ~torch.eye(4, dtype=torch.bool)
    n = same.sum(dim=1).clamp(min=1)
    total = (torch.where(same, (u[:, None] - u[None, :]) ** 2, 0.0).sum(dim=1) / (4 * beta * n)).sum()
    total.backward()
    _, grad, _ = _grad(copg_loss, COPG_LP, COPG_MASK, COPG_OLD, adv, group_index=COPG_GROUPS, beta=beta)
    assert torch.allclose(grad, lp.grad * COPG_MASK, atol=1e-6)


def test_copg_on_policy_is_leave_one_out_and_edges() -> None:
    # on-policy (ℓ = 0): g_i = A_i − mean of the others = [1 − (−0.5), 0 − 0, −1 − 0.5]
    _, grad, _ = _grad(copg_loss, COPG_LP, COPG_MASK, COPG_LP, COPG_ADV, group_index=COPG_GROUPS)
    _close(grad[:3, 0], [-1.5, 0.0, 1.5])
    # an empty row takes no part: row 1 masked out leaves the pair (0, 2): g0 = 1 − (−1) = 2
    mask = COPG_MASK.clone()
    mask[1] = 0.0
    loss, grad, stats = _grad(copg_loss, COPG_LP, mask, COPG_LP, COPG_ADV, group_index=COPG_GROUPS)
    _close(grad[:, 0], [-2.0, 0.0, 2.0, 0.0])
    # all-zero advantages on-policy: nothing; an empty mask: finite, nothing
    loss, grad, _ = _grad(copg_loss, COPG_LP, COPG_MASK, COPG_LP, torch.zeros(4), group_index=COPG_GROUPS)
    assert loss.abs().sum() == 0 and grad.abs().sum() == 0
    loss, grad, stats = _grad(
        copg_loss, COPG_LP, torch.zeros(4, 2), COPG_OLD, COPG_ADV, group_index=COPG_GROUPS
    )
    assert torch.isfinite(loss).all() and grad.abs().sum() == 0 and stats["copg_loss"] == 0
    with pytest.raises(ValueError, match="beta"):
        copg_loss(COPG_LP, COPG_OLD, COPG_ADV, COPG_MASK, group_index=COPG_GROUPS, beta=0.0)
    with pytest.raises(ValueError, match="group_index"):
        copg_loss(COPG_LP, COPG_OLD, COPG_ADV, COPG_MASK, group_index=torch.zeros(3, dtype=torch.long))


def test_the_wave2_losses_are_registered() -> None:
    for name, fn in {
        "pacs": pacs_loss,
        "tea_rl": tea_rl_loss,
        "token_reweight": token_reweight_loss,
        "copg": copg_loss,
    }.items():
        assert POLICY_LOSSES.get(name) is fn
