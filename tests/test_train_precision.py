"""Mixed precision (``model.precision``, ``rollout.weights_dtype``): resolution, the learner's
autocast, fp32 master weights, the bf16 sampling copy and the sampler/trainer mismatch metrics.

Tolerances: under bf16 autocast a forward pass rounds every matmul input to 8 mantissa bits
(relative error ~4e-3 per element); the logprobs of tiny-random differ from fp32 by < 0.05 and the
gradients keep their direction (cosine > 0.99). Checkpoint/resume equality in mixed modes is in
``tests/test_train_e2e.py`` (``bf16_mixed``, ``fp16_mixed``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tiny import TINY_RUN

from rlvr.config import load_config
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl
from rlvr.models import precision as prec
from rlvr.models.precision import Precision, resolve_precision
from rlvr.train.learn.logprobs import completion_logprobs
from rlvr.train.learn.update import mismatch_metrics
from rlvr.train.loop.orchestrator import Orchestrator

TINY = [*TINY_RUN, "name=run", "data.eval_size=0", "eval.before=false", "train.final_checkpoint=none"]


def _cfg(tmp_path: Path, *extra: str):
    return load_config(None, [*TINY, f"output_dir={tmp_path}", *extra])


# ------------------------------------------------------------------------- resolution
def test_modes_resolve_to_master_and_compute_dtypes() -> None:
    mixed = resolve_precision("bf16-mixed", "auto", "cpu")
    assert mixed.param_dtype == torch.float32 and mixed.autocast_dtype == torch.bfloat16
    assert mixed.rollout_dtype == torch.bfloat16  # auto: a bf16 copy for sampling
    assert resolve_precision("bf16-mixed", "policy", "cpu").rollout_dtype is None
    pure = resolve_precision("bf16", "auto", "cpu")
    assert pure.param_dtype == torch.bfloat16 and pure.autocast_dtype is None and pure.rollout_dtype is None
    assert resolve_precision("bf16", "bf16", "cpu").rollout_dtype is None  # already bf16: no copy
    fp16 = resolve_precision("fp16-mixed", "auto", "cpu")
    assert fp16.loss_scaling and fp16.rollout_dtype == torch.float16
    fp32 = resolve_precision("fp32", "auto", "cpu")
    assert fp32.param_dtype == torch.float32 and fp32.autocast_dtype is None and fp32.rollout_dtype is None
    assert resolve_precision("fp32", "bf16", "cpu").rollout_dtype == torch.bfloat16


@pytest.mark.parametrize(
    ("flags", "mode", "why"),
    [
        ({"avx512f", "amx_bf16", "amx_tile"}, "bf16-mixed", "amx_bf16"),
        ({"avx512f", "avx512_bf16"}, "bf16-mixed", "avx512_bf16"),
        ({"avx2", "fma"}, "fp32", "neither amx_bf16 nor avx512_bf16"),
    ],
)
def test_auto_picks_bf16_only_where_the_cpu_has_it(monkeypatch, flags, mode, why) -> None:
    monkeypatch.setattr(prec, "cpu_flags", lambda: flags)
    chosen = resolve_precision("auto", "auto", "cpu")
    assert chosen.mode == mode and why in chosen.reason
    assert f"auto chose {mode}" in chosen.describe()  # what the start-up header prints


def test_cpu_flags_are_read_from_cpuinfo(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx512_bf16 amx_tile\n")
    assert {"avx512_bf16", "amx_tile"} <= prec.cpu_flags(info)


def test_old_dtype_key_and_bad_modes_are_refused() -> None:
    with pytest.raises(RlvrError, match="replaced by model.precision"):
        load_config(None, ["model.dtype=bfloat16"])
    with pytest.raises(RlvrError, match="fp16-mixed with algo.critic.kind=separate"):
        load_config(None, ["model.precision=fp16-mixed", "algo.advantage=gae", "algo.critic.kind=separate"])


# ------------------------------------------------------------------------- the mismatch metrics
def test_mismatch_metrics_by_hand() -> None:
    trainer = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, 0.0]])
    sampler = torch.tensor([[-1.1, -2.0, -2.0], [-0.5, -0.7, -9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])  # the last token of row 2 is not trained on
    m = mismatch_metrics(trainer, sampler, mask)
    deltas = [0.1, 0.0, -1.0, 0.0, 0.2]
    assert m["mismatch/logprob_diff_mean"] == pytest.approx(sum(map(abs, deltas)) / 5)
    assert m["mismatch/logprob_diff_max"] == pytest.approx(1.0)
    k3 = sum(torch.expm1(torch.tensor(-d)).item() + d for d in deltas) / 5
    assert m["mismatch/kl"] == pytest.approx(k3, rel=1e-6)
    seq = torch.tensor([0.1 + 0.0 - 1.0, 0.0 + 0.2])
    assert m["mismatch/seq_log_ratio_std"] == pytest.approx(float(seq.std()), rel=1e-6)
    assert m["mismatch/seq_ratio_min"] == pytest.approx(float(seq.exp().min()), rel=1e-6)
    assert m["mismatch/seq_ratio_max"] == pytest.approx(float(seq.exp().max()), rel=1e-6)
    same = mismatch_metrics(trainer, trainer.clone(), mask)
    assert same["mismatch/logprob_diff_max"] == 0.0 and same["mismatch/kl"] == 0.0


# ------------------------------------------------------------------------- the trainer's autocast
def _loss_and_grads(model, batch, precision: Precision) -> tuple[float, list[torch.Tensor], torch.Tensor]:
    model.zero_grad(set_to_none=True)
    with precision.autocast():
        logprobs, _ = completion_logprobs(model, batch)
    weights = torch.linspace(-1.0, 1.0, logprobs.numel()).reshape(logprobs.shape)  # arbitrary advantages
    loss = (logprobs * weights * batch.completion_mask).sum()
    loss.backward()
    return float(loss.detach()), [p.grad.detach().clone() for p in model.parameters()], logprobs.detach()


def _tiny_batch(tmp_path: Path):
    run = Orchestrator(_cfg(tmp_path, "train.steps=1"), quiet=True)
    try:
        collection = run.collector.collect()
        batch, _ = run.learner.prepare_batch(collection.kept or collection.seen)
        return run.learner.model, batch
    finally:
        run.close()


def test_bf16_autocast_losses_and_gradients_stay_close_to_fp32(tmp_path: Path) -> None:
    model, batch = _tiny_batch(tmp_path)
    fp32 = resolve_precision("fp32", "policy", "cpu")
    bf16 = resolve_precision("bf16-mixed", "policy", "cpu")
    loss32, grads32, lp32 = _loss_and_grads(model, batch, fp32)
    loss16, grads16, lp16 = _loss_and_grads(model, batch, bf16)
    assert lp16.dtype == torch.float32  # scoring is fp32 even when the matmuls are not
    mask = batch.completion_mask.bool()
    diff = (lp16 - lp32)[mask].abs()
    assert float(diff.max()) < 0.05
    assert float(diff.max()) > 0.0  # the autocast really ran: bf16 rounding shows
    assert loss16 == pytest.approx(loss32, rel=2e-2)
    flat32, flat16 = torch.cat([g.flatten() for g in grads32]), torch.cat([g.flatten() for g in grads16])
    assert torch.nn.functional.cosine_similarity(flat32, flat16, dim=0) > 0.99
    assert all(g.dtype == torch.float32 for g in grads16)  # gradients land on fp32 master weights


# ------------------------------------------------------------------------- the loop
def _train_rows(tmp_path: Path) -> dict[int, dict]:
    return {r["step"]: r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if r["phase"] == "train"}


def test_master_weights_stay_fp32_and_the_bf16_copy_follows_every_update(tmp_path: Path) -> None:
    steps = ["train.steps=2", "optim.lr=1e-2", "optim.warmup_steps=0"]
    cfg = _cfg(tmp_path, "model.precision=bf16-mixed", *steps)
    run = Orchestrator(cfg, quiet=True)
    try:
        policy, sampler = run.learner.model, run.collector.engine.model
        start = [p.detach().clone() for p in policy.parameters()]
        seen: list[tuple[bool, bool]] = []  # (grad enabled, autocast on) of each policy forward
        policy.get_output_embeddings().register_forward_hook(
            lambda *_: seen.append((torch.is_grad_enabled(), torch.is_autocast_enabled("cpu")))
        )
        run.fit()
        training_passes = [autocast for grad, autocast in seen if grad]
        assert training_passes and all(training_passes)  # the learner's forward passes ran under autocast
        assert run.learner.version == 2 == run.collector.engine.policy_version
        assert all(p.dtype == torch.float32 for p in policy.parameters())
        assert all(p.dtype == torch.bfloat16 for p in sampler.parameters())
        pairs = zip(policy.parameters(), start, strict=True)
        moved = max(float((p.detach() - s).abs().max()) for p, s in pairs)
        assert moved > 1e-3  # the update changed the master weights...
        for p, s in zip(policy.parameters(), sampler.parameters(), strict=True):
            assert torch.equal(p.detach().to(torch.bfloat16), s)  # ...and the copy is their bf16 rounding
        for group in run.learner.optimizer.param_groups:
            for p in group["params"]:
                state = run.learner.optimizer.state[p]
                assert state["exp_avg"].dtype == torch.float32  # optimizer state in fp32 too
    finally:
        run.close()


def test_mismatch_is_near_zero_with_shared_weights_and_measured_with_a_bf16_copy(tmp_path: Path) -> None:
    common = ["train.steps=2", "optim.lr=1e-2", "optim.warmup_steps=0"]
    Orchestrator(_cfg(tmp_path, *common), quiet=True).fit()
    shared = _train_rows(tmp_path)
    (tmp_path / "bf16").mkdir()
    Orchestrator(_cfg(tmp_path / "bf16", *common, "model.precision=bf16-mixed"), quiet=True).fit()
    copied = _train_rows(tmp_path / "bf16")
    for step in (1, 2):
        # same weights, same precision: only summation order differs (KV-cached decode vs one pass)
        assert shared[step]["mismatch/logprob_diff_max"] < 1e-4, shared[step]
        assert abs(shared[step]["mismatch/seq_ratio_max"] - 1) < 1e-3
        # a bf16 sampler against a bf16-autocast trainer: different roundings, visible and logged
        assert copied[step]["mismatch/logprob_diff_mean"] > 10 * shared[step]["mismatch/logprob_diff_mean"]
        assert copied[step]["mismatch/logprob_diff_max"] > 1e-4
        assert copied[step]["mismatch/kl"] >= 0.0


def test_fp16_mixed_scales_the_loss_and_saves_the_scale(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, "model.precision=fp16-mixed", "train.steps=2", "train.final_checkpoint=full")
    run = Orchestrator(cfg, quiet=True)
    try:
        run.fit()
        scale = run.learner.scaler.get_scale()
    finally:
        run.close()
    rows = _train_rows(tmp_path)
    assert rows[2]["update/loss_scale_fp16"] == pytest.approx(scale)
    saved = tmp_path / "run" / "checkpoints" / "step-000002" / "trainer_state.pt"
    state = torch.load(saved, weights_only=False)
    assert state["grad_scaler"]["scale"] == pytest.approx(scale)


def test_pure_bf16_keeps_weights_and_sampling_in_bf16(tmp_path: Path) -> None:
    run = Orchestrator(_cfg(tmp_path, "model.precision=bf16", "train.steps=1"), quiet=True)
    try:
        run.fit()
        assert run.collector.engine.model is run.learner.model  # no copy: the policy is already bf16
        assert all(p.dtype == torch.bfloat16 for p in run.learner.model.parameters())
    finally:
        run.close()
    assert _train_rows(tmp_path)[1]["mismatch/logprob_diff_max"] < 0.05
