"""SFT + RL in one update (``mix.demos``, rlvr.train.stages.mix): LUFFY's demonstration inside each
group, CHORD's SFT term beside the RL loss, and the generic hooks of ``policy_update`` they use.

On tiny-random with ``exact_match`` (answer tags): the policy never answers, so its samples score 0
and the demonstration (the reference in ``<answer>`` tags) scores 1, which is how every test can
tell the demonstration from the samples.
"""

from __future__ import annotations

import copy
import functools
import logging
import statistics

import pytest
import torch
from tiny import TINY_RUN

from rlvr.algo import POLICY_LOSSES
from rlvr.collect.collector import Collector
from rlvr.config import RunConfig, load_config
from rlvr.data.from_config import build_datasets
from rlvr.errors import RlvrError
from rlvr.models import load_model, load_tokenizer
from rlvr.models.chat import encode_prompt
from rlvr.rewards.scoring import training_pool
from rlvr.rollout import HFEngine
from rlvr.train.learn.learner import Learner
from rlvr.train.learn.logprobs import completion_logprobs
from rlvr.train.learn.optim import build_optimizer, build_scheduler
from rlvr.train.learn.update import policy_update
from rlvr.train.stages.mix import (
    ChordSft,
    DemonstrationMembers,
    chord_step,
    demonstration_text,
    demonstration_tokens,
)
from rlvr.trajectory import TrajectoryGroup

EXACT = "{name: exact_match, params: {extract: answer_tag}}"
LENGTH = "{name: 'reward_fixtures:scaled_len', label: length, weight: 0.01, params: {scale: 1.0}}"
BASE = [
    *TINY_RUN,
    "data.train_size=8",
    "data.eval_size=0",
    "rollout.prompts_per_step=2",
    "rollout.group_size=4",
    "algo.micro_batch_size=4",
]


def _cfg(*extra: str) -> RunConfig:
    return load_config(None, [*BASE, *extra])


def _luffy(*extra: str) -> RunConfig:
    return _cfg("mix.demos=luffy", "algo.loss=luffy", *extra)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny-random")


def _collect(cfg: RunConfig, tok, solutions: str | None = None):
    """``(source, collection)`` of one LUFFY collect; ``solutions`` becomes every row's worked solution."""
    train, _ = build_datasets(cfg.data)
    if solutions is not None:
        for e in train:
            e.metadata["solution"] = solutions
    collector = Collector(cfg, HFEngine(load_model("tiny-random"), tok), tok, train)
    try:
        source = DemonstrationMembers(cfg, collector, tok)
        return source, source.collect()
    finally:
        collector.close()


def _grpo(rewards: list[float], eps: float = 1e-6) -> list[float]:
    mean, std = statistics.mean(rewards), statistics.stdev(rewards)
    return [(r - mean) / (std + eps) if std > 0 else 0.0 for r in rewards]


# ----------------------------------------------------------------------------- demonstrations
def test_the_demonstration_is_what_the_default_reward_accepts() -> None:
    """The default job (chain_sum, its three rewards): the reference in answer tags scores 1 on
    every component; a wrong answer written the same way scores 0 on correctness."""
    cfg = load_config(None, ["data.train_size=4", "data.eval_size=0", "rewards.workers=1"])
    example = build_datasets(cfg.data)[0][0]
    text = demonstration_text(example, cfg)
    assert text == f"<answer>{example.reference}</answer>"
    pool = training_pool(cfg.rewards)
    try:
        right, wrong = pool.score([text, "<answer>123456</answer>"], [example] * 2, [5, 5], ["stop"] * 2)
    finally:
        pool.close()
    assert right.components == {"reasoning_gym": 1.0, "tagged": 1.0, "closeness": 1.0} and not right.errors
    assert wrong.components["reasoning_gym"] == 0.0


