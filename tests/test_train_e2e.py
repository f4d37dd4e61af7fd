"""End-to-end training on tiny-random: the run directory, checkpoints and exact resume."""

from __future__ import annotations

import json

import pytest
import torch
from tiny import TINY_RUN

from rlvr import api
from rlvr.config import load_config
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl

TINY = [*TINY_RUN, "train.log_samples=-1"]


def _cfg(tmp_path, *extra: str):
    return load_config(None, [*TINY, f"output_dir={tmp_path}", *extra])


def test_train_writes_a_complete_run_directory(tmp_path) -> None:
    cfg = _cfg(tmp_path, "name=run", "train.steps=3", "train.save_every=2")
    results = api.train(cfg, quiet=True)
    run = tmp_path / "run"
    assert {"before", "after"} <= set(results)
    metrics = read_jsonl(run / "metrics.jsonl")
    train_rows = [r for r in metrics if r["phase"] == "train"]
    assert [r["step"] for r in train_rows] == [1, 2, 3]
    # every step trained: a filter that dropped every group would otherwise pass unseen
    assert all("reward/mean" in r and "update/loss" in r and "update/skipped" not in r for r in train_rows)
    samples = read_jsonl(run / "samples.jsonl")
    assert samples and {"prompt", "completion", "rewards", "advantage", "errors"} <= set(samples[0])
    assert (run / "config.yaml").exists()
    # every held-out problem's greedy completion, per eval, with its group (operators/answer sign)
    evals = read_jsonl(run / "eval_samples.jsonl")
    assert [r["phase"] for r in evals] == ["before"] * 8 + ["after"] * 8
    assert [r["step"] for r in evals[-8:]] == [3] * 8
    assert {"id", "question", "reference", "completion", "score", "correct", "group"} <= set(evals[0])
    after = next(r for r in metrics if r["phase"] == "after")
    by_group = {k.removeprefix("eval/size/"): v for k, v in after.items() if k.startswith("eval/size/")}
    assert by_group and sum(by_group.values()) == 8
    assert {r["group"] for r in evals} == set(by_group)
    checkpoints = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert checkpoints == ["step-000002", "step-000003"]
    assert (run / "checkpoints" / "step-000003" / "model" / "config.json").exists()
    # a checkpoint is a loadable model
    from rlvr.models import load_model

    load_model(str(run / "checkpoints" / "step-000003" / "model"))


def test_training_changes_the_weights(tmp_path) -> None:
    from rlvr.models import load_model

    cfg = _cfg(tmp_path, "name=w", "train.steps=2", "optim.lr=1e-3", "optim.warmup_steps=0")
    api.train(cfg, quiet=True)
    before = load_model("tiny-random")
    after = load_model(str(tmp_path / "w" / "checkpoints" / "step-000002" / "model"))
    diffs = [float((a - b).detach().abs().max()) for a, b in zip(after.parameters(), before.parameters())]
    assert max(diffs) > 1e-4


