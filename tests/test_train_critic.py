"""PPO's critic: values per completion token, the value loss in the update, and a GAE run."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from tiny import TINY_RUN

from rlvr import api
from rlvr.config import load_config
from rlvr.log import read_jsonl
from rlvr.models import ValueHead, load_model
from rlvr.rollout import Completion
from rlvr.train.learn.batch import build_batch
from rlvr.train.learn.critic import Critic, build_critic, value_metrics
from rlvr.train.learn.logprobs import completion_logprobs
from rlvr.train.learn.optim import build_optimizer, build_scheduler
from rlvr.train.learn.update import policy_update

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return load_model("tiny-random")


def _batch():
    """Two prompts (lengths 5 and 3), completions of lengths 4, 1, 3 (padded to 4)."""
    gen = torch.Generator().manual_seed(3)
    groups = []
    for p, (plen, lengths) in enumerate([(5, [4, 1]), (3, [3])]):
        prompt = torch.randint(10, 4000, (plen,), generator=gen).tolist()
        group = []
        for n in lengths:
            ids = torch.randint(10, 4000, (n,), generator=gen).tolist()
            group.append(Completion(p, prompt, ids, [-1.0] * n, "stop"))
        groups.append(group)
    return groups, build_batch(groups, [0.0, 0.0, 0.0], pad_id=2)


def _full_sequence_hidden(model, completion: Completion) -> torch.Tensor:
    """Final hidden states [T, H] of prompt + completion at the positions predicting each completion token."""
    ids = torch.tensor([completion.prompt_ids + completion.token_ids])
    hidden = model(input_ids=ids, output_hidden_states=True).hidden_states[-1][0]
    start = len(completion.prompt_ids) - 1
    return hidden[start : start + len(completion.token_ids)]


def test_hidden_states_are_those_that_predict_each_completion_token(tiny) -> None:
    groups, batch = _batch()
    logprobs, _, hidden = completion_logprobs(tiny, batch, with_hidden=True)
    assert torch.equal(logprobs, completion_logprobs(tiny, batch)[0])  # the logprobs are unchanged
    assert hidden.shape == (3, 4, tiny.config.hidden_size)
    for row, completion in enumerate(c for g in groups for c in g):
        expected = _full_sequence_hidden(tiny, completion)
        assert torch.allclose(hidden[row, : len(completion)], expected, atol=1e-5)


def test_value_head_gives_one_value_per_completion_token_and_zero_on_padding(tiny) -> None:
    _, batch = _batch()
    head = ValueHead(tiny.config.hidden_size)
    assert float(head(torch.randn(2, 64)).detach().abs().sum()) == 0.0  # starts at V = 0
    torch.nn.init.normal_(head.linear.weight)
    torch.nn.init.constant_(head.linear.bias, 0.5)
    critic = Critic(head=head)
    hidden = completion_logprobs(tiny, batch, with_hidden=True)[2]
    values = critic.values(batch, hidden)
    assert values.shape == (3, 4)
    expected = hidden @ head.linear.weight[0] + 0.5
    assert torch.allclose(values, expected * batch.completion_mask, atol=1e-5)
    assert values[1, 1:].abs().sum() == 0 and values[2, 3] == 0 and values[0].abs().min() > 0
    # batch_values: the same numbers, without gradient, one micro-batch at a time
    no_grad = critic.batch_values(tiny, batch, micro=2, temperature=1.0)
    assert not no_grad.requires_grad and torch.allclose(no_grad, values.detach(), atol=1e-5)


def test_separate_critic_reads_its_own_backbone(tiny) -> None:
    groups, batch = _batch()
    cfg = load_config(None, ["model.name=tiny-random", "algo.critic.kind=separate", "algo.advantage=gae"])
    critic = build_critic(cfg, tiny, total_updates=4)
    torch.nn.init.normal_(critic.model.head.linear.weight)
    values = critic.batch_values(tiny, batch, micro=1, temperature=1.0)
    assert values.shape == (3, 4) and values[1, 1:].abs().sum() == 0
    body, weight = critic.model.body, critic.model.head.linear.weight[0]
    assert all(torch.equal(a, b) for a, b in zip(body.parameters(), tiny.model.parameters()))
    for row, completion in enumerate(c for g in groups for c in g):
        ids = torch.tensor([completion.prompt_ids + completion.token_ids])
        hidden = body(input_ids=ids).last_hidden_state[0]
        start = len(completion.prompt_ids) - 1
        expected = hidden[start : start + len(completion)] @ weight
        assert torch.allclose(values[row, : len(completion)], expected, atol=1e-5)


@pytest.mark.parametrize("kind", ["head", "separate"])
def test_value_loss_decreases_over_updates(kind: str) -> None:
    torch.manual_seed(0)
    model = load_model("tiny-random")
    cfg = load_config(
        None,
        [
            "model.name=tiny-random",
            "algo.advantage=gae",
            f"algo.critic.kind={kind}",
            "algo.critic.lr=0.002",
            "algo.critic.vf_coef=1.0",
            "optim.lr=1e-4",
            "optim.warmup_steps=0",
        ],
    )
    critic = build_critic(cfg, model, total_updates=20)
    optimizer = build_optimizer(model, cfg.optim)
    for group in critic.policy_param_groups(cfg.algo.critic.lr):
        optimizer.add_param_group(group)
    scheduler = build_scheduler(optimizer, 20, cfg.optim)
    _, batch = _batch()
    returns = torch.tensor([[0.2, 0.4, 0.6, 0.8], [1.0, 0, 0, 0], [-0.5, -0.5, -0.5, 0]])
    losses = []
    for _ in range(6):
        old = critic.batch_values(model, batch, micro=4, temperature=1.0)
        step = replace(batch, returns=returns, old_values=old)
        metrics = policy_update(model, optimizer, scheduler, step, cfg.algo, 1.0, 1.0, 4, critic=critic)
        losses.append(metrics["update/value_loss"])
        assert math.isfinite(metrics["update/loss"])
        # one optimizer step from values taken just before it: the values equal the old ones, so
        # the clip cannot act (was: 0 <= clip_frac <= 1, which no result can fail)
        assert metrics["update/value_clip_frac"] == 0.0
    # at V = 0 the loss is ½·mean(R²) over the 8 valid tokens
    assert losses[0] == pytest.approx(0.5 * float((returns**2).sum()) / 8, rel=1e-5)
    assert losses[-1] < 0.5 * losses[0], losses
    assert all(b < a for a, b in zip(losses, losses[1:])), losses


def test_explained_variance() -> None:
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    returns = torch.tensor([[1.0, 3.0, 0.0]])
    assert value_metrics(returns, returns, mask)["critic/explained_variance"] == 1.0
    assert value_metrics(torch.full_like(returns, 2.0), returns, mask)["critic/explained_variance"] == 0.0
    half = value_metrics(torch.tensor([[1.5, 2.5, 9.0]]), returns, mask)  # residual var .25 of 1
    assert half["critic/explained_variance"] == pytest.approx(0.75)
    assert half["critic/value_mean"] == 2.0 and half["critic/return_mean"] == 2.0


def _train_rows(run_dir: Path) -> list[dict]:
    return [r for r in read_jsonl(run_dir / "metrics.jsonl") if r["phase"] == "train"]


def test_gae_recipe_trains_its_critic(tmp_path) -> None:
    overrides = [*TINY_RUN, "train.steps=2", "optim.lr=1e-3", f"output_dir={tmp_path}", "name=run"]
    cfg = load_config(RECIPES / "gae.yaml", [*overrides, "train.final_checkpoint=full"])  # with its state
    assert cfg.algo.critic.kind == "head"
    api.train(cfg, quiet=True)
    rows = _train_rows(tmp_path / "run")
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["update/value_loss"] > 0 and math.isfinite(row["update/value_loss"])
        assert {"update/value_clip_frac", "critic/explained_variance", "critic/return_mean"} <= set(row)
    assert rows[0]["critic/value_mean"] == 0.0  # a fresh head predicts 0
    assert rows[1]["critic/value_mean"] != 0.0  # and it learned in step 1
    state = torch.load(
        tmp_path / "run" / "checkpoints" / "step-000002" / "trainer_state.pt", weights_only=False
    )
    assert state["critic"]["weights"]["linear.weight"].abs().sum() > 0


def test_kl_in_reward_and_adaptive_coefficients_in_a_run(tmp_path) -> None:
    overrides = [
        *TINY_RUN,
        "train.steps=3",
        "optim.lr=1e-3",
        "optim.warmup_steps=0",
        "algo.dynamic_sampling=false",
        "algo.kl_coef=0.5",
        "algo.kl_in_reward=true",
        "algo.kl_target=0.001",
        "algo.kl_horizon=16",
        "algo.loss=entropy_bonus",
        "algo.entropy_target=100.0",
        "algo.entropy_coef_init=0.001",
        f"output_dir={tmp_path}",
        "name=run",
    ]
    api.train(load_config(None, overrides), quiet=True)
    rows = _train_rows(tmp_path / "run")
    assert all("update/kl" not in r for r in rows)  # in the reward, not also in the loss
    assert rows[0]["reward/kl"] == pytest.approx(0.0, abs=1e-6)  # the policy starts as the reference
    assert abs(rows[2]["reward/kl"]) > 1e-4
    # the coefficient each update used, then moved by the controller (8 completions per step)
    assert rows[0]["algo/kl_coef"] == 0.5
    for a, b in zip(rows, rows[1:]):
        error = min(max(a["reward/kl"] / 0.001 - 1, -0.2), 0.2)
        assert b["algo/kl_coef"] == pytest.approx(a["algo/kl_coef"] * (1 + error * 8 / 16))
    # entropy far below the target: the coefficient grows by the step, and the loss receives it
    assert [r["algo/entropy_coef"] for r in rows] == pytest.approx([0.001, 0.0015, 0.002])
    assert all(r["update/entropy_coef"] == pytest.approx(r["algo/entropy_coef"]) for r in rows)
