"""Packed training rows (several completions of a prompt per row) give the unpacked numbers."""

from __future__ import annotations

import pytest
import torch

from rlvr.models import load_model
from rlvr.models.prefix import MIN_SHARED_PREFIX
from rlvr.rollout import Completion
from rlvr.train.learn import logprobs as logprobs_module
from rlvr.train.learn.batch import build_batch
from rlvr.train.learn.logprobs import completion_logprobs, completion_logprobs_simple, shared_prefix_length
from rlvr.train.learn.packing import completion_lengths, micro_batches, pack_rows, set_packing


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return load_model("tiny-random")


def _batch(lengths_per_group: list[list[int]], prompt_lengths: list[int], seed: int = 1, shared: int = 0):
    """Random prompts (the first ``shared`` tokens the same in all) and completions of these lengths."""
    gen = torch.Generator().manual_seed(seed)
    prefix = torch.randint(10, 4000, (shared,), generator=gen).tolist()
    groups = []
    for p, (plen, lengths) in enumerate(zip(prompt_lengths, lengths_per_group)):
        prompt = prefix + torch.randint(10, 4000, (plen,), generator=gen).tolist()
        groups.append(
            [
                Completion(
                    p, prompt, torch.randint(10, 4000, (n,), generator=gen).tolist(), [0.0] * n, "stop"
                )
                for n in lengths
            ]
        )
    rows = sum(len(g) for g in groups)
    return build_batch(groups, torch.linspace(-1, 1, rows).tolist(), pad_id=2)


def _run(model, batch, **kwargs):
    model.zero_grad(set_to_none=True)
    logprobs, entropy, hidden = completion_logprobs(
        model, batch, 0.7, with_entropy=True, with_hidden=True, **kwargs
    )
    weights = batch.completion_mask * batch.advantages[:, None]
    ((logprobs * weights).sum() + (hidden.sum(-1) * weights).sum() * 1e-3).backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return logprobs.detach(), entropy, hidden.detach(), grads


CASES = [
    ([[12, 3, 7, 1, 5, 2], [6, 2, 2], [1, 12]], [9, 4, 6], 0),
    ([[2, 4, 1, 1], [5]], [1, 7], 0),  # a one-token prompt: no shared pass for it
    ([[3, 1], [4, 4, 2]], [1, 1], 0),  # no shared pass at all
    ([[12, 3, 7, 1, 5, 2], [6, 2, 2], [1, 12]], [9, 4, 6], 20),  # a prefix common to all prompts
    ([[5, 2], [3, 3, 1]], [1, 6], 17),  # ... and a prompt that is the prefix and one token
]


@pytest.mark.parametrize("lengths,prompt_lengths,shared", CASES)
def test_packed_rows_match_unpacked_values_and_gradients(
    tiny, lengths, prompt_lengths, shared, monkeypatch
) -> None:
    batch = _batch(lengths, prompt_lengths, shared=shared)
    assert shared_prefix_length(batch) >= shared
    calls = []
    real = logprobs_module._packed_forward
    monkeypatch.setattr(logprobs_module, "_packed_forward", lambda *a, **k: calls.append(1) or real(*a, **k))
    shapes = []
    forward = tiny.forward
    monkeypatch.setattr(
        tiny, "forward", lambda **k: shapes.append(tuple(k["input_ids"].shape)) or forward(**k)
    )
    packed = _run(tiny, batch)
    monkeypatch.setattr(tiny, "forward", forward)
    assert calls, "the packed forward did not run"
    assert ((1, shared_prefix_length(batch)) in shapes) == (shared > 0)  # the prefix ran once, alone
    plain = _run(tiny, batch, packing=False)
    mask = batch.completion_attention.bool()
    for got, want in zip(packed[:3], plain[:3]):
        assert torch.allclose(got[mask], want[mask], atol=1e-5)
    assert torch.allclose(packed[3], plain[3], rtol=1e-4, atol=2e-5 * float(plain[3].abs().max()))
    reference, _ = completion_logprobs_simple(tiny, batch, 0.7)
    assert torch.allclose(packed[0][mask], reference[mask], atol=1e-5)
    assert (packed[0][~mask] == 0).all()


def test_packing_fills_rows_within_one_prompt() -> None:
    batch = _batch([[12, 3, 7, 1, 5, 2], [6, 2, 2]], [5, 5])
    lengths = completion_lengths(batch.completion_attention)
    groups, bins = pack_rows(batch.group_index, lengths, batch.completion_width)
    assert sorted(r for b in bins for r in b) == list(range(9))  # every completion, once
    for prompt, members in zip(groups, bins):
        assert all(int(batch.group_index[r]) == prompt for r in members)
        assert sum(int(lengths[r]) for r in members) <= batch.completion_width
    assert len(bins) == 4  # 12 | 7+5 | 3+2+1 ; 6+2+2 (first fit, longest first)


