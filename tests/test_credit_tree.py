"""Tree rollouts: responses branch at their uncertain tokens, the branches branch again, every leaf is
trained on, and each node's value is the mean reward of the leaves below it."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from test_credit_vine import Continue
from tiny import TINY_RUN

from rlvr import api
from rlvr.algo.vine import vine_advantages
from rlvr.collect.tree import grow_tree, node_values, path_nodes
from rlvr.config import load_config
from rlvr.data.example import Example
from rlvr.log import read_jsonl
from rlvr.models import load_tokenizer
from rlvr.rewards import RewardPool, RewardSpec
from rlvr.rollout import SamplingParams
from rlvr.trajectory import SAMPLED, Segment, Trajectory, TrajectoryGroup


def test_node_values_are_the_mean_reward_of_the_leaves_below():
    leaves = [[1, 2, 3], [1, 2, 4], [1, 5, 6], [7, 8]]
    values = node_values(leaves, [1.0, 0.0, 1.0, None], {(1,), (1, 2), (7,)})
    assert values[(1,)] == pytest.approx(2 / 3) and values[(1, 2)] == 0.5 and math.isnan(values[(7,)])
    prefixes = {(1,), (1, 2), (1, 2, 3)}
    assert path_nodes([1, 2, 3], prefixes) == [0, 1]  # the whole response is not a node inside it
    assert path_nodes([1, 5, 6], prefixes) == [0] and path_nodes([7, 8], prefixes) == []


def _collector(tok, engine, pool):
    def set_reward(t, result):
        t.rewards, t.reward = dict(result.components), result.total

    example = Example(id="e", prompt=[{"role": "user", "content": "q"}], reference="")
    cfg = SimpleNamespace(rewards=SimpleNamespace(step_separator=" "))
    return SimpleNamespace(
        pool=pool, engine=engine, tokenizer=tok, cfg=cfg, train_examples=[example], _set_reward=set_reward
    )


def _response(tok, text: str, reward: float, least_likely: int | None = None) -> Trajectory:
    ids = tok(text, add_special_tokens=False)["input_ids"]
    logprobs = [-0.1] * len(ids)
    if least_likely is not None:
        logprobs[least_likely] = -4.0
    return Trajectory([1, 2], [Segment(SAMPLED, ids, logprobs)], "stop", text=text, reward=reward)


def test_a_tree_grows_within_its_budget_and_values_its_nodes():
    """One level: each response branches once (max_steps 2) into 2 samples, scored as whole texts; the
    node's value includes the parent and its children. Two levels: only the children's own tokens
    branch (a shared prefix is never expanded twice). Fails if the parent is left out of its node's
    value, the depth is ignored, or a prefix is expanded again."""
    tok = load_tokenizer("tiny-random")
    spec = RewardSpec(name="reward_fixtures:scaled_len", params={"scale": 1.0})  # reward = characters
    params = SamplingParams(n=1, max_new_tokens=32)
    with RewardPool([spec], workers=1) as pool:
        parent = _response(tok, "aa bb cc", 11.0, least_likely=2)  # branches before " cc": prefix "aa bb"
        short = _response(tok, "zz", 2.0)  # one token: no branch point
        engine = Continue(tok, [" x", " yyy"])
        leaves, counts = grow_tree(
            _collector(tok, engine, pool), TrajectoryGroup(0, [parent, short]), params, 2, 2, 1, "uncertain"
        )
        assert [tok.decode(p[2:]) for p in engine.prompts] == ["aa bb"]
        assert [t.text for t in leaves] == ["aa bb cc", "zz", "aa bb x", "aa bb yyy"]
        assert [t.reward for t in leaves[2:]] == [7.0, 9.0]
        assert parent.mc_ends == [1] and parent.mc_values == [pytest.approx((11 + 7 + 9) / 3)]
        assert leaves[3].mc_ends == [1] and leaves[3].mc_values == parent.mc_values and short.mc_ends == []
        assert counts["tree/leaves"] == 4 and counts["tree/branches"] == 2
        # the continuations' logprobs are the prefix's own, then the engine's
        assert leaves[3].segments[0].logprobs[:2] == parent.segments[0].logprobs[:2]

        engine = Continue(tok, [" x y z", " yyy w v"])
        parent = _response(tok, "aa bb cc", 8.0, least_likely=2)
        leaves, counts = grow_tree(
            _collector(tok, engine, pool), TrajectoryGroup(0, [parent]), params, 2, 2, 2, "uncertain"
        )
    assert counts["tree/leaves"] == 1 + 2 + 4 and counts["tree/branches"] == 6
    assert len(engine.prompts) == len({tuple(p) for p in engine.prompts}) == 3
    for prompt in engine.prompts[1:]:  # the second level continues the children past their origin
        assert len(prompt) - 2 > 2
    deepest = leaves[-1]
    assert len(deepest.mc_ends) == 2  # two nodes on its path: the root's branch and its parent's


def test_depth_needs_a_tree():
    import torch

    with pytest.raises(ValueError, match="depth"):
        vine_advantages(torch.zeros(1), torch.zeros(1, dtype=torch.long), torch.ones(1, dtype=torch.long),
                        [[]], [[]], depth=2)  # fmt: skip


def test_a_tree_run_trains_on_every_leaf(tmp_path):
    cfg = load_config(
        None,
        [*TINY_RUN, "rollout.max_new_tokens=12", "algo.advantage=vine",
         "algo.advantage_params={tree: true, depth: 2, samples: 2, max_steps: 2, split: uncertain}",
         "algo.dynamic_sampling=false", "train.steps=1", "train.log_trajectories=true",
         f"output_dir={tmp_path}", "name=tree"],
    )  # fmt: skip
    api.train(cfg, quiet=True)
    metrics = [r for r in read_jsonl(tmp_path / "tree" / "metrics.jsonl") if r["phase"] == "train"]
    sampled = cfg.rollout.prompts_per_step * cfg.rollout.group_size
    assert metrics[0]["tree/leaves"] > sampled and "update/loss" in metrics[0]
    rows = [r for r in read_jsonl(tmp_path / "tree" / "trajectories.jsonl") if r["kept"]]
    assert len(rows) == metrics[0]["tree/leaves"]
    assert any(r["mc_ends"] for r in rows)
