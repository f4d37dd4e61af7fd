"""Packing: rows laid out as documented, and packed logprobs, loss and gradients equal to each example
run alone (transformers' block-diagonal mask from restarting position ids), with no example seeing
another's tokens."""

from __future__ import annotations

import pytest
import torch

from rlvr.data.chat_data import ChatExample
from rlvr.data.demonstrations import to_demonstration
from rlvr.data.packing import (
    pack,
    packed_token_logprobs,
    per_example,
    sft_loss,
    trajectory_example,
    unpacked_token_logprobs,
)
from rlvr.errors import RlvrError
from rlvr.models import TINY_RANDOM, load_model, load_tokenizer


def ex(n: int, first: int = 10) -> tuple[list[int], list[float]]:
    return list(range(first, first + n)), [0.0] + [1.0] * (n - 1)


def test_best_fit_decreasing_layout() -> None:
    examples = [ex(3), ex(6), ex(2), ex(5), ex(4, 50)]
    rows = pack(examples, max_length=8)
    # longest first: 6 opens row 0, 5 row 1, 4 row 2; 3 fits row 1 exactly; 2 fits row 0 exactly
    assert [row.examples for row in rows] == [[1, 2], [3, 0], [4]]
    first = rows[0]
    assert first.input_ids == examples[1][0] + examples[2][0]
    assert first.position_ids == [0, 1, 2, 3, 4, 5, 0, 1]
    assert first.mask == examples[1][1] + examples[2][1]
    assert first.spans == [(0, 6), (6, 8)] and len(first) == 8
    assert sorted(i for row in rows for i in row.examples) == [0, 1, 2, 3, 4]
    assert all(len(row) <= 8 for row in rows)


def test_packing_refuses_what_it_cannot_pack() -> None:
    with pytest.raises(RlvrError, match="example 1 is 9 tokens, longer than the packing length 8"):
        pack([ex(3), ex(9)], 8)
    with pytest.raises(ValueError, match="mask"):
        pack([([1, 2], [1.0, 1.0])], 8)
    with pytest.raises(ValueError, match="2 tokens but 1 mask values"):
        pack([([1, 2], [0.0])], 8)


@pytest.fixture(scope="module")
def model():
    return load_model(TINY_RANDOM)


@pytest.fixture(scope="module")
def examples() -> list[tuple[list[int], list[float]]]:
    """Real demonstrations of different lengths (SmolLM2's template, tiny-random's tokenizer)."""
    tokenizer = load_tokenizer(TINY_RANDOM)
    chats = [
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}],
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is the capital of France?"},
            {"role": "assistant", "content": "Paris."},
            {"role": "user", "content": "And of Italy, and why is it famous?"},
            {
                "role": "assistant",
                "content": "Rome: the Colosseum, the Vatican and two thousand years of history.",
            },
        ],
        [{"role": "user", "content": "Count to five."}, {"role": "assistant", "content": "1 2 3 4 5"}],
        [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
    ]
    return [
        trajectory_example(to_demonstration(tokenizer, ChatExample(c, None, "x", i)))
        for i, c in enumerate(chats)
    ]


def _grads(model) -> dict[str, torch.Tensor]:
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads


@pytest.mark.parametrize("attention", ["rlvr_sdpa", "sdpa", "eager"])
def test_packed_equals_unpacked_logprobs_loss_and_gradients(model, examples, attention: str) -> None:
    model.set_attn_implementation(attention)
    rows = pack(examples, max_length=max(len(ids) for ids, _ in examples) + 30)
    assert len(rows) < len(examples) and any(len(row.examples) > 1 for row in rows)  # really packed

    model.zero_grad(set_to_none=True)
    logprobs, mask = packed_token_logprobs(model, rows)
    packed_loss = sft_loss(logprobs, mask)
    packed_loss.backward()
    packed_grads = _grads(model)

    ref_logprobs, ref_masks = unpacked_token_logprobs(model, examples)
    ref_loss = sft_loss(torch.cat(ref_logprobs), torch.cat(ref_masks))
    ref_loss.backward()
    ref_grads = _grads(model)

    split, split_mask = per_example(logprobs.detach(), rows), per_example(mask, rows)
    for index, (ref, ref_mask) in enumerate(zip(ref_logprobs, ref_masks)):
        assert torch.equal(split_mask[index], ref_mask)  # logprobs at the trained tokens, 0 elsewhere
        torch.testing.assert_close(split[index], ref.detach() * ref_mask, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(packed_loss, ref_loss, atol=1e-6, rtol=1e-6)
    assert packed_grads.keys() == ref_grads.keys() and len(packed_grads) > 0
    for name, grad in packed_grads.items():
        torch.testing.assert_close(grad, ref_grads[name], atol=1e-5, rtol=1e-4, msg=name)
    model.set_attn_implementation("rlvr_sdpa")


@pytest.mark.parametrize("attention", ["rlvr_sdpa", "eager"])
def test_no_example_attends_across_its_boundary(model, attention: str) -> None:
    model.set_attn_implementation(attention)
    before, after = ex(12, 100), ex(9, 300)
    changed = ([7] + list(range(900, 911)), before[1])
    with torch.no_grad():
        (row,) = pack([before, after], 32)
        (other,) = pack([changed, after], 32)
        assert row.examples == other.examples == [0, 1]  # the changed example comes first in both
        a = per_example(packed_token_logprobs(model, [row])[0], [row])
        b = per_example(packed_token_logprobs(model, [other])[0], [other])
    assert not torch.allclose(a[0], b[0])  # the change is real
    torch.testing.assert_close(a[1], b[1], atol=1e-6, rtol=0)  # and invisible to the next example
    model.set_attn_implementation("rlvr_sdpa")


def test_rows_of_different_lengths_pad_without_changing_anything(model) -> None:
    examples = [ex(20, 100), ex(7, 200), ex(6, 300)]
    rows = pack(examples, 20)
    assert [len(row) for row in rows] == [20, 13]
    with torch.no_grad():
        logprobs, mask = packed_token_logprobs(model, rows)
        alone, masks = unpacked_token_logprobs(model, examples)
    assert mask[1, 13:].sum() == 0 and (logprobs[1, 13:] == 0).all()
    split = per_example(logprobs, rows)
    for index, (ref, ref_mask) in enumerate(zip(alone, masks)):
        torch.testing.assert_close(split[index], ref * ref_mask, atol=1e-5, rtol=1e-5)


def test_sft_loss_is_the_token_mean_over_all_trained_tokens() -> None:
    logprobs = torch.tensor([[0.0, -1.0, -2.0, -9.0], [0.0, -3.0, 0.0, 0.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0]])
    assert sft_loss(logprobs, mask).item() == pytest.approx(2.0)  # (1 + 2 + 3) / 3, not per-row means
    assert sft_loss(logprobs, torch.zeros_like(mask)).item() == 0.0
