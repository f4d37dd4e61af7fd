"""The fused Llama decode step computes what transformers' forward computes, on the engine's KV cache."""

import pytest
import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

import rlvr.models.fused_decode as fused_decode
from rlvr.models import load_model, load_tokenizer
from rlvr.models.attention import register
from rlvr.models.fused_decode import FusedLlamaDecoder, fused_decode_supported
from rlvr.models.packed import packed_decode_available
from rlvr.models.precision import native_low_precision
from rlvr.rollout.kv_cache import reserve_decode_room

pytestmark = pytest.mark.skipif(
    not packed_decode_available(torch.nn.Linear(2, 2)), reason="torch built without MKL"
)


def _small_llama(**overrides) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = dict(
        vocab_size=97,
        hidden_size=48,
        intermediate_size=80,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=1,  # one kv head for six query heads: the grouping must be right
        tie_word_embeddings=False,
        rope_theta=100.0,
    )
    config.update(overrides)
    return LlamaForCausalLM(LlamaConfig(**config)).eval()


def _prefill(model, prompts: list[list[int]], n: int, extra: int):
    """Left-padded prefill, cache repeated n times per prompt, as the HF engine does it."""
    width = max(len(p) for p in prompts)
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, width - len(p) :] = torch.tensor(p)
        mask[row, width - len(p) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        out = model(
            input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=DynamicCache()
        )
    cache = out.past_key_values
    cache.batch_repeat_interleave(n)
    reserve_decode_room(cache, extra)
    return cache, mask.repeat_interleave(n, dim=0), positions[:, -1].repeat_interleave(n, dim=0) + 1


def _steps_alongside(model: torch.nn.Module, steps: int = 6):
    """Decode ``steps`` tokens with a fused decoder and with the model's own forward, each on its own
    cache of the same prefill (3 prompts of different lengths, 2 sequences each; after three steps
    two sequences finish and both caches drop them); yields (fused logits, forward logits) per step."""
    prompts = [[5, 9, 11, 3, 7, 2], [4, 8], [13, 1, 6]]  # different lengths: left padding
    n = 2
    ours, ours_mask, ours_pos = _prefill(model, prompts, n, steps)
    theirs, theirs_mask, theirs_pos = _prefill(model, prompts, n, steps)
    decoder = FusedLlamaDecoder(model, rows_hint=len(prompts) * n)
    tokens = torch.arange(len(prompts) * n) % 17 + 1
    for step in range(steps):
        if step == 3:  # sequences finish: both caches drop the same rows
            keep = torch.tensor([0, 2, 3, 5])
            ours.batch_select_indices(keep)
            theirs.batch_select_indices(keep)
            tokens, ours_mask, ours_pos = tokens[keep], ours_mask[keep], ours_pos[keep]
            theirs_mask, theirs_pos = theirs_mask[keep], theirs_pos[keep]
        ours_mask = torch.cat([ours_mask, ours_mask.new_ones((len(tokens), 1))], dim=1)
        theirs_mask = torch.cat([theirs_mask, theirs_mask.new_ones((len(tokens), 1))], dim=1)
        got = decoder.step(tokens, ours_pos, ours, ours_mask)
        with torch.inference_mode():
            expected = model(
                input_ids=tokens[:, None],
                attention_mask=theirs_mask,
                position_ids=theirs_pos[:, None],
                past_key_values=theirs,
            ).logits[:, -1]
        yield got, expected
        assert not torch.equal(got[0], got[-1])  # rows differ: the comparison is not vacuous
        tokens = expected.float().argmax(-1)
        ours_pos, theirs_pos = ours_pos + 1, theirs_pos + 1


@pytest.mark.parametrize("model_name", ["tiny-random", "small-untied-mqa"])
def test_fused_step_equals_transformers_forward(model_name):
    model = load_model("tiny-random").eval() if model_name == "tiny-random" else _small_llama()
    for got, expected in _steps_alongside(model):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_decoder_uses_the_weights_it_was_built_from():
    """A decoder is a snapshot: one built before an update keeps the old weights, one built after
    computes the updated model's forward (the engine therefore builds one per generate call)."""
    model = _small_llama()
    stale = FusedLlamaDecoder(model, rows_hint=2)
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.mul_(3.0)
    fresh = FusedLlamaDecoder(model, rows_hint=2)
    tokens = torch.tensor([4, 5])
    results = []
    for decoder in (stale, fresh, None):
        cache, mask, pos = _prefill(model, [[1, 2, 3]], 2, 2)  # the same cache for each
        mask = torch.cat([mask, mask.new_ones((2, 1))], dim=1)
        if decoder is None:
            with torch.inference_mode():
                out = model(
                    input_ids=tokens[:, None],
                    attention_mask=mask,
                    position_ids=pos[:, None],
                    past_key_values=cache,
                )
            results.append(out.logits[:, -1])
        else:
            results.append(decoder.step(tokens, pos, cache, mask))
    stale_logits, fresh_logits, expected = results
    torch.testing.assert_close(fresh_logits, expected, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(stale_logits, expected, atol=1e-3)


def test_supported_only_where_the_step_is_exact():
    assert fused_decode_supported(_small_llama())
    assert not fused_decode_supported(_small_llama(attention_bias=True))
    assert not fused_decode_supported(_small_llama(mlp_bias=True))
    assert not fused_decode_supported(_small_llama(hidden_act="gelu"))
    assert not fused_decode_supported(_small_llama().to(torch.float16))
    qwen = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=97,
            hidden_size=48,
            intermediate_size=80,
            num_hidden_layers=1,
            num_attention_heads=6,
            num_key_value_heads=2,
        )
    )
    assert not fused_decode_supported(qwen)  # q/k/v biases: not the Llama step
    with pytest.raises(ValueError, match="Llama"):
        FusedLlamaDecoder(qwen)


