"""MKL-packed decode: same numbers as nn.Linear, packed from the current weights, off outside decoding."""

import pytest
import torch

from rlvr.models import load_model, load_tokenizer
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


def test_engine_packed_generation_matches_plain():
    model, tok = load_model("tiny-random"), load_tokenizer("tiny-random")
    prompts = [tok("2 + 3 =")["input_ids"], tok("a longer prompt, 17 - 9 =")["input_ids"]]
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=12)
    runs = {
        mode: HFEngine(model, tok, seed=5, packed_weights=mode).generate(prompts, params)
        for mode in ("off", "on")
    }
    for plain_group, packed_group in zip(runs["off"], runs["on"]):
        for plain, packed in zip(plain_group, packed_group):
            assert packed.token_ids == plain.token_ids
            torch.testing.assert_close(
                torch.tensor(packed.logprobs), torch.tensor(plain.logprobs), rtol=1e-4, atol=1e-4
            )


def test_engine_uses_the_weights_after_a_fused_optimizer_step():
    """Fused AdamW writes the weights without moving their version counters: packed copies made
    before an update must never be used after it."""
    model, tok = load_model("tiny-random"), load_tokenizer("tiny-random")
    prompt = [tok("2 + 3 =")["input_ids"]]
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=10)
    packed, plain = HFEngine(model, tok, seed=1, packed_weights="on"), HFEngine(model, tok, seed=1)
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


def test_engine_auto_packs_only_few_rows_and_long_generations():
    model, tok = load_model("tiny-random"), load_tokenizer("tiny-random")
    engine = HFEngine(model, tok, packed_weights="auto")
    assert engine.uses_packed_weights(AUTO_MAX_ROWS, SamplingParams(n=1, max_new_tokens=AUTO_MIN_NEW_TOKENS))
    assert not engine.uses_packed_weights(
        AUTO_MAX_ROWS, SamplingParams(n=1, max_new_tokens=AUTO_MIN_NEW_TOKENS - 1)
    )
    assert not engine.uses_packed_weights(
        AUTO_MAX_ROWS + 1, SamplingParams(n=1, max_new_tokens=AUTO_MIN_NEW_TOKENS)
    )
    assert not HFEngine(model, tok, packed_weights="off").uses_packed_weights(
        1, SamplingParams(max_new_tokens=512)
    )
    with pytest.raises(ValueError, match="packed_weights"):
        HFEngine(model, tok, packed_weights="always")