def test_a_worked_solution_or_the_answer_format_decides_the_text() -> None:
    cfg = _cfg()
    example = build_datasets(cfg.data)[0][0]
    example.metadata["solution"] = "15 - 43 = -28\n<answer>-28</answer>"
    assert demonstration_text(example, cfg) == example.metadata["solution"]
    del example.metadata["solution"]
    for fmt, expected in [("boxed", f"\\boxed{{{example.reference}}}"), ("none", example.reference)]:
        assert demonstration_text(example, _cfg(f"data.answer_format={fmt}")) == expected
    with pytest.raises(RlvrError, match="mix.demo_field"):
        demonstration_text(example, _cfg("data.answer_format='End with ANSWER: x.'"))
    example.reference = None
    with pytest.raises(RlvrError, match="neither metadata.solution"):
        demonstration_text(example, cfg)


def test_demonstration_tokens_continue_the_sampled_prompt_through_the_end_of_turn(tok) -> None:
    cfg = _cfg()
    example = build_datasets(cfg.data)[0][0]
    text = demonstration_text(example, cfg)
    prompt = encode_prompt(tok, example.prompt)
    ids = demonstration_tokens(tok, example, text, prompt)
    assert tok.decode(ids) == text + "<|im_end|>"
    assert tok.decode(prompt + ids) == tok.apply_chat_template(
        [*example.prompt, {"role": "assistant", "content": text}], tokenize=False
    ).removesuffix("\n")
    with pytest.raises(RlvrError, match="tokenizes differently"):
        demonstration_tokens(tok, example, text, prompt[1:])


# ----------------------------------------------------------------------------- LUFFY
@pytest.fixture(scope="module")
def luffy(tok):
    """One LUFFY collect with exact_match + a small length reward (samples vary, the demo wins)."""
    cfg = _luffy(f"rewards.functions=[{EXACT}, {LENGTH}]")
    return (cfg, *_collect(cfg, tok))


def test_each_group_has_one_given_member_the_demonstration_after_the_groups_prompt(luffy, tok) -> None:
    cfg, source, collection = luffy
    assert len(collection.kept) == 2 and collection.metrics["mix/demos"] == 2.0
    for group in collection.kept:
        example = source.collector.train_examples[group.example_index]
        given = [t for t in group.trajectories if t.is_given]
        assert len(group) == 4 and given == group.trajectories[-1:]
        [demo] = given
        assert [s.kind for s in demo.segments] == ["given"]
        assert tok.decode(demo.response_ids) == demonstration_text(example, cfg) + "<|im_end|>"
        prompt = source.collector.train_prompts[group.example_index]
        assert all(t.prompt_ids == prompt for t in group.trajectories)
        assert demo.rewards["exact_match"] == 1.0 and demo.reward == pytest.approx(
            1.0 + 0.01 * len(demo.text)
        )
        assert all(t.rewards["exact_match"] == 0.0 for t in group.trajectories[:-1])
    assert collection.metrics["mix/demo_rejected"] == 0.0
    assert collection.metrics["mix/demo_reward"] == pytest.approx(
        statistics.mean(g.trajectories[-1].reward for g in collection.kept)
    )


def test_the_loss_gets_the_given_mask_and_the_demo_its_groups_advantage(luffy, monkeypatch) -> None:
    """Through the real Learner.update: the luffy loss sees exactly the demonstration's tokens as
    given; the demonstration's reward enters its group's GRPO mean; the sampler diagnostics skip
    given tokens (their sampling logprob is 0, the trainer's about -11 on tiny-random)."""
    cfg, _, collection = luffy
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    real = POLICY_LOSSES.get("luffy")

    @functools.wraps(real)  # the same signature, so the update offers the same context
    def spy(*args, **kwargs):
        seen.append((kwargs["given_mask"].clone(), args[3].clone()))
        return real(*args, **kwargs)

    monkeypatch.setitem(POLICY_LOSSES._table, "luffy", spy)
    groups = copy.deepcopy(collection.kept)
    learner = Learner(cfg, load_model("tiny-random"), load_tokenizer("tiny-random").pad_token_id)
    metrics = learner.update(groups)
    # the loss's rows, over its micro-batches, in the groups' order
    rows = [(given[r], mask[r]) for given, mask in seen for r in range(len(given))]
    assert len(rows) == sum(len(group.trajectories) for group in groups)
    for (given, mask), t in zip(rows, [t for group in groups for t in group.trajectories]):
        n = len(t.response_ids)
        assert given[:n].tolist() == t.given_mask and not given[n:].any()
        assert mask[:n].tolist() == t.loss_mask
    for group in groups:
        demo = group.trajectories[-1]
        assert sum(demo.given_mask) == len(demo.response_ids) > 0
        expected = _grpo([t.reward for t in group.trajectories])
        assert [t.advantage for t in group.trajectories] == pytest.approx(expected, rel=1e-4, abs=1e-5)
        assert group.trajectories[-1].advantage > 1.0  # the best of its group
    assert 0 < metrics["update/luffy/given_share"] < 1
    assert metrics["update/sampler_logprob_diff"] < 1e-4
    assert metrics["mismatch/logprob_diff_mean"] < 1e-4


