"""rlvr_sdpa (GQA kept grouped on the CPU) gives transformers' sdpa numbers: logits, gradients, decoding."""

import pytest
import torch

from rlvr.models import load_model, load_tokenizer
from rlvr.models.attention import NAME
from rlvr.rollout import HFEngine, SamplingParams


@pytest.fixture(scope="module")
def model():
    return load_model("tiny-random")


def _batch():
    ids = torch.randint(5, 1000, (3, 14), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, :5] = 0  # left padding, as rlvr's batches have
    mask[2, :2] = 0
    return ids, mask


def _logits_and_grads(model, impl):
    model.set_attn_implementation(impl)
    model.zero_grad()
    ids, mask = _batch()
    logits = model(input_ids=ids, attention_mask=mask).logits
    (logits.float().pow(2).mean()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if "self_attn" in n}
    return logits.detach(), grads


def test_cpu_models_load_with_grouped_attention(model):
    assert model.config.num_key_value_heads < model.config.num_attention_heads  # the case it changes
    assert model.config._attn_implementation == NAME


def test_logits_and_gradients_equal_transformers_sdpa(model):
    ours, our_grads = _logits_and_grads(model, NAME)
    theirs, their_grads = _logits_and_grads(model, "sdpa")
    model.set_attn_implementation(NAME)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    assert our_grads.keys() == their_grads.keys() and our_grads
    for name in our_grads:
        torch.testing.assert_close(our_grads[name], their_grads[name], rtol=1e-4, atol=1e-6)


def test_cached_decoding_equals_transformers_sdpa(model):
    tokenizer = load_tokenizer("tiny-random")
    prompts = [[11, 42, 7], [5, 6, 7, 8, 9, 10]]  # different lengths: padded prefill, masked decode
    params = SamplingParams(n=2, temperature=0.0, max_new_tokens=6, ignore_eos=True)
    texts = {}
    for impl in (NAME, "sdpa"):
        model.set_attn_implementation(impl)
        engine = HFEngine(model, tokenizer, max_batch_sequences=8, seed=0)
        groups = engine.generate(prompts, params)
        texts[impl] = [[(c.token_ids, c.logprobs) for c in group] for group in groups]
    model.set_attn_implementation(NAME)
    for ours, theirs in zip(texts[NAME], texts["sdpa"]):
        for (ids_a, lp_a), (ids_b, lp_b) in zip(ours, theirs):
            assert ids_a == ids_b
            torch.testing.assert_close(torch.tensor(lp_a), torch.tensor(lp_b), rtol=1e-5, atol=1e-5)
