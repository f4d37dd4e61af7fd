"""The chunked chosen-token logprob equals the plain log-softmax: values, entropy and gradients."""

from __future__ import annotations

import pytest
import torch

from rlvr.train.learn import token_logprobs as tl


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("chunk", [3, 256])
def test_matches_log_softmax_with_gradients(monkeypatch, temperature: float, chunk: int) -> None:
    monkeypatch.setattr(tl, "ROWS_PER_CHUNK", chunk)  # 3: several chunks and a ragged last one
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(2, 5, 50, generator=gen) * 4).requires_grad_(True)
    targets = torch.randint(0, 50, (2, 5), generator=gen)
    upstream = torch.randn(2, 5, generator=gen)

    fast_lp, fast_h = tl.token_logprobs(logits, targets, temperature, with_entropy=True)
    (fast_grad,) = torch.autograd.grad((fast_lp * upstream).sum(), logits)
    ref_lp, ref_h = tl.token_logprobs_reference(logits, targets, temperature, with_entropy=True)
    (ref_grad,) = torch.autograd.grad((ref_lp * upstream).sum(), logits)

    torch.testing.assert_close(fast_lp, ref_lp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fast_h, ref_h, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fast_grad, ref_grad, rtol=1e-5, atol=1e-6)
    assert not fast_h.requires_grad
    assert fast_lp.dtype == torch.float32 and (fast_lp <= 0).all()


def test_hand_computed_two_token_vocabulary() -> None:
    logits = torch.tensor([[0.0, 0.0], [2.0, 0.0]], requires_grad=True)
    lp, h = tl.token_logprobs(logits, torch.tensor([0, 1]), with_entropy=True)
    p = torch.sigmoid(torch.tensor(2.0))  # P(token 0) in row 2
    torch.testing.assert_close(lp, torch.stack([torch.log(torch.tensor(0.5)), torch.log(1 - p)]))
    torch.testing.assert_close(
        h, torch.stack([torch.log(torch.tensor(2.0)), -(p * p.log() + (1 - p) * (1 - p).log())])
    )
    lp.sum().backward()
    # d log softmax_t / d logits = onehot(t) - softmax
    torch.testing.assert_close(logits.grad, torch.tensor([[0.5, -0.5], [-p, p]]))


def test_half_precision_logits_get_float32_results_and_grads_of_their_dtype() -> None:
    logits = torch.randn(4, 30, dtype=torch.bfloat16, requires_grad=True)
    targets = torch.arange(4)
    lp, entropy = tl.token_logprobs(logits, targets)
    assert lp.dtype == torch.float32 and entropy is None
    lp.sum().backward()
    assert logits.grad.dtype == torch.bfloat16
    ref, _ = tl.token_logprobs_reference(logits.detach(), targets, 1.0, False)
    torch.testing.assert_close(lp.detach(), ref)
