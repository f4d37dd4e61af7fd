"""The step-reward channel: a reward returns one number per step of the response; the numbers are
checked, weighted, placed on each step's last token, and used by the estimators that can (gae,
step_returns); the others refuse them."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
import torch
from tiny import TINY_RUN

from rlvr import api
from rlvr.algo.step_returns import returns_to_go, step_returns_advantages
from rlvr.collect.steps import apply_step_rewards, step_end_positions, step_texts
from rlvr.config import load_config
from rlvr.data.example import Example
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl
from rlvr.models import load_model, load_tokenizer
from rlvr.rewards import RewardPool, RewardSpec
from rlvr.rewards.worker import MAX_STEPS, check_value
from rlvr.train.learn.estimate import check_algorithm
from rlvr.train.learn.learner import Learner
from rlvr.trajectory import SAMPLED, Segment, Trajectory, TrajectoryGroup

FIX = "reward_fixtures"


# -- what a reward may return ---------------------------------------------------------------------


def test_a_reward_may_return_steps_and_bad_ones_are_errors():
    assert check_value("r", {"score": 1, "steps": [0.5, 1]}) == (True, {"score": 1.0, "steps": [0.5, 1.0]})
    assert check_value("r", {"steps": []})[0]
    for bad in ("ab", [True], [float("nan")], [1.0] * (MAX_STEPS + 1), {"a": 1}):
        ok, message = check_value("r", {"steps": bad})
        assert not ok and "step" in message, bad


def test_the_pool_adds_weighted_steps_to_the_total_and_a_gate_zeroes_them():
    specs = [
        RewardSpec(name=f"{FIX}:step_lengths", label="steps", weight=2.0, params={"separator": " "}),
        RewardSpec(name=f"{FIX}:scaled_len", label="len", params={"scale": 0.0}),
    ]
    example = Example(id="0", prompt=[{"role": "user", "content": "q"}], reference="0")
    with RewardPool(specs, workers=1) as pool:
        (result,) = pool.score(["ab cde"], [example])
    assert result.steps == {"steps": [0.02, 0.03]}
    assert result.total == pytest.approx(2.0 * 0.05)
    assert result.components["steps/steps"] == pytest.approx(0.05)
    gated = [specs[1], RewardSpec(**{**specs[0].model_dump(), "gate": "len", "gate_min": 1.0})]
    with RewardPool(gated, workers=1) as pool:
        (result,) = pool.score(["ab cde"], [example])
    assert result.steps == {"steps": [0.0, 0.0]} and result.total == 0.0


# -- where the steps end ----------------------------------------------------------------------------


def _one_turn(tok, text: str) -> Trajectory:
    ids = tok(text, add_special_tokens=False)["input_ids"]
    return Trajectory([1], [Segment(SAMPLED, ids, [-1.0] * len(ids))], "stop", text=text)


def test_each_step_ends_on_the_token_that_completes_its_text():
    """Fails if the separator's own token counts as the step's end or the positions are off by one."""
    tok = load_tokenizer("tiny-random")
    text = "First add 3.\n\nThen 7 and 2.\n\nSo 12"
    t = _one_turn(tok, text)
    ends = step_end_positions(t, tok, "\n\n")
    ids = t.segments[0].token_ids
    assert len(ends) == 3 and ends[-1] == len(ids) - 1
    for end, step in zip(ends[:-1], step_texts(text, "\n\n")[:-1], strict=True):
        own = step.removesuffix("\n\n")
        assert tok.decode(ids[: end + 1]).endswith(own)
        assert not tok.decode(ids[:end]).endswith(own)
    # a later sampled segment: positions count the ledger's earlier tokens
    later = Trajectory(
        [1], [Segment(SAMPLED, [5], [-1.0]), Segment("context", [7, 7]), *t.segments], "stop", text=text
    )
    assert step_end_positions(later, tok, "\n\n") == [e + 3 for e in ends]


def test_a_wrong_step_count_is_an_error_of_that_reward():
    tok = load_tokenizer("tiny-random")
    t = _one_turn(tok, "a\n\nb")
    apply_step_rewards(t, {"p": [1.0, 2.0, 3.0]}, {"p": 1.0}, tok, "\n\n")
    assert "3 step rewards for a response of 2 steps" in t.errors["p"] and t.step_rewards == []
    good = _one_turn(tok, "a\n\nb")
    apply_step_rewards(good, {"p": [1.0, 2.0], "q": [0.5, 0.0]}, {"p": 1.0, "q": 2.0}, tok, "\n\n")
    assert good.step_rewards == [2.0, 2.0] and len(good.step_ends) == 2 and not good.errors


# -- the estimator ----------------------------------------------------------------------------------


def test_step_returns_against_hand_values_and_equal_to_grpo_without_steps():
    """Fails if the returns look backwards, the discount is ignored or the baseline is per token."""
    rewards = torch.tensor([1.0, 0.0, 0.0])
    lengths = torch.tensor([3, 2, 3])
    tokens = torch.tensor([[0.0, 0.5, 0.0], [0.2, 0.0, 0.0], [0.0, 0.0, 0.0]])
    adv = step_returns_advantages(rewards, torch.zeros(3, dtype=torch.long), lengths, tokens, discount=0.5)
    g = [[0.5 * 0.5 + 0.25 * 1.0, 0.5 + 0.5 * 1.0, 1.0], [0.2, 0.0], [0.0, 0.0, 0.0]]
    mean, std = statistics.mean([r[0] for r in g]), statistics.stdev([r[0] for r in g])
    for i, row in enumerate(g):
        expected = [(x - mean) / std for x in row] + [0.0] * (3 - len(row))
        assert adv[i].tolist() == pytest.approx(expected, abs=1e-4)
    from rlvr.algo import grpo_advantages

    plain = step_returns_advantages(rewards, torch.zeros(3, dtype=torch.long), lengths)
    grpo = grpo_advantages(rewards, torch.zeros(3, dtype=torch.long))
    mask = torch.arange(3)[None, :] < lengths[:, None]
    assert torch.allclose(plain, grpo[:, None] * mask, atol=1e-6)
    assert returns_to_go(torch.ones(1, 3), torch.tensor([[1.0, 1.0, 0.0]]), 1.0).tolist() == [[2.0, 1.0, 0.0]]


def _learner(tmp_path: Path, *extra: str) -> Learner:
    cfg = load_config(None, [*TINY_RUN, f"output_dir={tmp_path}", *extra])
    check_algorithm(cfg)
    return Learner(cfg, load_model(cfg.model.name, cfg.model.dtype, cfg.model.device), pad_id=0)


def _stepped(reward: float, steps: list[float], ends: list[int], n: int = 4) -> Trajectory:
    t = Trajectory([1, 2], [Segment(SAMPLED, [5] * n, [-1.0] * n)], "stop", reward=reward)
    t.step_rewards, t.step_ends = steps, ends
    return t


def test_the_learner_puts_step_rewards_on_their_tokens_and_refuses_them_where_lost(tmp_path):
    # the sequence reward holds the steps' sum (as the collector sets it); the outcome is the rest
    a = _stepped(1.0 + 0.5, [0.5, 0.0], [1, 3])
    b = _stepped(0.0, [0.0, 0.0], [0, 3])
    learner = _learner(tmp_path, "algo.advantage=step_returns")
    batch, _ = learner.prepare_batch([TrajectoryGroup(0, [a, b])])
    adv = batch.advantages.cpu()
    g_a, g_b = [1.5, 1.5, 1.0, 1.0], [0.0] * 4  # a's step reward reaches its tokens 0-1 only
    mean, std = 0.75, statistics.stdev([1.5, 0.0])
    assert adv[0].tolist() == pytest.approx([(x - mean) / std for x in g_a], abs=1e-4)
    assert adv[1].tolist() == pytest.approx([(x - mean) / std for x in g_b], abs=1e-4)
    with pytest.raises(RlvrError, match="per-step rewards.*step_returns"):
        _learner(tmp_path, "algo.advantage=grpo").prepare_batch([TrajectoryGroup(0, [a, b])])


def test_a_run_with_a_stepped_reward_trains_and_logs_the_steps(tmp_path):
    """Through the real loop: the collector places the steps, trajectories.jsonl keeps them; a reward
    that returns the wrong count is a counted reward error, never a silent placement."""
    reward = "rewards.functions=[{name: 'reward_fixtures:step_lengths', params: {separator: ' '}}]"
    common = [*TINY_RUN, reward, "rewards.step_separator=' '", "train.steps=1", "rollout.max_new_tokens=16"]
    cfg = load_config(None, [*common, "algo.advantage=step_returns", "train.log_trajectories=true",
                             f"output_dir={tmp_path}", "name=ok"])  # fmt: skip
    api.train(cfg, quiet=True)
    rows = read_jsonl(tmp_path / "ok" / "trajectories.jsonl")
    assert rows and all(len(r["step_rewards"]) == len(r["text"].split(" ")) for r in rows)
    assert all(r["step_ends"] == sorted(r["step_ends"]) for r in rows)
    metrics = [r for r in read_jsonl(tmp_path / "ok" / "metrics.jsonl") if r["phase"] == "train"]
    assert "update/loss" in metrics[0]
    bad = reward.replace("separator: ' '", "separator: ' ', extra: 1")
    cfg = load_config(
        None, [*common, bad, "algo.advantage=step_returns", f"output_dir={tmp_path}", "name=bad"]
    )
    api.train(cfg, quiet=True)
    metrics = [r for r in read_jsonl(tmp_path / "bad" / "metrics.jsonl") if r["phase"] == "train"]
    assert metrics[0]["reward/errors"] > 0


# -- a process reward model ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def prm(tmp_path_factory) -> str:
    from reward_fixtures import tiny_token_classifier

    return tiny_token_classifier(tmp_path_factory.mktemp("prm"))


def test_the_process_reward_model_reads_each_step_end(prm):
    """Its scores equal a direct forward pass read at each step's last token; fails if a step's
    position is off (the separator's token, or the next step's first token)."""
    from rlvr.rewards.process_reward import load_process_model, step_scores
    from rlvr.rewards.reward_model import render

    example = Example(id="0", prompt=[{"role": "user", "content": "What is 3 + 4?"}], reference="7")
    completion = "Add 3 and 4.\n\nThat is 7."
    scores = step_scores(prm, example, completion)
    model, tok = load_process_model(prm)
    text = render(tok, example, completion)
    first_end = text.index("4.") + 1  # the last character of step one
    enc = tok(text, return_offsets_mapping=True, add_special_tokens=False)
    position = next(i for i, (lo, hi) in enumerate(enc["offset_mapping"]) if lo <= first_end < hi)
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([enc["input_ids"]])).logits[0]
    assert len(scores) == 2
    assert scores[0] == pytest.approx(logits[position].softmax(-1)[1].item(), abs=1e-5)
    with pytest.raises(ValueError, match="max_length"):
        step_scores(prm, example, completion, max_length=8)


def test_a_process_reward_model_trains_through_the_step_channel(prm, tmp_path):
    reward = f"rewards.functions=[{{name: process_reward_model, params: {{path: '{prm}', separator: ' '}}}}]"
    cfg = load_config(
        None,
        [*TINY_RUN, reward, "rewards.step_separator=' '", "train.steps=1", "algo.advantage=step_returns",
         "train.log_trajectories=true", f"output_dir={tmp_path}", "name=prm"],
    )  # fmt: skip
    api.train(cfg, quiet=True)
    rows = read_jsonl(tmp_path / "prm" / "trajectories.jsonl")
    assert rows and all(len(r["step_rewards"]) == len(r["text"].split(" ")) for r in rows)
    assert all(0.0 <= x <= 1.0 for r in rows for x in r["step_rewards"])


# -- a generative process reward model (a causal LM's good/bad verdict after each step) -------------


@pytest.fixture(scope="module")
def gen_prm(tmp_path_factory) -> str:
    from reward_fixtures import tiny_causal_lm

    return tiny_causal_lm(tmp_path_factory.mktemp("genprm"))


@pytest.mark.parametrize("template", ["chat", "plain"])
def test_the_generative_prm_reads_each_step_after_its_tag(gen_prm, template):
    """Each step's score is p(good)/(p(good)+p(bad)) of the model run on the text up to that step's
    tag alone: fails if the verdict is read one token early or late, or sees the next step."""
    from rlvr.rewards.process_reward import generative_step_scores, load_generative_prm, tagged_text

    example = Example(id="0", prompt=[{"role": "user", "content": "What is 3 + 4?"}], reference="7")
    completion, tag = "Add 3 and 4.\n\nThat is 7.", " ки"
    scores = generative_step_scores(gen_prm, example, completion, step_tag=tag, template=template)
    logit_scores = generative_step_scores(
        gen_prm, example, completion, step_tag=tag, template=template, transform="logit"
    )
    model, tok = load_generative_prm(gen_prm)
    text, ends = tagged_text(tok, example, completion, "\n\n", tag, template)
    good, bad = tok.encode("+", add_special_tokens=False)[0], tok.encode("-", add_special_tokens=False)[0]
    assert len(ends) == len(scores) == 2 and text[: ends[0]].endswith("4. ки")
    for k, end in enumerate(ends):
        ids = tok(text[:end], add_special_tokens=False)["input_ids"]
        with torch.inference_mode():
            last = model(input_ids=torch.tensor([ids])).logits[0, -1]
        assert scores[k] == pytest.approx(last[[good, bad]].softmax(-1)[0].item(), abs=1e-5)
        assert logit_scores[k] == pytest.approx((last[good] - last[bad]).item(), abs=1e-4)


def test_the_generative_prm_refuses_what_it_cannot_read(gen_prm):
    from rlvr.rewards.process_reward import generative_step_scores

    example = Example(id="0", prompt=[{"role": "user", "content": "What is 3 + 4?"}], reference="7")
    with pytest.raises(ValueError, match="verdict 'good answer' is 2 tokens"):
        generative_step_scores(gen_prm, example, "a\n\nb", good="good answer")
    with pytest.raises(ValueError, match="merges the step tag"):  # "\n" + "\n\n" is one token
        generative_step_scores(gen_prm, example, "a\n\nb", step_tag="\n", template="plain")
    with pytest.raises(ValueError, match="max_length"):
        generative_step_scores(gen_prm, example, "a\n\nb", max_length=4)


def test_a_generative_prm_trains_through_the_step_channel(gen_prm, tmp_path):
    """The separator follows rewards.step_separator, so the counts agree and every step is scored
    (a Math-Shepherd tag: with none, tiny-random's whitespace runs merge into the next step)."""
    params = f"{{path: '{gen_prm}', step_tag: ' ки'}}"
    reward = f"rewards.functions=[{{name: generative_process_reward, params: {params}}}]"
    cfg = load_config(
        None,
        [*TINY_RUN, reward, "rewards.step_separator=' '", "train.steps=1", "algo.advantage=step_returns",
         "train.log_trajectories=true", f"output_dir={tmp_path}", "name=gprm"],
    )  # fmt: skip
    assert cfg.rewards.functions[0].params["separator"] == " "
    api.train(cfg, quiet=True)
    rows = read_jsonl(tmp_path / "gprm" / "trajectories.jsonl")
    assert rows and all(len(r["step_rewards"]) == len(r["text"].split(" ")) for r in rows)
    assert all(0.0 <= x <= 1.0 for r in rows for x in r["step_rewards"])
    metrics = [r for r in read_jsonl(tmp_path / "gprm" / "metrics.jsonl") if r["phase"] == "train"]
    assert metrics[0]["reward/errors"] == 0
