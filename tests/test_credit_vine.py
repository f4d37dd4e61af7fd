"""VinePPO: continuations from a response's step boundaries, their mean rewards as the states'
values, and the step advantages they give."""

from __future__ import annotations

import math

import pytest
import torch
from tiny import TINY_RUN

from rlvr import api
from rlvr.algo.vine import vine_advantages
from rlvr.collect.vine import boundaries, mc_step_values
from rlvr.config import load_config
from rlvr.data.example import Example
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl
from rlvr.models import load_model, load_tokenizer
from rlvr.rewards import RewardPool, RewardSpec
from rlvr.rollout import Completion, HFEngine, SamplingParams
from rlvr.trajectory import CONTEXT, SAMPLED, Segment, Trajectory, TrajectoryGroup


def test_boundaries_keep_at_most_max_steps_minus_one_inner_ends():
    assert boundaries([3, 7, 9], 8) == [3, 7]
    assert boundaries([1, 2, 3, 4, 5, 6, 7, 20], 3) == [3, 5]  # evenly spread, never the last end
    assert boundaries([5], 4) == [] and boundaries([1, 2, 9], 1) == []


def test_vine_advantages_against_hand_values():
    """Fails if a step is credited with the value after the wrong boundary, V(s_0) includes the
    response itself, or a missing value is read as 0."""
    rewards = torch.tensor([1.0, 0.0, 0.5])
    lengths = torch.tensor([6, 4, 3])
    adv = vine_advantages(
        rewards, torch.zeros(3, dtype=torch.long), lengths, [[0.6, 0.9], [math.nan], []], [[1, 3], [1], []]
    )
    v0 = [(0.0 + 0.5) / 2, (1.0 + 0.5) / 2, (1.0 + 0.0) / 2]  # leave-one-out means of the group
    assert adv[0].tolist() == pytest.approx([0.6 - v0[0]] * 2 + [0.9 - 0.6] * 2 + [1.0 - 0.9] * 2)
    assert adv[1].tolist() == pytest.approx([0.0 - v0[1]] * 4 + [0.0] * 2)  # NaN: one step
    assert adv[2].tolist() == pytest.approx([0.5 - v0[2]] * 3 + [0.0] * 3)
    alone = vine_advantages(
        torch.tensor([1.0]), torch.zeros(1, dtype=torch.long), torch.tensor([2]), [[]], [[]]
    )
    assert alone.tolist() == [[0.0, 0.0]]


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-random"), load_tokenizer("tiny-random")


def test_a_continuation_from_a_prefix_equals_the_whole_greedy_rollout(tiny):
    """What VinePPO's values rest on: continuing a response from any prefix of it, greedily, gives
    the rest of it, token for token and with the same logprobs."""
    model, tok = tiny
    engine = HFEngine(model, tok)
    prompt = tok("Count: one two", add_special_tokens=False)["input_ids"]
    greedy = SamplingParams(n=1, temperature=0.0, max_new_tokens=12)
    whole = engine.generate([prompt], greedy)[0][0]
    for cut in (1, 5, 9):
        rest = engine.generate(
            [prompt + whole.token_ids[:cut]], SamplingParams(n=1, temperature=0.0, max_new_tokens=12 - cut)
        )[0][0]
        assert rest.token_ids == whole.token_ids[cut:]
        assert rest.logprobs == pytest.approx(whole.logprobs[cut:], abs=1e-4)


class Continue:
    """An engine whose continuations are fixed texts (``texts``), tokenized; records its prompts."""

    def __init__(self, tok, texts: list[str]) -> None:
        self.tok, self.texts, self.prompts = tok, texts, []

    def generate(self, prompts, params):
        self.prompts.extend(prompts)
        out = []
        for p, prompt in enumerate(prompts):
            group = []
            for text in self.texts[: params.n]:
                ids = self.tok(text, add_special_tokens=False)["input_ids"]
                group.append(Completion(p, prompt, ids, [-1.0] * len(ids), "stop", text))
            out.append(group)
        return out