NATIVE_BF16 = native_low_precision("cpu")[0]  # this CPU's own answer (the fixture below patches the module's)
onednn_bf16 = pytest.mark.skipif(
    not (hasattr(torch.ops.mkldnn, "_linear_pointwise") and torch.ops.mkldnn._is_mkldnn_bf16_supported()),
    reason="torch built without oneDNN bf16",
)


def _bf16(model: torch.nn.Module) -> torch.nn.Module:
    model = model.to(torch.bfloat16).eval()
    model.set_attn_implementation(register())  # as load_model sets it on the CPU
    return model


@pytest.fixture
def native_bf16(monkeypatch):
    """The bf16 step is used where the CPU computes bf16 natively; oneDNN emulates bf16 on a CPU
    without (slower, possibly summing in another order), so the tests run everywhere oneDNN has bf16:
    exact equality where the CPU is native, bf16 tolerances elsewhere."""
    monkeypatch.setattr(fused_decode, "native_low_precision", lambda device: (True, "test"))


def test_bf16_supported_where_the_cpu_computes_bf16(monkeypatch):
    model = _bf16(_small_llama())
    monkeypatch.setattr(fused_decode, "native_low_precision", lambda device: (False, "test"))
    assert not fused_decode_supported(model)  # emulated bf16: transformers' forward
    monkeypatch.setattr(fused_decode, "native_low_precision", lambda device: (True, "test"))
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        assert fused_decode_supported(model)
    model.set_attn_implementation("sdpa")  # another attention at one query: not bit-identical
    assert not fused_decode_supported(model)


@onednn_bf16
@pytest.mark.parametrize("model_name", ["tiny-random", "small-untied-mqa"])
def test_bf16_fused_step_is_bit_identical_to_the_models_forward(model_name, native_bf16):
    """oneDNN-packed bf16 GEMMs, LlamaRMSNorm's roundings and the model's own one-query attention:
    the fused bf16 step's logits equal the model's bf16 forward exactly, step after step."""
    model = _bf16(load_model("tiny-random") if model_name == "tiny-random" else _small_llama())
    assert fused_decode_supported(model)
    for step, (got, expected) in enumerate(_steps_alongside(model)):
        assert got.dtype == torch.bfloat16
        if NATIVE_BF16:  # where the engine uses the step: exactly equal
            assert torch.equal(got, expected), f"step {step}: max difference {(got - expected).abs().max()}"
        else:  # oneDNN's emulated bf16 may sum a GEMM in another order than ATen's small-GEMM fallback
            torch.testing.assert_close(got.float(), expected.float(), rtol=0.02, atol=0.02)


@onednn_bf16
def test_bf16_fused_engine_equals_transformers_on_the_eval_prompts(native_bf16):
    """The bundled model's bf16 copy, the default task's held-out prompts, greedy: the engine's fused
    bf16 path gives exactly the tokens and log-probs of transformers' forward."""
    from rlvr.config import load_config
    from rlvr.data.from_config import build_datasets
    from rlvr.models.chat import encode_prompt
    from rlvr.rollout import HFEngine, SamplingParams

    tokenizer = load_tokenizer("smollm2-135m-instruct")
    bf16 = _bf16(load_model("smollm2-135m-instruct"))
    _, held_out = build_datasets(load_config().data)
    prompts = [encode_prompt(tokenizer, held_out[i].prompt) for i in range(8)]
    params = SamplingParams(temperature=0.0, max_new_tokens=16)
    fused = HFEngine(bf16, tokenizer)
    assert fused.decode_path(len(prompts), params) == "fused"
    got = [c for group in fused.generate(prompts, params) for c in group]
    plain = HFEngine(bf16, tokenizer, packed_weights="off")
    expected = [c for group in plain.generate(prompts, params) for c in group]
    assert len({tuple(c.token_ids) for c in got}) > 4  # eight different answers, not one repeated
    if NATIVE_BF16:  # where the engine uses the fused step: the same tokens and log-probs exactly
        assert [c.token_ids for c in got] == [c.token_ids for c in expected]
        assert [c.logprobs for c in got] == [c.logprobs for c in expected]
        return
    same = [(a, b) for a, b in zip(got, expected) if a.token_ids == b.token_ids]
    assert len(same) >= 6  # emulated bf16 (see above): a near-tie may flip a greedy token
    for a, b in same:
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), rtol=0, atol=0.05)
