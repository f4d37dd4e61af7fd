"""LoRA through the trainer: only adapters train, the checkpoint holds the adapter and a merged
plain model, and the engine samples through the adapters."""

from __future__ import annotations

import pytest
import torch
from tiny import TINY_RUN

from rlvr import api
from rlvr.config import load_config
from rlvr.errors import RlvrError
from rlvr.models import load_model
from rlvr.models.lora import apply_lora, has_adapters, merged_weights, trainable_parameters
from rlvr.models.packed import packed_decode_available
from rlvr.rollout import HFEngine, SamplingParams

pytest.importorskip("peft", reason="LoRA needs PEFT (pip install 'rlvr[peft]')")

LORA = ["model.lora.r=4", "model.lora.alpha=8"]


def _cfg(tmp_path, *extra: str):
    return load_config(None, [*TINY_RUN, f"output_dir={tmp_path}", "name=lora", *LORA, *extra])


def test_lora_trains_adapters_only_and_saves_adapter_and_merged_model(tmp_path):
    from peft import PeftModel

    api.train(_cfg(tmp_path, "train.steps=2", "optim.lr=1e-2", "optim.warmup_steps=0"), quiet=True)
    checkpoint = tmp_path / "lora" / "checkpoints" / "step-000002"
    assert (checkpoint / "adapter" / "adapter_config.json").exists()
    base = load_model("tiny-random")
    merged = load_model(str(checkpoint / "model"))  # plain transformers, no PEFT
    assert not has_adapters(merged)
    changed = [n for (n, a), b in zip(base.named_parameters(), merged.parameters()) if not torch.equal(a, b)]
    # the adapters touched the projections they sit on, and nothing else (embeddings, norms)
    assert changed and all(n.endswith("proj.weight") for n in changed), changed
    # the merged model computes what base + adapter computes
    with_adapter = PeftModel.from_pretrained(load_model("tiny-random"), str(checkpoint / "adapter"))
    ids = torch.tensor([[1, 5, 9, 13, 2]])
    with torch.no_grad():
        assert torch.allclose(merged(ids).logits, with_adapter(ids).logits, atol=1e-5)


def test_only_adapter_parameters_are_in_the_optimizer(tmp_path):
    from rlvr.train.learn.learner import Learner

    cfg = _cfg(tmp_path)
    policy = apply_lora(load_model("tiny-random"), cfg.model.lora)
    trainable, total = trainable_parameters(policy)
    assert 0 < trainable < total / 10
    learner = Learner(cfg, policy, pad_id=0)
    in_optimizer = sum(p.numel() for g in learner.optimizer.param_groups for p in g["params"])
    assert in_optimizer == trainable
    assert all("lora_" in n for n, p in policy.named_parameters() if p.requires_grad)


def test_the_engine_samples_through_the_adapters():
    """Packed and fused decode copy the base weights: with adapters they must be off, or sampling
    would ignore what training changed."""
    from rlvr.models import load_tokenizer

    cfg = load_config(None, [*TINY_RUN, *LORA])
    policy = apply_lora(load_model("tiny-random"), cfg.model.lora)
    with torch.no_grad():  # give the adapters an effect (B starts at zero)
        for n, p in policy.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    assert not packed_decode_available(policy)
    tok = load_tokenizer("tiny-random")
    engine = HFEngine(policy, tok, packed_weights="on", seed=0)
    assert engine.decode_path(8, SamplingParams(max_new_tokens=32)) == "plain"
    prompt = [[1, 5, 9, 13]]
    greedy = SamplingParams(n=1, temperature=0.0, max_new_tokens=6, ignore_eos=True)
    with_adapters = engine.generate(prompt, greedy)[0][0].token_ids
    with policy.disable_adapter():
        without = engine.generate(prompt, greedy)[0][0].token_ids
    ids = torch.tensor([prompt[0] + with_adapters[:-1]])
    with torch.no_grad():
        expected = policy(ids).logits[0, len(prompt[0]) - 1 :].argmax(-1).tolist()
    assert with_adapters == expected and with_adapters != without


def test_a_bad_target_module_is_a_config_error(tmp_path):
    cfg = _cfg(tmp_path, "model.lora.target_modules=[no_such_proj]")
    with pytest.raises(RlvrError, match="model.lora.target_modules"):
        apply_lora(load_model("tiny-random"), cfg.model.lora)


def test_merged_weights_are_the_merged_model_under_plain_names():
    """What the vLLM engine's merged sync sends: merge_and_unload's parameters, by the plain model's
    names, computed without changing the adapter model; merge=False gives the untouched base."""
    import copy

    cfg = load_config(None, [*TINY_RUN, *LORA])
    plain = load_model("tiny-random")
    names = [n for n, _ in plain.named_parameters()]
    base = {n: p.detach().clone() for n, p in plain.named_parameters()}
    policy = apply_lora(plain, cfg.model.lora)
    with torch.no_grad():
        for n, p in policy.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    merged = dict(copy.deepcopy(policy).merge_and_unload().named_parameters())
    weights = merged_weights(policy)
    assert list(weights) == names
    changed = [n for n in names if not torch.equal(weights[n], base[n])]
    assert changed and all(torch.allclose(weights[n], merged[n], atol=1e-6) for n in names)
    assert all(torch.equal(t, base[n]) for n, t in merged_weights(policy, merge=False).items())
    assert has_adapters(policy)  # untouched
