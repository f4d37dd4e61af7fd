"""rlvr_sdpa (GQA kept grouped on the CPU) gives transformers' sdpa numbers: logits, gradients, decoding."""

import pytest
import torch

from rlvr.models import load_model, load_tokenizer
from rlvr.models.attention import NAME, single_query_attention
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


def _exact_attention(query, key, value, real):
    """Attention of bf16 inputs computed in float64, K/V repeated per query head as repeat_kv does."""
    group = query.shape[1] // key.shape[1]
    k = key.double().repeat_interleave(group, dim=1)
    v = value.double().repeat_interleave(group, dim=1)
    scores = query.double() @ k.transpose(-1, -2) * query.shape[-1] ** -0.5
    scores = scores.masked_fill(~real, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


@pytest.mark.parametrize("mask_kind", ["bool", "additive", "none"])
def test_single_query_attention_in_bf16(mask_kind):
    """One decode step's bf16 attention: within bf16 rounding of the exact result, query heads
    grouped onto kv heads as repeat_kv groups them, padding masked (boolean or additive mask)."""
    gen = torch.Generator().manual_seed(0)
    query = torch.randn(4, 6, 1, 16, generator=gen).bfloat16()
    key = (3 * torch.randn(4, 2, 9, 16, generator=gen)).bfloat16()
    value = torch.randn(4, 2, 9, 16, generator=gen).bfloat16()
    real = torch.ones(4, 1, 1, 9, dtype=torch.bool)
    if mask_kind != "none":
        real[0, ..., :4] = False  # left padding
        real[2, ..., :1] = False
    mask = {"bool": real, "none": None}.get(mask_kind)
    if mask_kind == "additive":
        mask = torch.zeros(real.shape).masked_fill_(~real, float("-inf"))
    got = single_query_attention(query, key, value, mask)
    expected = _exact_attention(query, key, value, real)
    assert got.dtype == torch.bfloat16 and got.shape == (4, 6, 1, 16)
    # the weights are rounded to bf16 (2^-8 relative) before the sum over 9 values of |v| <~ 3
    torch.testing.assert_close(got.double(), expected, rtol=0, atol=0.03)
    assert (got.double() - expected).abs().mean() < 4e-3
    # and closer to the exact result than PyTorch's own SDPA kernel in bf16 is, on average
    torch_sdpa = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=real, enable_gqa=True
    )
    assert (got.double() - expected).abs().mean() <= (torch_sdpa.double() - expected).abs().mean() * 1.5


def test_bf16_decoding_goes_through_single_query_attention(model, monkeypatch):
    """The model's own forward at one query in bf16 on the CPU calls single_query_attention (the
    fused bf16 decode step relies on that to stay bit-identical with it); prefill does not."""
    import rlvr.models.attention as attention

    calls = []
    real = attention.single_query_attention
    monkeypatch.setattr(attention, "single_query_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    low = load_model("tiny-random").to(torch.bfloat16).eval()
    ids, mask = _batch()
    with torch.inference_mode():
        out = low(input_ids=ids, attention_mask=mask, use_cache=True)
        assert calls == []  # the prefill: 14 queries
        step_mask = torch.cat([mask, mask.new_ones((3, 1))], dim=1)
        low(input_ids=ids[:, -1:], attention_mask=step_mask, past_key_values=out.past_key_values)
    assert len(calls) == low.config.num_hidden_layers
