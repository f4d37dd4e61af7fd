"""MKL-packed decode (packed nn.Linear copies, and the fused Llama step that the engine uses for Llama
models): same numbers as nn.Linear, packed from the current weights, off outside decoding."""

import pytest
import torch

from rlvr.models import fused_decode, load_model, load_tokenizer
from rlvr.models.packed import AUTO_MAX_ROWS, AUTO_MIN_NEW_TOKENS, packed_decode_available, packed_linears
from rlvr.rollout import HFEngine, SamplingParams

pytestmark = pytest.mark.skipif(
    not packed_decode_available(torch.nn.Linear(2, 2)), reason="torch built without MKL"
)


@pytest.fixture()
def model():
    return load_model("tiny-random")


def _linear(model) -> torch.nn.Linear:
    return model.model.layers[0].mlp.gate_proj


@pytest.mark.parametrize("rows", [1, 5, 16, 33])
def test_packed_linear_equals_plain_linear(model, rows):
    lin = _linear(model)
    x = torch.randn(rows, lin.in_features, generator=torch.Generator().manual_seed(rows))
    with torch.inference_mode():
        expected = torch.nn.functional.linear(x, lin.weight)
        with packed_linears(model):
            got = lin(x)
            got_3d = lin(x[:, None, :])
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert got_3d.shape == (rows, 1, lin.out_features)
    torch.testing.assert_close(got_3d[:, 0], expected, rtol=1e-5, atol=1e-5)


def test_packed_forward_only_inside_the_block_and_never_with_grad(model):
    lin = _linear(model)
    with packed_linears(model):
        assert "forward" in vars(lin)
        x = torch.randn(2, lin.in_features)
        lin(x).sum().backward()  # grad mode falls back to the plain product: gradients flow
    assert lin.weight.grad is not None and lin.weight.grad.abs().sum() > 0
    assert "forward" not in vars(lin)


def test_modules_are_restored_when_the_block_raises(model):
    with pytest.raises(RuntimeError, match="boom"), packed_linears(model):
        raise RuntimeError("boom")
    assert not any("forward" in vars(m) for m in model.modules() if isinstance(m, torch.nn.Linear))


@pytest.mark.parametrize("fuse_layers", [True, False], ids=["fused", "packed-linears"])
def test_engine_packed_generation_matches_plain(fuse_layers):
    model, tok = load_model("tiny-random"), load_tokenizer("tiny-random")
    prompts = [tok("2 + 3 =")["input_ids"], tok("a longer prompt, 17 - 9 =")["input_ids"]]
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=12)
    on = HFEngine(model, tok, seed=5, packed_weights="on", fuse_layers=fuse_layers)
    assert on.decode_path(6, params) == ("fused" if fuse_layers else "packed")
    runs = {"off": HFEngine(model, tok, seed=5, packed_weights="off").generate(prompts, params)}
    runs["on"] = on.generate(prompts, params)
    for plain_group, packed_group in zip(runs["off"], runs["on"]):
        for plain, packed in zip(plain_group, packed_group):
            assert packed.token_ids == plain.token_ids
            torch.testing.assert_close(
                torch.tensor(packed.logprobs), torch.tensor(plain.logprobs), rtol=1e-4, atol=1e-4
            )


@pytest.mark.parametrize("fuse_layers", [True, False], ids=["fused", "packed-linears"])
def test_engine_uses_the_weights_after_a_fused_optimizer_step(fuse_layers):
    """Fused AdamW writes the weights without moving their version counters: packed copies made
    before an update must never be used after it."""
    model, tok = load_model("tiny-random"), load_tokenizer("tiny-random")
    prompt = [tok("2 + 3 =")["input_ids"]]
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=10)
    packed = HFEngine(model, tok, seed=1, packed_weights="on", fuse_layers=fuse_layers)
    plain = HFEngine(model, tok, seed=1, packed_weights="off")
    packed.generate(prompt, params)  # packs the initial weights
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, fused=True)
    model(input_ids=torch.tensor(prompt)).logits.pow(2).mean().backward()
    optimizer.step()
    packed.sync_weights(model)
    packed.generator.manual_seed(7)
    plain.generator.manual_seed(7)
    for a, b in zip(packed.generate(prompt, params)[0], plain.generate(prompt, params)[0]):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), rtol=1e-4, atol=1e-4)


def test_engine_auto_packs_only_where_it_was_measured_to_pay():
    model, tok = load_model("tiny-random"), load_tokenizer("tiny-random")
    linears = HFEngine(model, tok, packed_weights="auto", fuse_layers=False)

    def path(engine, rows, tokens):
        return engine.decode_path(rows, SamplingParams(n=1, max_new_tokens=tokens))

    assert path(linears, AUTO_MAX_ROWS, AUTO_MIN_NEW_TOKENS) == "packed"
    assert path(linears, AUTO_MAX_ROWS, AUTO_MIN_NEW_TOKENS - 1) == "plain"
    assert path(linears, AUTO_MAX_ROWS + 1, AUTO_MIN_NEW_TOKENS) == "plain"
    fused = HFEngine(model, tok, packed_weights="auto")  # tiny-random is a Llama model
    assert path(fused, fused_decode.AUTO_MAX_ROWS, fused_decode.AUTO_MIN_NEW_TOKENS) == "fused"
    assert path(fused, fused_decode.AUTO_MAX_ROWS, fused_decode.AUTO_MIN_NEW_TOKENS - 1) == "plain"
    assert path(fused, fused_decode.AUTO_MAX_ROWS + 1, fused_decode.AUTO_MIN_NEW_TOKENS) == "plain"
    assert path(HFEngine(model, tok, packed_weights="off"), 1, 512) == "plain"
    with pytest.raises(ValueError, match="packed_weights"):
        HFEngine(model, tok, packed_weights="always")