def _response(tok, text: str) -> Trajectory:
    ids = tok(text, add_special_tokens=False)["input_ids"]
    return Trajectory([1, 2], [Segment(SAMPLED, ids, [-0.5] * len(ids))], "stop", text=text, reward=0.0)


def test_mc_values_are_the_mean_reward_of_the_continuations(tiny):
    """The continuations continue the response's own prefix, are scored as whole responses (prefix
    text + new text), and a boundary's value is their mean; fails if the prefix is dropped from the
    scored text or the wrong prefix is continued."""
    _, tok = tiny
    t = _response(tok, "aa bb cc")
    engine = Continue(tok, [" x", " yyy"])
    example = Example(id="e", prompt=[{"role": "user", "content": "q"}], reference="")
    spec = RewardSpec(name="reward_fixtures:scaled_len", params={"scale": 1.0})
    with RewardPool([spec], workers=1) as pool:
        params = SamplingParams(n=1, max_new_tokens=32)
        metrics = mc_step_values(engine, pool, tok, [TrajectoryGroup(0, [t])], [example], params, " ", 2, 8)
    assert metrics["vine/continuations"] == 4 and len(t.mc_ends) == 2
    prefixes = [tok.decode(p[2:]) for p in engine.prompts]
    assert prefixes == ["aa", "aa bb"]
    # scaled_len scores the characters of the whole text: prefix + continuation
    assert t.mc_values == pytest.approx(
        [(len("aa x") + len("aa yyy")) / 2, (len("aa bb x") + len("aa bb yyy")) / 2]
    )
    several = Trajectory(
        [1], [Segment(SAMPLED, [5], [-1.0]), Segment(CONTEXT, [6]), Segment(SAMPLED, [7], [-1.0])], "stop"
    )
    with RewardPool([spec], workers=1) as pool, pytest.raises(RlvrError, match="single-turn"):
        mc_step_values(
            engine, pool, tok, [TrajectoryGroup(0, [several])], [example], SamplingParams(), " ", 2, 8
        )


def test_a_vine_run_trains_with_measured_values(tmp_path):
    cfg = load_config(
        None,
        [*TINY_RUN, "rollout.max_new_tokens=12", "rewards.step_separator=' '", "algo.advantage=vine",
         "algo.advantage_params={samples: 2, max_steps: 3}", "train.steps=1", "train.log_trajectories=true",
         f"output_dir={tmp_path}", "name=vine"],
    )  # fmt: skip
    api.train(cfg, quiet=True)
    rows = read_jsonl(tmp_path / "vine" / "trajectories.jsonl")
    kept = [r for r in rows if r["kept"]]
    assert kept and all(len(r["mc_values"]) == len(r["mc_ends"]) > 0 for r in kept)
    metrics = [r for r in read_jsonl(tmp_path / "vine" / "metrics.jsonl") if r["phase"] == "train"]
    assert metrics[0]["vine/continuations"] > 0 and "update/loss" in metrics[0]


def test_uncertain_boundaries_branch_before_the_least_likely_tokens(tiny):
    from rlvr.collect.vine import uncertain_boundaries

    logprobs = [-0.1, -3.0, -0.2, -0.05, -2.0, -0.3]
    assert uncertain_boundaries(logprobs, 3) == [0, 3]  # before tokens 1 and 4
    assert uncertain_boundaries([-5.0, -0.1], 4) == [0]  # the first token is never a branch point
    _, tok = tiny
    t = _response(tok, "aa bb cc dd")
    t.segments[0].logprobs = [-0.1] * len(t.segments[0].token_ids)
    t.segments[0].logprobs[2] = -4.0
    engine = Continue(tok, [" x"])
    example = Example(id="e", prompt=[{"role": "user", "content": "q"}], reference="")
    spec = RewardSpec(name="reward_fixtures:scaled_len", params={"scale": 1.0})
    with RewardPool([spec], workers=1) as pool:
        params = SamplingParams(n=1, max_new_tokens=32)
        mc_step_values(
            engine, pool, tok, [TrajectoryGroup(0, [t])], [example], params, " ", 1, 2, "uncertain"
        )
    assert t.mc_ends == [1] and engine.prompts[0][2:] == t.segments[0].token_ids[:2]