def test_a_group_the_policy_failed_everywhere_is_kept_with_its_demonstration(tok) -> None:
    """exact_match alone: every sample scores 0, so dynamic sampling drops every group; with the
    demonstration (1.0) each has signal and is kept."""
    cfg = _luffy(f"rewards.functions=[{EXACT}]")
    _, collection = _collect(cfg, tok)
    assert len(collection.kept) == 2 and collection.metrics["mix/groups_rescued"] == 2.0
    assert all(g.rewards == [0.0, 0.0, 0.0, 1.0] for g in collection.kept)


def test_a_demonstration_the_reward_rejects_is_counted_warned_and_kept(tok, caplog) -> None:
    cfg = _luffy(f"rewards.functions=[{EXACT}, {LENGTH}]")
    with caplog.at_level(logging.WARNING, logger="rlvr.train.stages.mix"):
        _, collection = _collect(cfg, tok, solutions="<answer>not the answer</answer>")
    assert collection.metrics["mix/demo_rejected"] == 2.0
    assert "does not accept the demonstration" in caplog.text
    assert all(g.trajectories[-1].is_given for g in collection.kept) and len(collection.kept) == 2


def test_luffy_refuses_a_loss_that_cannot_see_given_tokens(tok) -> None:
    cfg = _cfg("mix.demos=luffy")  # algo.loss stays ppo_clip
    collector = Collector(cfg, HFEngine(load_model("tiny-random"), tok), tok, build_datasets(cfg.data)[0])
    try:
        with pytest.raises(RlvrError, match="algo.loss=luffy"):
            DemonstrationMembers(cfg, collector, tok)
    finally:
        collector.close()


# ----------------------------------------------------------------------------- CHORD
def _chord(*extra: str) -> RunConfig:
    return _cfg("mix.demos=chord", "algo.dynamic_sampling=false", f"rewards.functions=[{EXACT}]", *extra)


def _groups(cfg: RunConfig, tok) -> list[TrajectoryGroup]:
    collector = Collector(cfg, HFEngine(load_model("tiny-random"), tok), tok, build_datasets(cfg.data)[0])
    try:
        return collector.collect().kept
    finally:
        collector.close()


def test_chord_mu_reaches_its_peak_after_warmup_and_its_end_at_the_last_step(tok) -> None:
    cfg = _chord("train.steps=10", "mix.warmup_steps=3", "mix.mu_peak=0.5", "mix.mu_end=0.05")
    term = ChordSft(cfg, tok, build_datasets(cfg.data)[0], tok.pad_token_id)
    assert term.mu(0) == pytest.approx(0.5 / 3)  # the first update is step 1
    assert term.mu(2) == pytest.approx(0.5)
    assert term.mu(9) == pytest.approx(0.05) and term.mu(12) == pytest.approx(0.05)
    assert 0.05 < term.mu(5) < 0.5
    learner = Learner(cfg, load_model("tiny-random"), tok.pad_token_id)
    groups = _groups(cfg, tok)
    for version, mu in [(2, 0.5), (9, 0.05)]:
        learner.version = version
        main_weight, _, metrics = chord_step(learner, groups)
        assert metrics["mix/mu"] == pytest.approx(mu) and main_weight == pytest.approx(1 - mu)


