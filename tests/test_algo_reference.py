"""A KL reference that moves: ProRL's periodic reset and a slowly-evolving EMA reference.

The pure moves against hand values (tied weights averaged once), the reset's optimizer restart,
the config check, then the trainer wiring: with a reset every step the KL the update measures is
exactly 0 from the second step on (the reference is the policy that sampled), while a fixed
reference's KL grows; and a moving reference resumes bit for bit through a checkpoint.
"""

from __future__ import annotations

import pytest
import torch
from tiny import TINY_RUN

from rlvr import api
from rlvr.config import load_config
from rlvr.config.reference import ReferenceConfig
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl
from rlvr.train.learn.estimate import check_algorithm
from rlvr.train.learn.reference import ReferenceMover, copy_weights, ema_step


class Tied(torch.nn.Module):
    """An embedding and an output head that share one weight, as SmolLM2's do."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(2, 2)
        self.head = torch.nn.Linear(2, 2, bias=False)
        self.head.weight = self.embed.weight
        self.bias = torch.nn.Parameter(torch.zeros(2))
        with torch.no_grad():
            self.embed.weight.fill_(value)
            self.bias.fill_(value)


def test_ema_step_moves_each_weight_once_by_one_minus_decay() -> None:
    ref, policy = Tied(0.0), Tied(1.0)
    ema_step(ref, policy, decay=0.9)  # 0.9·0 + 0.1·1 = 0.1; tied: once, not 0.19
    assert torch.allclose(ref.embed.weight, torch.full((2, 2), 0.1))
    assert torch.allclose(ref.bias, torch.full((2,), 0.1))
    ema_step(ref, policy, decay=0.9)  # 0.9·0.1 + 0.1·1 = 0.19
    assert torch.allclose(ref.head.weight, torch.full((2, 2), 0.19))
    assert torch.equal(policy.bias, torch.ones(2))  # the policy is read, never written
    copy_weights(ref, policy)
    assert torch.equal(ref.embed.weight, policy.embed.weight) and torch.equal(ref.bias, policy.bias)


def test_reset_copies_the_policy_every_n_steps_and_restarts_adam() -> None:
    for reset_optimizer in (True, False):
        ref, policy = Tied(0.0), Tied(1.0)
        optimizer = torch.optim.AdamW(policy.parameters(), lr=0.1)
        policy.bias.sum().backward()
        optimizer.step()  # AdamW now holds moments for the bias
        mover = ReferenceMover(ReferenceConfig(update="reset", every=2, reset_optimizer=reset_optimizer))
        first = mover.after_update(policy, ref, optimizer)
        assert first == {"reference/resets": 0.0, "reference/reset": 0.0}
        assert torch.equal(ref.bias, torch.zeros(2)) and len(optimizer.state) > 0
        second = mover.after_update(policy, ref, optimizer)
        assert second == {"reference/resets": 1.0, "reference/reset": 1.0}
        assert torch.equal(ref.bias, policy.bias) and torch.equal(ref.embed.weight, policy.embed.weight)
        assert (len(optimizer.state) == 0) == reset_optimizer
        assert mover.after_update(policy, ref, optimizer)["reference/reset"] == 0.0  # the count restarts
    fixed = ReferenceMover(ReferenceConfig())
    ref = Tied(0.0)
    assert fixed.after_update(Tied(1.0), ref, optimizer) == {} and torch.equal(ref.bias, torch.zeros(2))


def test_a_reference_of_another_architecture_is_refused() -> None:
    with pytest.raises(ValueError, match="algo.reference.update"):
        copy_weights(torch.nn.Linear(2, 2), Tied(1.0))


def test_a_moving_reference_needs_kl() -> None:
    with pytest.raises(RlvrError, match=r"algo.reference.update=reset.*algo.kl_coef > 0"):
        check_algorithm(load_config(None, ["algo.reference.update=reset"]))
    # an estimator that reads the reference uses it without KL
    care = ["algo.advantage=grpo_care", "algo.advantage_params={tokenizer: tiny-random}"]
    check_algorithm(load_config(None, ["algo.reference.update=ema", *care]))
    assert load_config(None, ["algo.reference.update=ema", "algo.kl_coef=0.1"]).algo.reference.decay == 0.99


BASE = [
    *TINY_RUN,
    "data.train_size=4",
    "data.eval_size=0",
    "eval.before=false",
    "train.steps=4",
    "optim.lr=1e-3",
    "optim.warmup_steps=0",
    "algo.kl_coef=0.5",
    "algo.dynamic_sampling=false",
]


def _train_rows(path) -> list[dict]:
    rows = [r for r in read_jsonl(path / "metrics.jsonl") if r["phase"] == "train"]
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "throughput/"))} for r in rows]


def test_a_reset_every_step_makes_the_updates_kl_zero(tmp_path) -> None:
    """One epoch, one minibatch: the KL is measured before the step's gradient, so after a reset the
    reference is exactly the policy that sampled and the KL is 0; a fixed reference drifts away."""
    for name, extra in (("fixed", []), ("reset", ["algo.reference.update=reset", "algo.reference.every=1"])):
        api.train(load_config(None, [*BASE, f"output_dir={tmp_path}", f"name={name}", *extra]), quiet=True)
    fixed, reset = _train_rows(tmp_path / "fixed"), _train_rows(tmp_path / "reset")
    assert [r["reference/resets"] for r in reset] == [1.0, 2.0, 3.0, 4.0]
    assert all("reference/resets" not in r for r in fixed)
    assert reset[0]["update/kl"] == fixed[0]["update/kl"] == 0.0  # step 1: both the starting policy
    assert all(abs(r["update/kl"]) < 1e-7 for r in reset[1:])
    assert all(r["update/kl"] > 1e-5 for r in fixed[1:])


def test_a_moving_reference_resumes_bit_for_bit(tmp_path) -> None:
    """4 steps straight equal 1 step, a stop, a resume and 3 more: the moved reference is saved."""
    for update in ("ema", "reset"):
        extra = [f"algo.reference.update={update}", "algo.reference.decay=0.5", "algo.reference.every=2"]

        def cfg(name: str, *more: str, extra: list[str] = extra):
            return load_config(
                None, [*BASE, "train.save_every=2", *extra, f"output_dir={tmp_path}", f"name={name}", *more]
            )

        full, cut = f"{update}-full", f"{update}-cut"
        api.train(cfg(full), quiet=True)
        api.train(cfg(cut, "train.time_limit_s=0.001"), quiet=True)  # stops after step 1, checkpointed
        assert [r["step"] for r in read_jsonl(tmp_path / cut / "metrics.jsonl")] == [1]
        api.train(cfg(cut), resume=True, quiet=True)
        assert _train_rows(tmp_path / cut) == _train_rows(tmp_path / full)
        assert any(r["update/kl"] > 0 for r in _train_rows(tmp_path / full))
