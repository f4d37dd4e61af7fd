"""The HF rollout engine: sampling is exact, greedy decoding matches transformers' own generate."""

from __future__ import annotations

import pytest
import torch

from rlvr.models import load_model, load_tokenizer
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.sampling import sample_next


def test_sampling_follows_the_tempered_distribution() -> None:
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, -30.0]).repeat(40_000, 1)
    gen = torch.Generator().manual_seed(0)
    params = SamplingParams(temperature=0.7)
    tokens, logprobs = sample_next(logits, params, gen)
    expected = torch.softmax(logits[0] / 0.7, dim=-1)
    freq = torch.bincount(tokens, minlength=5).float() / len(tokens)
    assert torch.allclose(freq, expected, atol=0.01)
    assert torch.allclose(logprobs, expected.log()[tokens], atol=1e-5)


def test_blocked_sampling_follows_the_distribution_across_blocks() -> None:
    """The two-level inverse CDF (a block, then an entry in it) over a vocabulary of several blocks
    and a padded last one: frequencies match the tempered softmax, logprobs match log_softmax."""
    gen = torch.Generator().manual_seed(3)
    row = torch.randn(1300, generator=gen) * 0.5  # mass spread over all three 512-entry blocks
    row[[5, 600, 1299]] = torch.tensor([3.0, 3.5, 4.0])  # peaks in the first, second and padded block
    logits = row.repeat(60_000, 1)
    tokens, logprobs = sample_next(logits, SamplingParams(temperature=0.8), torch.Generator().manual_seed(0))
    expected = torch.softmax(row / 0.8, dim=-1)
    freq = torch.bincount(tokens, minlength=1300).float() / len(tokens)
    assert (freq - expected).abs().max() < 0.004
    for block in range(3):  # each block's share of the samples
        part = slice(block * 512, (block + 1) * 512)
        assert abs(float(freq[part].sum() - expected[part].sum())) < 0.006
    assert torch.allclose(logprobs, torch.log_softmax(row / 0.8, -1)[tokens], atol=1e-5)


def test_top_p_never_samples_outside_the_nucleus() -> None:
    logits = torch.tensor([3.0, 2.9, 0.0, -0.5]).repeat(5_000, 1)
    tokens, logprobs = sample_next(logits, SamplingParams(top_p=0.8), torch.Generator().manual_seed(1))
    assert set(tokens.tolist()) == {0, 1}
    # logprobs are those of the untruncated distribution, which the trainer recomputes
    assert torch.allclose(logprobs, torch.log_softmax(logits[0], -1)[tokens], atol=1e-5)


def test_greedy_returns_argmax_and_its_logprob() -> None:
    logits = torch.tensor([[0.5, 3.0, 1.0]])
    tokens, logprobs = sample_next(logits, SamplingParams(temperature=0.0), None)
    assert tokens.tolist() == [1]
    assert logprobs.item() == pytest.approx(torch.log_softmax(logits[0], -1)[1].item(), abs=1e-6)


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-random"), load_tokenizer("tiny-random")


def test_batched_greedy_matches_transformers_generate(tiny) -> None:
    """Left padding, one prefill per group, the preallocated cache and dropping finished rows
    must not change a single token."""
    model, tokenizer = tiny
    engine = HFEngine(model, tokenizer)
    gen = torch.Generator().manual_seed(2)
    prompts = [torch.randint(10, 4000, (n,), generator=gen).tolist() for n in (5, 11, 8)]
    groups = engine.generate(prompts, SamplingParams(n=2, temperature=0.0, max_new_tokens=10))
    for prompt, group in zip(prompts, groups):
        with torch.no_grad():
            out = model.generate(
                torch.tensor([prompt]), max_new_tokens=10, do_sample=False, pad_token_id=engine.pad_id
            )
        reference = out[0, len(prompt) :].tolist()
        for completion in group:  # greedy: both samples of the group are the same
            assert completion.token_ids == reference[: len(completion.token_ids)]
            assert len(completion.token_ids) == len(reference)


def test_sampling_is_reproducible_from_the_seed(tiny) -> None:
    model, tokenizer = tiny
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=6)
    runs = [HFEngine(model, tokenizer, seed=5).generate([[11, 12, 13]], params) for _ in range(2)]
    assert [c.token_ids for c in runs[0][0]] == [c.token_ids for c in runs[1][0]]
    assert len({tuple(c.token_ids) for c in runs[0][0]}) > 1  # the samples differ from each other


@pytest.mark.parametrize("packed", ["off", "on"])
def test_per_token_self_certainty_is_exact_and_changes_no_sample(tiny, packed: str) -> None:
    """The engine's per-token self-certainty equals KL(uniform ‖ p) of the model's next-token
    distribution recomputed by a teacher-forced forward (``self_certainty_from_logits``), on every
    decode path; asking for it draws the same tokens."""
    from rlvr.rewards.self_reward import self_certainty_from_logits

    model, tokenizer = tiny
    prompts = [[11, 12, 13], [40, 41, 42, 43, 44]]
    params = SamplingParams(n=3, temperature=1.3, max_new_tokens=7)
    plain = HFEngine(model, tokenizer, seed=3, packed_weights=packed).generate(prompts, params)
    engine = HFEngine(model, tokenizer, seed=3, packed_weights=packed)
    groups = engine.generate(
        prompts, SamplingParams(n=3, temperature=1.3, max_new_tokens=7, self_certainty=True)
    )
    assert [[c.token_ids for c in g] for g in groups] == [[c.token_ids for c in g] for g in plain]
    assert all(c.self_certainty is None for g in plain for c in g)
    for prompt, group in zip(prompts, groups):
        for completion in group:
            ids = torch.tensor([prompt + completion.token_ids])
            with torch.no_grad():
                logits = model(ids).logits[
                    0, len(prompt) - 1 : -1
                ]  # the distributions each token was drawn from
            expected = [self_certainty_from_logits(row[None, None]).item() for row in logits]
            assert completion.self_certainty == pytest.approx(expected, rel=1e-4, abs=1e-4)