def test_chord_with_mu_1_and_no_rl_signal_is_a_weighted_sft_step(tok) -> None:
    """Constant rewards (every sample scores 0) give zero advantages; μ = 1 leaves the SFT term
    alone: the update must equal one AdamW step on Σ p(1 − p)·CE / tokens, written out here."""
    cfg = _chord(
        "mix.mu_peak=1",
        "mix.mu_end=1",
        "mix.warmup_steps=0",
        "mix.sft_batch_size=3",
        "optim.lr=1e-3",
        "optim.warmup_steps=0",
    )
    groups = _groups(cfg, tok)
    assert all(set(g.rewards) == {0.0} for g in groups)
    policy = load_model("tiny-random")
    twin, start = copy.deepcopy(policy), copy.deepcopy(policy)
    learner = Learner(cfg, policy, tok.pad_token_id)
    metrics = learner.update(groups)
    assert metrics["mix/mu"] == 1.0 and metrics["mix/sft_demos"] == 3.0

    term = ChordSft(cfg, tok, build_datasets(cfg.data)[0], tok.pad_token_id)
    indices = term.indices(groups, 0)
    assert indices[:2] == [g.example_index for g in groups] and len(set(indices)) == 3
    batch = term.batch(indices)
    optimizer = build_optimizer(twin, cfg.optim)
    scheduler = build_scheduler(optimizer, cfg.train.steps, cfg.optim)
    logprobs = completion_logprobs(twin, batch, 1.0)[0]
    p = logprobs.detach().exp()
    mask = batch.completion_mask
    loss = (p * (1 - p) * -logprobs * mask).sum() / mask.sum()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(twin.parameters()), cfg.optim.grad_clip)
    optimizer.step()
    scheduler.step()
    assert metrics["mix/sft_loss"] == pytest.approx(float(loss.detach()), rel=1e-5)
    for (name, a), b in zip(policy.named_parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=name)
    moved = [bool((a != b).any()) for a, b in zip(policy.parameters(), start.parameters())]
    assert all(moved)  # the step did move the weights (every one: the SFT gradient reaches all)


# ----------------------------------------------------------------------------- policy_update hooks
def _update(cfg: RunConfig, batch, policy, **kwargs) -> dict[str, float]:
    optimizer = build_optimizer(policy, cfg.optim)
    scheduler = build_scheduler(optimizer, 10, cfg.optim)
    shuffle = torch.Generator().manual_seed(0)  # the same minibatches in every call
    return policy_update(
        policy, optimizer, scheduler, batch, cfg.algo, 1.0, 1.0, 8, generator=shuffle, **kwargs
    )


def test_main_weight_scales_the_rl_loss_and_aux_loss_runs_once_per_optimizer_step(tok) -> None:
    cfg = _cfg(
        "algo.epochs=2",
        "algo.minibatches=2",
        "algo.dynamic_sampling=false",
        f"rewards.functions=[{LENGTH}]",
        "optim.lr=1e-9",  # the loss of every step is the first's, up to rounding
    )
    groups = _groups(cfg, tok)
    learner = Learner(cfg, load_model("tiny-random"), tok.pad_token_id)
    batch, _ = learner.prepare_batch(groups)
    policy = load_model("tiny-random")
    plain = _update(cfg, batch, copy.deepcopy(policy))
    same = _update(cfg, batch, copy.deepcopy(policy), aux_loss=None, main_weight=1.0)
    assert same == plain
    calls = []

    def aux():
        calls.append(1)
        zero = sum(p.sum() for p in policy.parameters()) * 0.0
        return zero, {"aux/x": float(len(calls))}

    half = _update(cfg, batch, policy, aux_loss=aux, main_weight=0.5)
    assert len(calls) == 4 and half["aux/x"] == pytest.approx((1 + 2 + 3 + 4) / 4)
    # the weights barely move (lr 1e-9), so each step's gradient is the first's: half of it
    assert half["update/grad_norm"] == pytest.approx(0.5 * plain["update/grad_norm"], rel=1e-4)
