"""Lopti (low-probability tokens trained in their own optimizer step, first) and the critical-token
KL (each token's KL weighted by the reference's confidence), through ``policy_update`` itself.

The optimizer records each step's gradient and never moves the weights (lr 0), so the gradients of
Lopti's two steps must add up to the one-step gradient, the first being the low-probability tokens'
alone; and with zero advantages the whole gradient is the KL term's, which must equal the gradient
of ``Σ_t k3_t · exp(−α·H_ref,t) · w_t`` worked out here from the reference's own entropy.
"""

from __future__ import annotations

import pytest
import torch

from rlvr.algo import KL_ESTIMATORS
from rlvr.algo.aggregate import token_weights
from rlvr.config import load_config
from rlvr.config.schema import AlgoConfig
from rlvr.errors import RlvrError
from rlvr.models import load_model
from rlvr.rollout import Completion
from rlvr.train.learn.batch import build_batch
from rlvr.train.learn.logprobs import completion_logprobs
from rlvr.train.learn.update import lopti_part, policy_update, update_passes


class Recorder(torch.optim.SGD):
    """SGD at lr 0 that keeps a copy of every step's gradient."""

    def __init__(self, params) -> None:
        super().__init__(params, lr=0.0)
        self.grads: list[torch.Tensor] = []

    def step(self, closure=None):  # noqa: ANN001, ANN201
        params = [p for g in self.param_groups for p in g["params"]]
        self.grads.append(
            torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in params])
        )
        return super().step(closure)


def _batch(advantages: list[float]):
    gen = torch.Generator().manual_seed(3)
    groups = []
    for g, lengths in enumerate([[5, 3, 6], [4, 7]]):
        prompt = torch.randint(10, 4000, (4 + g,), generator=gen).tolist()
        groups.append(
            [
                Completion(
                    g, prompt, torch.randint(10, 4000, (n,), generator=gen).tolist(), [0.0] * n, "stop"
                )
                for n in lengths
            ]
        )
    return build_batch(groups, advantages, pad_id=2)


def _model(seed: int) -> torch.nn.Module:
    """tiny-random's weights, moved by seeded noise for a seed other than 0 (another model)."""
    model = load_model("tiny-random")
    if seed:
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
    return model


def _run(model, batch, cfg: AlgoConfig, ref=None, kl_coef: float = 0.0) -> list[torch.Tensor]:
    optimizer = Recorder(model.parameters())
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    policy_update(model, optimizer, scheduler, batch, cfg, 1e9, 1.0, 16, ref_model=ref, kl_coef=kl_coef)
    return optimizer.grads


def test_lopti_parts_split_the_valid_tokens_by_probability() -> None:
    # probabilities 0.1, 0.6, 0.3 | 0.9, (pad); threshold 0.5: low = (1, 0, 1 | 0, 0)
    old = torch.log(torch.tensor([[0.1, 0.6, 0.3], [0.9, 0.2, 0.2]]))
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert lopti_part(old, mask, 0.5, low=True).tolist() == [[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
    assert lopti_part(old, mask, 0.5, low=False).tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]


def test_lopti_trains_the_low_probability_tokens_first_then_the_rest() -> None:
    batch = _batch([1.0, -0.5, 0.25, -1.0, 0.75])
    model = _model(0)
    with torch.no_grad():
        logprobs, _ = completion_logprobs(model, batch, 1.0)
    valid = batch.completion_mask.bool()
    threshold = float(logprobs[valid].exp().median())  # about half the tokens in each pass
    one_step = _run(_model(0), batch, AlgoConfig())
    two_steps = _run(_model(0), batch, AlgoConfig(lowprob_isolation=threshold))
    assert len(one_step) == 1 and len(two_steps) == 2
    low, high = two_steps
    assert low.abs().max() > 0 and high.abs().max() > 0
    assert torch.allclose(low + high, one_step[0], rtol=1e-4, atol=1e-6 * float(one_step[0].abs().max()))
    assert not torch.allclose(low, high, rtol=1e-2)
    # a threshold above every probability: one step (nothing left for the second), the full gradient
    everything_low = _run(_model(0), batch, AlgoConfig(lowprob_isolation=0.999))
    assert len(everything_low) == 1
    assert torch.allclose(
        everything_low[0], one_step[0], rtol=1e-4, atol=1e-6 * float(one_step[0].abs().max())
    )
    # the passes follow the minibatch's own rows
    passes = list(update_passes(batch, 1, None, logprobs, threshold))
    assert [part.sum().item() for _, part in passes] == [
        float((logprobs.exp() < threshold)[valid].sum()),
        float((logprobs.exp() >= threshold)[valid].sum()),
    ]


def test_critical_kl_weights_each_tokens_kl_by_the_references_confidence() -> None:
    batch = _batch([0.0] * 5)  # zero advantages: the gradient is the KL term's alone
    ref = _model(1)
    alpha, kl_coef = 0.5, 0.3
    with torch.no_grad():
        ref_logprobs, ref_entropy = completion_logprobs(ref, batch, 1.0, with_entropy=True)
    policy = _model(0)
    logprobs, _ = completion_logprobs(policy, batch, 1.0)
    w = token_weights(batch.completion_mask, "token-mean", 16)
    kl = KL_ESTIMATORS.get("k3")(logprobs, ref_logprobs)
    expected_loss = kl_coef * (kl * torch.exp(-alpha * ref_entropy) * w).sum()
    expected_loss.backward()
    expected = torch.cat([p.grad.flatten() for p in policy.parameters()])
    cfg = AlgoConfig(kl_coef=kl_coef, reference={"critical_kl": alpha})
    (got,) = _run(_model(0), batch, cfg, ref=ref, kl_coef=kl_coef)
    assert expected.abs().max() > 0
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-5 * float(expected.abs().max()))
    (uniform,) = _run(_model(0), batch, AlgoConfig(kl_coef=kl_coef), ref=ref, kl_coef=kl_coef)
    assert not torch.allclose(got, uniform, rtol=1e-2)  # the weights changed something


def test_bad_settings_name_their_keys() -> None:
    with pytest.raises(RlvrError, match="algo.reference.critical_kl"):
        load_config(None, ["algo.reference.critical_kl=1.0"])
    with pytest.raises(RlvrError, match="algo.reference.critical_kl"):
        load_config(None, ["algo.reference.critical_kl=1.0", "algo.kl_coef=0.1", "algo.kl_in_reward=true"])
    with pytest.raises(RlvrError, match="lowprob_isolation"):
        load_config(None, ["algo.lowprob_isolation=1.5"])
