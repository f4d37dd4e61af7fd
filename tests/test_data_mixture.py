"""A weighted mixture of data sources (data.sources): proportions, per-source shuffles, exact state,
each source scored by its own reward, per-source metrics, config errors, and a tiny end-to-end run."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from tiny import TINY_RUN

from rlvr import api
from rlvr.config import load_config
from rlvr.config.data_plan import SourceItem
from rlvr.data.example import Example
from rlvr.data.from_config import load_datasets
from rlvr.data.mixture import MixtureOrder, source_metrics
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl
from rlvr.log.progress import source_accuracy
from rlvr.rewards.builtin import verifier_reward
from rlvr.rewards.routing import check_routes
from rlvr.trajectory import Trajectory, TrajectoryGroup


def _examples(**sizes: int) -> list[Example]:
    """``sizes[name]`` examples of each source, sources interleaved so indices are not contiguous."""
    out: list[Example] = []
    left = dict(sizes)
    while any(left.values()):
        for name in sizes:
            if left[name]:
                left[name] -= 1
                out.append(Example(id=f"{name}-{left[name]}", prompt=[], data_source=name))
    return out


def _sources(**weights: float) -> list[SourceItem]:
    return [SourceItem(name=name, task="chain_sum", weight=w) for name, w in weights.items()]


# ------------------------------------------------------------------------------------------- order
def test_draws_follow_the_weights_within_binomial_bounds() -> None:
    examples = _examples(a=10, b=10)
    order = MixtureOrder(_sources(a=3.0, b=1.0), examples, seed=5)
    n = 4000
    drawn = order.take(n)
    from_a = sum(examples[i].data_source == "a" for i in drawn)
    expected, sigma = n * 0.75, math.sqrt(n * 0.75 * 0.25)
    assert abs(from_a - expected) < 4 * sigma, (from_a, expected)
    metrics = order.metrics()
    assert metrics["data/a/drawn"] == pytest.approx(from_a / n)
    assert metrics["data/b/drawn"] == pytest.approx(1 - from_a / n)
    assert order.metrics() == {}  # nothing drawn since


def test_each_source_is_shuffled_once_per_epoch() -> None:
    examples = _examples(a=5, b=7)
    order = MixtureOrder(_sources(a=1.0, b=1.0), examples, seed=1)
    per_source: dict[str, list[int]] = {"a": [], "b": []}
    for index in order.take(200):
        per_source[examples[index].data_source].append(index)
    for name, size in (("a", 5), ("b", 7)):
        members = sorted(i for i, e in enumerate(examples) if e.data_source == name)
        drawn = per_source[name]
        epochs = [drawn[k : k + size] for k in range(0, len(drawn) - size + 1, size)]
        assert len(epochs) >= 5
        assert all(sorted(epoch) == members for epoch in epochs)  # every example once per epoch
        assert len({tuple(epoch) for epoch in epochs}) > 1  # a fresh shuffle each epoch


def test_state_round_trip_is_exact() -> None:
    examples = _examples(a=6, b=4, c=3)
    sources = _sources(a=2.0, b=1.0, c=0.5)
    order = MixtureOrder(sources, examples, seed=3)
    order.take(17)
    state = json.loads(json.dumps(order.state()))  # what a checkpoint's state.json holds
    resumed = MixtureOrder(sources, examples, seed=3)
    resumed.load_state(state)
    assert resumed.metrics() == order.metrics()  # draws since the last metrics() carried over
    assert resumed.take(40) == order.take(40)
    other = MixtureOrder(_sources(a=1.0, b=1.0), _examples(a=6, b=4), seed=3)
    with pytest.raises(RlvrError, match="data.sources"):
        other.load_state(state)


# ------------------------------------------------------------------------------------ loading, routing
def _write(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_each_source_is_scored_by_its_own_reward(tmp_path) -> None:
    strict = _write(tmp_path / "strict.jsonl", [{"question": f"q{i}?", "answer": "0.5"} for i in range(5)])
    loose = _write(tmp_path / "loose.jsonl", [{"question": f"p{i}?", "answer": "0.5"} for i in range(5)])
    cfg = load_config(
        None,
        [
            "model.name=tiny-random",
            "data.sources=["
            f"{{name: strict, path: {strict}, reward: exact_match, eval_size: 1}}, "
            f"{{name: loose, path: {loose}, eval_size: 1}}]",
        ],
    )
    assert [f.name for f in cfg.rewards.functions] == ["verifier"]
    assert cfg.eval.group_by == ["data_source"]
    data = load_datasets(cfg.data)
    assert (len(data.train), len(data.held_out)) == (8, 2)
    assert all(e.id.startswith(f"{e.data_source}/") for e in (*data.train, *data.held_out))
    assert {e.data_source for e in data.held_out} == {"strict", "loose"}
    params = cfg.rewards.functions[0].params
    check_routes(params, data.train)  # start-up's check: every example routes to a known reward
    # 1/2 equals 0.5 to math-verify, not to an exact string match
    scores = {e.data_source: verifier_reward(r"\boxed{1/2}", e, **params) for e in data.train}
    assert scores == {"strict": 0.0, "loose": 1.0}


def test_source_ids_stay_unique_when_two_sources_share_a_task() -> None:
    cfg = load_config(
        None,
        [
            "model.name=tiny-random",
            "data.sources=[{name: one, task: chain_sum, train_size: 6, eval_size: 2}, "
            "{name: two, task: chain_sum, train_size: 6, eval_size: 2}]",
        ],
    )
    data = load_datasets(cfg.data)
    ids = [e.id for e in (*data.train, *data.held_out)]
    assert len(ids) == len(set(ids))
    assert {e.verifier for e in data.train} == {"reasoning_gym"}


@pytest.mark.parametrize(
    ("sources", "match"),
    [
        ("[{name: a, task: chain_sum}, {name: a, task: leg_counting}]", r"data\.sources\[1\]\.name='a'"),
        ("[{name: 'a b', task: chain_sum}]", r"data\.sources\[0\]\.name='a b'.*plain name"),
        (
            "[{name: a, task: chain_sum, reward: no_such_reward}]",
            r"data\.sources\[0\]\.reward='no_such_reward'",
        ),
        (
            "[{name: a, task: chain_sum}, {name: b, task: chain_sum, reward: majority_vote}]",
            r"sources\[1\]\.reward",
        ),
        ("[{name: a, path: x.jsonl, task: chain_sum}]", r"data\.sources\[0\]\.task"),
        ("[{name: a, source: reasoning_gym}]", r"data\.sources\[0\]\.task"),
    ],
)
def test_bad_sources_are_refused_naming_the_key(sources: str, match: str) -> None:
    with pytest.raises(RlvrError, match=match):
        load_config(None, ["model.name=tiny-random", f"data.sources={sources}"])


def test_a_one_source_key_beside_sources_is_refused() -> None:
    with pytest.raises(RlvrError, match=r"data\.path is not read when data\.sources is set"):
        load_config(None, ["data.path=x.jsonl", "data.sources=[{name: a, task: chain_sum}]"])


def test_a_source_reward_needs_the_routing_reward() -> None:
    with pytest.raises(RlvrError, match=r"data\.sources\[0\]\.reward.*verifier"):
        load_config(
            None,
            [
                "model.name=tiny-random",
                "data.sources=[{name: a, task: chain_sum, reward: math}]",
                "rewards.functions=[{name: reasoning_gym}]",
            ],
        )


def test_a_missing_task_is_named_with_its_source() -> None:
    cfg = load_config(None, ["model.name=tiny-random", "data.sources=[{name: a, task: no_such_task}]"])
    with pytest.raises(RlvrError, match=r"data\.sources\[0\] \(a\)"):
        load_datasets(cfg.data)


# ------------------------------------------------------------------------------------------ metrics
def _group(index: int, rewards: list[float | None], correct: list[float]) -> TrajectoryGroup:
    trajectories = [
        Trajectory(
            prompt_ids=[],
            segments=[],
            finish_reason="stop",
            example_index=index,
            reward=r,
            rewards={"verifier": c},
            errors={} if r is not None else {"verifier": "timeout"},
        )
        for r, c in zip(rewards, correct)
    ]
    return TrajectoryGroup(index, trajectories)


def test_source_metrics_against_hand_built_groups() -> None:
    examples = [Example(id=str(i), prompt=[], data_source=s) for i, s in enumerate("aab")]
    g0 = _group(0, [1.0, 0.0, None], [1.0, 0.0, 0.0])  # a: one right of three, one unscored
    g1 = _group(1, [0.0, 0.0], [0.0, 0.0])  # a: dropped (zero variance)
    g2 = _group(2, [1.0, 1.0], [1.0, 0.999])  # b: 0.999 is not correct
    g0_again = _group(0, [0.5, 0.5], [0.0, 0.0])  # a: drawn again in the step, dropped
    kept = [replace(g0, trajectories=g0.trajectories[:2]), g2]  # new objects, as partial groups are
    metrics = source_metrics([g0, g1, g2, g0_again], kept, examples, "verifier")
    assert metrics == pytest.approx(
        {
            "source/a/accuracy": 1 / 7,
            "source/a/reward": (1.0 + 0.0 + 0.0 + 0.0 + 0.5 + 0.5) / 6,
            "source/a/admitted": 1 / 3,
            "source/a/groups": 3.0,
            "source/b/accuracy": 0.5,
            "source/b/reward": 1.0,
            "source/b/admitted": 1.0,
            "source/b/groups": 1.0,
        }
    )
    assert source_accuracy(metrics) == "acc a 14% b 50%"
    assert source_accuracy({"train/accuracy": 0.5}) == ""


# ---------------------------------------------------------------------------------------- end to end
def test_two_sources_train_end_to_end(tmp_path) -> None:
    ours = ("rewards.functions", "data.train_size", "data.eval_size")  # given below, per source
    tiny = [o for o in TINY_RUN if not o.startswith(ours)]
    cfg = load_config(
        None,
        [
            *tiny,
            f"output_dir={tmp_path}",
            "name=mix",
            "train.steps=2",
            "rollout.prompts_per_step=4",
            "eval.every=0",
            "eval.before=false",
            "data.sources=[{name: sums, task: chain_sum, weight: 3, train_size: 12, eval_size: 3}, "
            "{name: legs, task: leg_counting, train_size: 12, eval_size: 2}]",
            # the routing reward first (correctness), then one that varies so updates happen
            "rewards.functions=[{name: verifier, params: {reward_params: {reasoning_gym: {extract: auto}}}}, "
            "{name: 'reward_fixtures:scaled_len', params: {scale: 0.01}}]",
        ],
    )
    api.train(cfg, quiet=True)
    rows = read_jsonl(tmp_path / "mix" / "metrics.jsonl")
    train = [r for r in rows if r["phase"] == "train"]
    assert len(train) == 2
    drawn = {k.split("/")[1] for r in train for k in r if k.startswith("data/") and k.endswith("/drawn")}
    seen = {k.split("/")[1] for r in train for k in r if k.startswith("source/") and k.endswith("/accuracy")}
    assert drawn == seen == {"sums", "legs"}
    for r in train:
        groups = sum(v for k, v in r.items() if k.startswith("source/") and k.endswith("/groups"))
        assert groups == r["groups/sampled"]
    after = next(r for r in rows if r["phase"] == "after")
    assert (after["eval/size/sums"], after["eval/size/legs"]) == (3.0, 2.0)
    assert {"eval/accuracy/sums", "eval/accuracy/legs"} <= set(after)
    from rlvr.report.page import write_report

    page = write_report([tmp_path / "mix"]).read_text()
    assert "source-accuracy" in page and "Sources (data.sources)" in page
