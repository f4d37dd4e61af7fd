"""The collector on its own (`rlvr collect`) and the learner driven from its files.

The central check: the learner fed the trajectories a training step logged makes exactly the
update the live loop made from them (same weights, same advantages), so the JSONL is a faithful
hand-over between collector and learner.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from tiny import TINY_RUN

from rlvr import api
from rlvr.config import load_config
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl
from rlvr.models import load_model, load_tokenizer
from rlvr.rewards import sandbox
from rlvr.rollout import HFEngine
from rlvr.train.learn.learner import Learner
from rlvr.trajectory import read_trajectory_groups

# Several minibatches and epochs (the learner's shuffling RNG and frozen old logprobs), dynamic
# sampling with the sampled-batch normalisation (the kept flags and the dropped groups matter).
UPDATE = [
    "rewards.functions=[{name: 'reward_fixtures:scaled_len_odd_ids', params: {scale: 0.01}}]",
    "algo.epochs=2",
    "algo.minibatches=2",
    "algo.loss_norm=sampled",
    "rollout.prompts_per_step=3",
    "optim.lr=1e-3",
    "optim.warmup_steps=0",
]


def _cfg(tmp_path, *extra: str):
    return load_config(None, [*TINY_RUN, f"output_dir={tmp_path}", *extra])


def test_the_learner_fed_from_the_file_makes_the_live_update(tmp_path) -> None:
    cfg = _cfg(
        tmp_path, "name=live", "train.steps=1", "train.log_trajectories=true", "train.log_samples=-1", *UPDATE
    )
    api.train(cfg, quiet=True)
    run = tmp_path / "live"
    pairs = read_trajectory_groups(run / "trajectories.jsonl", step=1)
    kept = [g for g, keep in pairs if keep]
    assert 0 < len(kept) < len(pairs) == 3  # dynamic sampling dropped a group
    assert all(t.policy_version == 0 for g, _ in pairs for t in g.trajectories)

    policy = load_model("tiny-random")
    pad_id = HFEngine(policy, load_tokenizer("tiny-random")).pad_id
    learner = Learner(cfg, policy, pad_id)
    metrics = learner.update(kept, [g for g, _ in pairs])
    assert learner.version == 1
    assert metrics["update/loss_scale"] < 1.0  # the dropped group counts in the normalisation

    live = load_model(str(run / "checkpoints" / "step-000001" / "model"))
    for (name, a), b in zip(learner.model.named_parameters(), live.parameters()):
        assert torch.equal(a, b), name
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    step = next(r for r in logged if r["phase"] == "train")
    for key in ("update/loss", "update/grad_norm", "update/loss_scale", "update/clip_frac"):
        assert metrics[key] == step[key], key
    samples = read_jsonl(run / "samples.jsonl")
    advantages = [t.advantage for g, keep in pairs for t in g.trajectories]
    assert advantages == [s["advantage"] for s in samples]
    assert advantages == [r["advantage"] for r in read_jsonl(run / "trajectories.jsonl")]
    assert sum(a is None for a in advantages) == sum(len(g) for g, keep in pairs if not keep)


def test_the_learner_refuses_a_group_with_an_errored_reward(tmp_path) -> None:
    cfg = _cfg(tmp_path, "name=x")
    out = tmp_path / "c.jsonl"
    api.collect(cfg, str(out), prompts=1, quiet=True)
    (group, _), *_ = read_trajectory_groups(out)
    group.trajectories[0].reward = None
    policy = load_model("tiny-random")
    with pytest.raises(ValueError, match="without a reward"):
        Learner(cfg, policy, 0).update([group])


def test_collect_writes_every_sampled_group_with_its_kept_flag(tmp_path) -> None:
    out = tmp_path / "c.jsonl"
    summary = api.collect(_cfg(tmp_path, *UPDATE[:1]), str(out), prompts=5, quiet=True)
    rows = read_jsonl(out)
    assert len(rows) == 5 * 4 and summary["trajectories"] == 20.0
    assert summary["groups/sampled"] == 5.0
    pairs = read_trajectory_groups(out)
    assert [g.example_index for g, _ in pairs] == list(dict.fromkeys(r["example_index"] for r in rows))
    for group, kept in pairs:  # dynamic sampling: a group is kept iff its rewards differ
        assert kept == (len(set(group.rewards)) > 1)
    assert 0 < summary["groups/kept"] == sum(kept for _, kept in pairs) < 5
    row = rows[0]
    assert row["segments"][0]["kind"] == "sampled"
    assert len(row["segments"][0]["token_ids"]) == len(row["segments"][0]["logprobs"])
    assert set(row["rewards"]) == {"reward_fixtures:scaled_len_odd_ids"} and row["errors"] == {}


def test_collect_on_the_eval_split_covers_each_held_out_problem_once(tmp_path) -> None:
    out = tmp_path / "eval.jsonl"
    api.collect(_cfg(tmp_path), str(out), split="eval", quiet=True)
    rows = read_jsonl(out)
    ids = [r["example_id"] for r in rows]
    assert len(set(ids)) == 8 and len(ids) == 8 * 4


def test_collect_on_a_math_task(tmp_path) -> None:
    data = tmp_path / "math.jsonl"
    problems = [{"question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(12)]
    data.write_text("".join(json.dumps(p) + "\n" for p in problems))
    cfg = _cfg(
        tmp_path,
        "data.source=file",
        f"data.path={data}",
        "data.eval_size=2",
        "data.few_shot=[]",
        "rewards.functions=[{name: math}]",
    )
    out = tmp_path / "c.jsonl"
    summary = api.collect(cfg, str(out), prompts=3, quiet=True)
    rows = read_jsonl(out)
    assert len(rows) == 12 and summary["reward/errors"] == 0.0
    assert all(set(r["rewards"]) == {"math"} and r["reward"] in (0.0, 1.0) for r in rows)


def test_collect_on_a_code_task(tmp_path) -> None:
    data = tmp_path / "code.jsonl"
    problem = {
        "question": "Write add(a, b) that returns a + b.",
        "answer": "def add(a, b):\n    return a + b\n",
        "tests": "assert add(1, 2) == 3\nassert add(-1, 1) == 0\n",
        "entry_point": "add",
    }
    data.write_text("".join(json.dumps({**problem, "id": str(i)}) + "\n" for i in range(4)))
    overrides = ["data.source=file", f"data.path={data}", "data.eval_size=1", "data.few_shot=[]"]
    cfg = _cfg(tmp_path, *overrides, "rewards.functions=[{name: code}]")
    out = tmp_path / "c.jsonl"
    if sandbox.backend_name() != "bwrap":  # without bubblewrap the code reward refuses to start
        with pytest.raises(RlvrError, match="apt-get install -y bubblewrap"):
            api.collect(cfg, str(out), prompts=2, quiet=True)
        assert not out.exists()
        return
    summary = api.collect(cfg, str(out), prompts=2, quiet=True)
    rows = read_jsonl(out)
    assert len(rows) == 8 and summary["reward/errors"] == 0.0
    assert all(r["rewards"] == {"code": 0.0} for r in rows)  # tiny-random writes no working code


def test_collect_cli_summary_and_refusals(tmp_path) -> None:
    out = tmp_path / "c.jsonl"
    cmd = [sys.executable, "-m", "rlvr.cli", "collect", *TINY_RUN, "--out", str(out), "--prompts", "2"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.path.dirname(__file__)}  # reward_fixtures

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*cmd, *args], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300
        )

    result = cli("--json", "--quiet")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["trajectories"] == 8.0 and len(read_jsonl(out)) == 8
    before = out.read_bytes()
    again = cli()
    assert again.returncode == 2 and "already exists" in " ".join(again.stderr.split())
    assert out.read_bytes() == before


def test_collect_refusals_write_nothing(tmp_path) -> None:
    bad = tmp_path / "bad.jsonl"
    with pytest.raises(RlvrError, match="no_such_reward"):
        api.collect(_cfg(tmp_path, "rewards.functions=[{name: no_such_reward}]"), str(bad), quiet=True)
    with pytest.raises(RlvrError, match="does not exist"):
        api.collect(_cfg(tmp_path), str(tmp_path / "missing" / "c.jsonl"), quiet=True)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("on_error", ["skip_group", "zero"])
def test_a_greedy_baseline_that_cannot_be_scored_is_not_a_silent_zero(
    tmp_path, monkeypatch, on_error
) -> None:
    """ReMax's baseline is a greedy completion's reward: when that reward errors, the group is dropped
    (skip_group) or its baseline is 0 (zero), as for the group's own rewards."""
    from rlvr.collect import collector as module
    from rlvr.collect.collector import Collector
    from rlvr.data.from_config import build_datasets
    from rlvr.rewards.results import RewardResult

    real = module.score_completions

    def baseline_fails(pool, completions, examples, group_sizes=None):
        if group_sizes and all(n == 1 for n in group_sizes):  # the greedy baseline call
            return [RewardResult(None, {}, {"x": "timeout"}) for _ in completions]
        return real(pool, completions, examples, group_sizes)

    monkeypatch.setattr(module, "score_completions", baseline_fails)
    cfg = _cfg(tmp_path, *UPDATE[:1], "algo.advantage=remax", f"rewards.on_error={on_error}")
    train, _ = build_datasets(cfg.data)
    tokenizer = load_tokenizer("tiny-random")
    collector = Collector(cfg, HFEngine(load_model("tiny-random"), tokenizer), tokenizer, train)
    try:
        collection = collector.collect(count=4, greedy_baseline=True)
    finally:
        collector.close()
    informative = [g for g in collection.seen if len(set(g.rewards)) > 1]
    assert informative  # the reward varies in some groups, so only the baseline decides
    if on_error == "skip_group":
        assert collection.kept == []
    else:
        assert collection.kept == informative and all(g.baseline_reward == 0.0 for g in collection.kept)
