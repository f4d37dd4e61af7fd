"""The HF engine runs a prefix all prompts share once: the same tokens, logprobs and kept caches."""

from __future__ import annotations

import pytest
import torch

from rlvr.models import load_model, load_tokenizer
from rlvr.models.prefix import MIN_SHARED_PREFIX, common_prefix_length
from rlvr.rollout import HFEngine, SamplingParams


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-random"), load_tokenizer("tiny-random")


def _prompts(shared: int, rests: tuple[int, ...], seed: int = 4) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    prefix = torch.randint(10, 4000, (shared,), generator=gen).tolist()
    return [prefix + torch.randint(10, 4000, (n,), generator=gen).tolist() for n in rests]


def test_common_prefix_length() -> None:
    assert common_prefix_length([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert common_prefix_length([[1, 2], [1, 2]]) == 2
    assert common_prefix_length([[5], [1]]) == 0
    assert common_prefix_length([]) == 0


def _spy_prefix_rows(model, monkeypatch) -> list[tuple[int, int]]:
    shapes: list[tuple[int, int]] = []
    forward = model.forward
    monkeypatch.setattr(
        model, "forward", lambda **k: shapes.append(tuple(k["input_ids"].shape)) or forward(**k)
    )
    return shapes


@pytest.mark.parametrize("packed", ["off", "on"])
def test_a_shared_prefix_gives_the_same_tokens_and_logprobs(tiny, monkeypatch, packed: str) -> None:
    model, tokenizer = tiny
    prompts = _prompts(24, (1, 7, 3))  # one prompt is the prefix and a single token
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=8, ignore_eos=True)
    plain = HFEngine(model, tokenizer, seed=1, packed_weights=packed, share_prefix=False).generate(
        prompts, params
    )
    shapes = _spy_prefix_rows(model, monkeypatch)
    shared = HFEngine(model, tokenizer, seed=1, packed_weights=packed).generate(prompts, params)
    assert (1, 24) in shapes  # the prefix ran once, as one row
    for a, b in zip(plain, shared):
        for x, y in zip(a, b):
            assert x.token_ids == y.token_ids
            assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-5)
    # greedy against transformers' own generate on the whole prompt
    greedy = HFEngine(model, tokenizer).generate(
        prompts, SamplingParams(n=1, temperature=0.0, max_new_tokens=6)
    )
    for prompt, (completion,) in zip(prompts, greedy):
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False, pad_token_id=0)
        reference = out[0, len(prompt) :].tolist()
        assert completion.token_ids == reference[: len(completion.token_ids)]


def test_kept_caches_hold_the_whole_prompt(tiny) -> None:
    """A multi-turn episode continues from the cache the first turn kept: with a shared prefix it is
    the prefix's keys and values, then the prompt's rest, then the reply, as without."""
    model, tokenizer = tiny
    prompts = _prompts(20, (4, 9))
    params = SamplingParams(n=2, temperature=0.0, max_new_tokens=5, ignore_eos=True)
    _, plain = HFEngine(model, tokenizer, share_prefix=False).generate_with_states(prompts, params)
    _, shared = HFEngine(model, tokenizer).generate_with_states(prompts, params)
    for group_a, group_b in zip(plain, shared):
        for a, b in zip(group_a, group_b):
            assert a.length == b.length
            for ka, kb in zip(a.keys + a.values, b.keys + b.values):
                assert torch.allclose(ka, kb, atol=1e-5)


def test_short_or_missing_prefixes_prefill_as_before(tiny, monkeypatch) -> None:
    model, tokenizer = tiny
    engine = HFEngine(model, tokenizer)
    shapes = _spy_prefix_rows(model, monkeypatch)
    params = SamplingParams(n=1, temperature=0.0, max_new_tokens=2)
    engine.generate(_prompts(MIN_SHARED_PREFIX - 1, (3, 5)), params)  # too short to pay
    assert shapes[0] == (2, MIN_SHARED_PREFIX - 1 + 5)  # the prompts prefilled whole, together
    engine.generate(_prompts(30, (3,)), params)  # one prompt: nothing to share
    assert (1, 30) not in shapes and (1, 33) in shapes


def test_a_prompt_that_is_the_whole_prefix_keeps_its_last_token_to_prefill(tiny) -> None:
    model, tokenizer = tiny
    (longer,) = _prompts(20, (5,))
    prompts = [longer[:20], longer]  # the first prompt is the prefix the second starts with
    params = SamplingParams(n=2, temperature=0.0, max_new_tokens=4, ignore_eos=True)
    plain = HFEngine(model, tokenizer, share_prefix=False).generate(prompts, params)
    shared = HFEngine(model, tokenizer).generate(prompts, params)
    assert [[c.token_ids for c in g] for g in plain] == [[c.token_ids for c in g] for g in shared]