def test_equal_lengths_or_holes_are_not_packed(tiny, monkeypatch) -> None:
    monkeypatch.setattr(logprobs_module, "_packed_forward", lambda *a, **k: pytest.fail("packed"))
    completion_logprobs(tiny, _batch([[4, 4], [4]], [3, 5]), 1.0)  # one completion a row already
    batch = _batch([[4, 1, 2], [4]], [3, 5])
    batch.completion_attention[0, 1] = 0  # a hole in a response: not a prefix
    assert completion_lengths(batch.completion_attention) is None
    completion_logprobs(tiny, batch, 1.0)


def test_policy_update_trains_packed_as_unpacked(tiny, monkeypatch) -> None:
    """The update's wiring: one PPO step with packing equals one without, parameter for parameter."""
    from rlvr.config.schema import AlgoConfig
    from rlvr.train.learn.update import policy_update

    lengths, prompt_lengths, shared = CASES[3]
    batch = _batch(lengths, prompt_lengths, shared=shared)
    calls = []
    real = logprobs_module._packed_forward
    monkeypatch.setattr(logprobs_module, "_packed_forward", lambda *a, **k: calls.append(1) or real(*a, **k))
    start = {k: v.clone() for k, v in tiny.state_dict().items()}
    deltas = []
    for packing in (True, False):
        tiny.load_state_dict(start)
        set_packing(tiny, packing)  # what the learner does with algo.packing
        opt = torch.optim.SGD(tiny.parameters(), lr=1.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
        policy_update(tiny, opt, sched, batch, AlgoConfig(), 1e9, 1.0, 12)
        deltas.append(torch.cat([(tiny.state_dict()[k] - start[k]).flatten() for k in start]))
    tiny.load_state_dict(start)
    set_packing(tiny, True)
    assert calls == [1], "packing=True did not pack, or packing=False packed"
    assert deltas[0].abs().max() > 0
    assert torch.allclose(deltas[0], deltas[1], rtol=1e-3, atol=1e-4 * float(deltas[1].abs().max()))


def test_packed_micro_batches_hold_whole_groups_within_the_token_budget() -> None:
    lengths = [[14, 3, 9, 1, 5, 12, 2, 8]] * 4
    batch = _batch(lengths, [26, 25, 26, 24], shared=94)  # the demo's shape: a 94-token few-shot prefix
    assert micro_batches(batch, 16) == [slice(0, 32)]  # 16 unpacked rows' tokens hold all four groups
    assert micro_batches(batch, 1) == [slice(0, 8), slice(8, 16), slice(16, 24), slice(24, 32)]
    # a shared prefix too short to run once is counted in every prompt
    short = _batch(lengths, [26, 25, 26, 24], shared=MIN_SHARED_PREFIX - 1)
    for b, sizes in ((batch, (2, 3, 5)), (short, (2, 3, 4, 5))):
        width = b.prompt_ids.shape[1] + b.completion_width
        for size in sizes:
            slices = micro_batches(b, size)
            assert all(s.start % 8 == 0 for s in slices) and slices[-1].stop == 32
            for s in slices:  # the tokens each pass runs stay within the budget (or it is one group)
                sub = b.select(s)
                _, bins = pack_rows(
                    sub.group_index, completion_lengths(sub.completion_attention), sub.completion_width
                )
                shared = shared_prefix_length(sub)
                once = shared if shared >= MIN_SHARED_PREFIX else 0
                longest = max(int(m.sum()) for m in sub.prompt_mask)
                tokens = once + len(sub.prompt_ids) * (longest - once) + len(bins) * sub.completion_width
                assert tokens <= size * width or s.stop - s.start == 8, (size, s)


def test_an_update_in_packed_micro_batches_equals_one_in_row_micro_batches(tiny) -> None:
    from rlvr.config.schema import AlgoConfig
    from rlvr.train.learn.update import policy_update

    batch = _batch([[5, 2, 7], [3, 3, 1], [6, 1], [2, 2, 2]], [4, 6, 5, 3], shared=20)
    assert len(micro_batches(batch, 3)) < 4  # fewer passes than row micro-batches of 3
    start = {k: v.clone() for k, v in tiny.state_dict().items()}
    deltas = []
    for packing in (True, False):
        tiny.load_state_dict(start)
        set_packing(tiny, packing)
        opt = torch.optim.SGD(tiny.parameters(), lr=1.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
        policy_update(tiny, opt, sched, batch, AlgoConfig(micro_batch_size=3), 1e9, 1.0, 7)
        deltas.append(torch.cat([(tiny.state_dict()[k] - start[k]).flatten() for k in start]))
    tiny.load_state_dict(start)
    set_packing(tiny, True)
    assert deltas[0].abs().max() > 0
    assert torch.allclose(deltas[0], deltas[1], rtol=1e-3, atol=1e-4 * float(deltas[1].abs().max()))