# stateful extras whose state must survive a resume: a critic (head weights in the policy's
# optimizer, or a separate model with its own optimizer) and the adaptive coefficients
STATEFUL = {
    "plain": [],
    # LoRA: the adapter is what resumes (on top of the base model), not the merged weights
    "lora_with_kl": ["model.lora.r=4", "model.lora.alpha=8", "algo.kl_coef=0.05"],
    "head_critic_adaptive_kl": [
        "algo.advantage=gae",
        "algo.critic.kind=head",
        "algo.dynamic_sampling=false",
        "algo.kl_coef=0.05",
        "algo.kl_target=0.001",
        "algo.kl_horizon=16",
    ],
    # mixed precision: fp32 master weights resume; the bf16 sampling copy is rebuilt from them
    "bf16_mixed": ["model.precision=bf16-mixed"],
    # fp16: the dynamic loss scale is state too
    "fp16_mixed": ["model.precision=fp16-mixed"],
    "separate_critic_kl_in_reward_adaptive_entropy": [
        "algo.advantage=gae",
        "algo.critic.kind=separate",
        "algo.dynamic_sampling=false",
        "algo.kl_coef=0.05",
        "algo.kl_in_reward=true",
        "algo.kl_target=0.001",
        "algo.kl_horizon=16",
        "algo.loss=entropy_bonus",
        "algo.entropy_target=100.0",
        "rewards.shaping=[{name: adaptive_length_penalty, params: {beta: 0.5}}]",
    ],
}
COMPARED = {
    "plain": [],
    "lora_with_kl": ["update/kl"],
    "head_critic_adaptive_kl": ["update/value_loss", "critic/value_mean", "algo/kl_coef", "update/kl"],
    "bf16_mixed": ["mismatch/logprob_diff_mean", "mismatch/kl"],
    "fp16_mixed": ["update/loss_scale_fp16", "mismatch/logprob_diff_mean"],
    "separate_critic_kl_in_reward_adaptive_entropy": [
        "update/value_loss",
        "update/critic_grad_norm",
        "critic/value_mean",
        "algo/kl_coef",
        "reward/kl",
        "algo/entropy_coef",
        "reward/shaped_mean",
    ],
}


@pytest.mark.parametrize("extra", list(STATEFUL))
def test_resume_continues_exactly(tmp_path, extra: str) -> None:
    steps = ["train.steps=4", "train.save_every=2", "optim.lr=1e-3", *STATEFUL[extra]]
    api.train(_cfg(tmp_path, "name=full", *steps), quiet=True)
    # interrupted run: stop after step 2 (same schedule length), then resume to 4
    api.train(_cfg(tmp_path, "name=cut", *steps, "train.time_limit_s=0.001"), quiet=True)
    cut = [r for r in read_jsonl(tmp_path / "cut" / "metrics.jsonl") if r["phase"] == "train"]
    assert [r["step"] for r in cut] == [1]
    api.train(_cfg(tmp_path, "name=cut", *steps), resume=True, quiet=True)

    def train_rows(name):
        rows = [r for r in read_jsonl(tmp_path / name / "metrics.jsonl") if r["phase"] == "train"]
        return {r["step"]: r for r in rows}

    full, resumed = train_rows("full"), train_rows("cut")
    assert sorted(resumed) == [1, 2, 3, 4]
    for step in (2, 3, 4):
        for key in COMPARED[extra]:  # these must be logged on every step, or the test compares nothing
            assert key in full[step] and key in resumed[step], (step, key)
        for key in (
            "reward/mean",
            "update/loss",
            "update/grad_norm",
            "completion/mean_length",
            *COMPARED[extra],
        ):
            assert resumed[step][key] == pytest.approx(full[step][key], rel=1e-5, abs=1e-7), (step, key)
    a = torch.load(tmp_path / "full" / "checkpoints" / "step-000004" / "trainer_state.pt", weights_only=False)
    b = torch.load(tmp_path / "cut" / "checkpoints" / "step-000004" / "trainer_state.pt", weights_only=False)
    assert a["scheduler"]["last_epoch"] == b["scheduler"]["last_epoch"] == 4
    state = json.loads((tmp_path / "cut" / "checkpoints" / "step-000004" / "state.json").read_text())
    assert state["step"] == 4


def test_fresh_run_refuses_to_overwrite(tmp_path) -> None:
    api.train(_cfg(tmp_path, "name=once", "train.steps=1"), quiet=True)
    with pytest.raises(RlvrError, match="--resume"):
        api.train(_cfg(tmp_path, "name=once", "train.steps=1"), quiet=True)
    with pytest.raises(RlvrError, match="no run to resume"):
        api.train(_cfg(tmp_path, "name=never", "train.steps=1"), resume=True, quiet=True)


def test_time_budget_stops_training_and_keeps_the_final_eval(tmp_path) -> None:
    api.train(_cfg(tmp_path, "name=budget", "train.steps=5", "train.time_budget_s=0.001"), quiet=True)
    rows = read_jsonl(tmp_path / "budget" / "metrics.jsonl")
    assert [r["step"] for r in rows if r["phase"] == "train"] == [1]
    assert [r["phase"] for r in rows if r["phase"] != "train"] == ["before", "after"]
    assert (tmp_path / "budget" / "checkpoints" / "step-000001").is_dir()


def test_time_budget_reserves_one_step_the_final_eval_and_the_save() -> None:
    from rlvr.train.loop.budget import FIRST_SAVE_S, over_budget

    assert FIRST_SAVE_S == 10.0
    # 60 s spent of 100: a 5 s step + 20 s eval + the unmeasured first save (10 s) = 35 s fits
    assert not over_budget(60.0, 100.0, 5.0, 20.0, 0.0)
    assert over_budget(60.0, 100.0, 10.5, 20.0, 0.0)  # 40.5 s does not
    assert not over_budget(60.0, 100.0, 18.0, 20.0, 2.0)  # a measured save replaces the estimate
    assert not over_budget(60.0, 100.0, 29.0, 0.0, 0.0)  # no eval ran: none reserved


def test_bad_group_by_path_fails_before_any_training(tmp_path) -> None:
    cfg = _cfg(tmp_path, "name=groups", "eval.before=false", "eval.group_by=[metadata.rg_entry.nope]")
    with pytest.raises(RlvrError, match="has no metadata.rg_entry.nope"):
        api.train(cfg, quiet=True)
    assert not (tmp_path / "groups" / "metrics.jsonl").exists()


def test_final_checkpoint_model_only_is_loadable_and_resume_says_why_it_cannot(tmp_path) -> None:
    cfg = _cfg(tmp_path, "name=lean", "train.steps=2", "train.final_checkpoint=model")
    api.train(cfg, quiet=True)
    final = tmp_path / "lean" / "checkpoints" / "step-000002"
    assert (final / "model" / "config.json").exists()
    assert not (final / "trainer_state.pt").exists()  # no optimizer, scheduler or RNG state
    assert json.loads((final / "state.json").read_text())["resumable"] is False
    from rlvr.models import load_model

    load_model(str(final / "model"))
    longer = _cfg(tmp_path, "name=lean", "train.steps=3", "train.final_checkpoint=model")
    with pytest.raises(RlvrError, match="no resumable checkpoint.*model only"):
        api.train(longer, resume=True, quiet=True)


def test_resume_skips_a_model_only_final_checkpoint(tmp_path) -> None:
    extra = ["train.save_every=2", "train.final_checkpoint=model", "train.keep_checkpoints=3"]
    api.train(_cfg(tmp_path, "name=mixed", "train.steps=3", *extra), quiet=True)
    checkpoints = tmp_path / "mixed" / "checkpoints"
    assert (checkpoints / "step-000002" / "trainer_state.pt").exists()  # periodic saves stay full
    assert not (checkpoints / "step-000003" / "trainer_state.pt").exists()
    api.train(_cfg(tmp_path, "name=mixed", "train.steps=4", *extra), resume=True, quiet=True)
    steps = [r["step"] for r in read_jsonl(tmp_path / "mixed" / "metrics.jsonl") if r["phase"] == "train"]
    assert steps == [1, 2, 3, 4]  # resumed from step 2: step 3 ran again, once


def test_final_save_is_skipped_when_save_every_just_saved(tmp_path) -> None:
    extra = ["train.save_every=2", "train.final_checkpoint=model"]
    api.train(_cfg(tmp_path, "name=same", "train.steps=2", *extra), quiet=True)
    # the full periodic checkpoint of the last step is kept, not replaced by a model-only one
    assert (tmp_path / "same" / "checkpoints" / "step-000002" / "trainer_state.pt").exists()


def test_final_checkpoint_none_writes_no_checkpoint(tmp_path) -> None:
    api.train(_cfg(tmp_path, "name=bare", "train.steps=1", "train.final_checkpoint=none"), quiet=True)
    assert not (tmp_path / "bare" / "checkpoints").exists()
    assert (tmp_path / "bare" / "metrics.jsonl").exists()
