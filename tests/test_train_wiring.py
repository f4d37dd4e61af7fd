"""Trainer wiring: what the loop does with groups, reward errors, the reference model, old logprobs,
the sampling temperature and sampled evaluation — checked through the real loop (``api.train``,
:class:`Orchestrator`, :class:`Collector`, :class:`Learner`) on tiny-random, not only through the
pure functions it calls.

Every test here was checked by planting, in the source, the one-line bug named in its docstring
and watching it fail. The rewards come from ``tests/reward_fixtures.py``: they depend on the
example's number, so each test can recompute from the logs what the loop must have done.
"""

from __future__ import annotations

import copy
import statistics
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from reward_fixtures import example_number
from tiny import TINY_RUN

from rlvr import api
from rlvr.algo import token_weights
from rlvr.config import RunConfig, load_config
from rlvr.data.from_config import build_datasets
from rlvr.log import read_jsonl
from rlvr.models import load_model
from rlvr.train.learn.learner import Learner
from rlvr.train.learn.update import batch_logprobs
from rlvr.train.loop.orchestrator import Orchestrator
from rlvr.trajectory import TrajectoryGroup

TINY = [
    *TINY_RUN,
    "name=run",
    "data.eval_size=0",
    "eval.before=false",
    "train.log_samples=-1",
    "train.final_checkpoint=none",
]


def _cfg(tmp_path: Path, *extra: str) -> RunConfig:
    return load_config(None, [*TINY, f"output_dir={tmp_path}", *extra])


def _reward(name: str, label: str = "r", **params: Any) -> str:
    inner = ", ".join(f"{k}: {v!r}" for k, v in params.items())
    return f"rewards.functions=[{{name: 'reward_fixtures:{name}', label: {label}, params: {{{inner}}}}}]"


def _log(tmp_path: Path, name: str) -> list[dict[str, Any]]:
    return read_jsonl(tmp_path / "run" / name)


def _train_metrics(tmp_path: Path) -> dict[int, dict[str, Any]]:
    return {r["step"]: r for r in _log(tmp_path, "metrics.jsonl") if r["phase"] == "train"}


def _groups(tmp_path: Path) -> Iterator[tuple[int, list[dict], list[dict]]]:
    """(step, trajectories.jsonl rows, samples.jsonl rows) of every sampled group, in order.

    Both logs list every trajectory of every sampled group in the same order (samples.jsonl with
    train.log_samples=-1); trajectories.jsonl has the group number and kept flag, samples.jsonl the
    advantage the learner gave the trajectory.
    """
    trajectories, samples = _log(tmp_path, "trajectories.jsonl"), _log(tmp_path, "samples.jsonl")
    assert len(trajectories) == len(samples) > 0
    rows: dict[tuple[int, int], list[tuple[dict, dict]]] = defaultdict(list)
    for t, s in zip(trajectories, samples):
        assert (t["step"], t["text"], t["example_id"]) == (s["step"], s["completion"], s["example_id"])
        rows[(t["step"], t["group"])].append((t, s))
    for (step, _), pairs in rows.items():
        yield step, [t for t, _ in pairs], [s for _, s in pairs]


def _grpo(rewards: list[float], eps: float = 1e-6) -> list[float]:
    """GRPO's advantages of one group, by hand: (r - mean) / (sample std + eps), 0 for a constant group."""
    mean, std = statistics.mean(rewards), statistics.stdev(rewards)
    return [(r - mean) / (std + eps) if std > 0 else 0.0 for r in rewards]


@pytest.fixture
def learner_inputs(monkeypatch: pytest.MonkeyPatch) -> list[list[dict[str, Any]]]:
    """What every Learner.update call of the test received: per group, its example id, rewards
    and reward errors (copied at the call)."""
    calls: list[list[dict[str, Any]]] = []
    update = Learner.update

    def spy(self: Learner, groups: list[TrajectoryGroup], sampled: list[TrajectoryGroup] | None = None):
        calls.append(
            [
                {
                    "example_id": g.trajectories[0].example_id,
                    "rewards": list(g.rewards),
                    "errors": [dict(t.errors) for t in g.trajectories],
                }
                for g in groups
            ]
        )
        return update(self, groups, sampled)

    monkeypatch.setattr(Learner, "update", spy)
    return calls


# ------------------------------------------------------------------------- 1. dynamic sampling
def test_dynamic_sampling_filter_is_applied_in_the_loop(tmp_path: Path, learner_inputs) -> None:
    """Planted: the collector's ``informative_groups`` filter skipped (constant groups kept), or the
    orchestrator handing ``collection.seen`` to the learner instead of ``collection.kept``."""
    cfg = _cfg(
        tmp_path,
        _reward("constant_for_even"),
        "rollout.prompts_per_step=4",
        "train.steps=2",
        "train.log_trajectories=true",
    )
    api.train(cfg, quiet=True)
    metrics = _train_metrics(tmp_path)
    kept_ids: dict[int, list[str]] = defaultdict(list)
    sampled = kept = 0
    for step, trajectories, samples in _groups(tmp_path):
        informative = len({t["reward"] for t in trajectories}) > 1
        assert informative == (example_number(trajectories[0]["example_id"]) % 2 == 1)
        assert all(t["kept"] == informative for t in trajectories)
        # a dropped group never reached the learner, a kept one got an advantage per trajectory
        assert all((s["advantage"] is not None) == informative for s in samples)
        sampled += 1
        if informative:
            kept += 1
            kept_ids[step].append(trajectories[0]["example_id"])
    assert 0 < kept < sampled == 8, "the run must sample both kinds of group for this test to mean anything"
    assert [metrics[s]["groups/sampled"] for s in (1, 2)] == [4.0, 4.0]
    assert [metrics[s]["groups/kept"] for s in (1, 2)] == [float(len(kept_ids[s])) for s in (1, 2)]
    # the learner got exactly the kept groups, each with signal
    steps_updated = [s for s in (1, 2) if kept_ids[s]]
    received = [[g["example_id"] for g in call] for call in learner_inputs]
    assert received == [kept_ids[s] for s in steps_updated]
    assert all(len(set(g["rewards"])) > 1 for call in learner_inputs for g in call)


def test_a_step_without_signal_skips_the_update(tmp_path: Path, learner_inputs) -> None:
    """Planted: the dynamic-sampling filter skipped (every constant group goes to the learner)."""
    cfg = _cfg(tmp_path, _reward("scaled_len", scale=0.0), "train.steps=1")
    run = Orchestrator(cfg, quiet=True)
    try:
        before = [p.detach().clone() for p in run.learner.model.parameters()]
        metrics = run.train_step()
        after = list(run.learner.model.parameters())
    finally:
        run.close()
    assert metrics["groups/sampled"] == 2.0 and metrics["groups/kept"] == 0.0
    assert metrics["update/skipped"] == 1.0 and "update/loss" not in metrics
    assert learner_inputs == []
    assert all(torch.equal(a, b) for a, b in zip(after, before))


# ------------------------------------------------------------------------- 2. reward errors
def _error_run(tmp_path: Path, on_error: str) -> tuple[dict[int, dict], list[tuple[int, list, list]]]:
    cfg = _cfg(
        tmp_path,
        _reward("fail_some", label="flaky"),
        f"rewards.on_error={on_error}",
        "rollout.prompts_per_step=4",
        "train.steps=2",
        "train.log_trajectories=true",
    )
    api.train(cfg, quiet=True)
    groups = list(_groups(tmp_path))
    errored = [t for _, ts, _ in groups for t in ts if t["errors"]]
    clean_groups = [ts for _, ts, _ in groups if not any(t["errors"] for t in ts)]
    assert errored and clean_groups, "the run must sample errored and clean groups to mean anything"
    return _train_metrics(tmp_path), groups


def _check_error_counts(metrics: dict[int, dict], groups: list[tuple[int, list, list]]) -> None:
    """Every error is counted (reward/errors, reward_errors/flaky/...) and shown with its sample."""
    for step in (1, 2):
        errors = sum(bool(t["errors"]) for s, ts, _ in groups if s == step for t in ts)
        assert metrics[step]["reward/errors"] == float(errors)
        by_kind = {k: v for k, v in metrics[step].items() if k.startswith("reward_errors/flaky/")}
        assert sum(by_kind.values()) == float(errors), by_kind
        clean = [t["reward"] for s, ts, _ in groups if s == step for t in ts if not t["errors"]]
        assert metrics[step]["reward/mean"] == pytest.approx(statistics.mean(clean))
    for _, trajectories, samples in groups:
        for t, s in zip(trajectories, samples):
            if t["errors"]:
                assert "planted failure" in t["errors"]["flaky"] and s["errors"] == t["errors"]
                assert s["reward"] is None  # samples.jsonl never shows an errored reward as a number


def test_reward_errors_skip_their_group(tmp_path: Path, learner_inputs) -> None:
    """Planted: the collector scoring errors 0 whatever ``rewards.on_error`` says (the errored groups
    then reach the learner), or the errored-group filter in ``Collector.collect`` dropped."""
    metrics, groups = _error_run(tmp_path, "skip_group")
    _check_error_counts(metrics, groups)
    for _, trajectories, samples in groups:
        if any(t["errors"] for t in trajectories):
            assert not any(t["kept"] for t in trajectories)
            assert all(s["advantage"] is None for s in samples)
            assert all(t["reward"] is None for t in trajectories if t["errors"])
    received = [g for call in learner_inputs for g in call]
    assert received and not any(e for g in received for e in g["errors"])
    assert all(None not in g["rewards"] for g in received)
    assert sum(metrics[s]["groups/kept"] for s in (1, 2)) == len(received)


def test_unscored_members_are_left_out_of_their_groups_baseline(tmp_path: Path, learner_inputs) -> None:
    """The default ``rewards.on_error=partial``: a group trains on its scored members, whose
    advantages are those of their rewards alone; an unscored member is in no baseline and trains on
    nothing. Planted: the collector handing the whole group on (the learner refuses its None), the
    partial group built from every member, or ``min_scored`` ignored."""
    metrics, groups = _error_run(tmp_path, "partial")
    _check_error_counts(metrics, groups)
    partial = 0
    for _, trajectories, samples in groups:
        scored = [(t, s) for t, s in zip(trajectories, samples) if not t["errors"]]
        unscored = [(t, s) for t, s in zip(trajectories, samples) if t["errors"]]
        assert all(not t["kept"] and s["advantage"] is None for t, s in unscored)
        if len(scored) < 2:  # fewer than rewards.min_scored: dropped whole
            assert not any(t["kept"] for t in trajectories)
            continue
        assert all(t["kept"] for t, _ in scored)
        expected = _grpo([t["reward"] for t, _ in scored])
        assert [s["advantage"] for _, s in scored] == pytest.approx(expected, rel=1e-4, abs=1e-5)
        partial += bool(unscored)
    assert partial > 0, "the run must train on a partial group to mean anything"
    assert sum(metrics[s]["groups/partial"] for s in (1, 2)) == partial
    received = [g for call in learner_inputs for g in call]
    assert all(None not in g["rewards"] and not any(g["errors"]) for g in received)
    assert any(len(g["rewards"]) < 4 for g in received)


def test_an_unscored_member_never_flips_a_siblings_advantage(tmp_path: Path) -> None:
    """A do-nothing sample scored 0.2 beside a 0.4 and two samples without a verdict: left out, the
    baseline is 0.3 and the 0.2 gets a negative advantage; entered as zeros, the baseline would be
    0.15 and the 0.2 a positive one (the peer bug class). Through the collector's own filter and the
    learner's batch. Planted: ``_scored_groups`` keeping unscored members with reward 0."""
    from rlvr.collect.collector import Collector

    cfg = _cfg(tmp_path)
    with_verdict, without = [0.2, 0.4], [None, None]
    out = tmp_path / "c.jsonl"
    api.collect(cfg, str(out), prompts=1, quiet=True)
    from rlvr.trajectory import read_trajectory_groups

    (group, _), *_ = read_trajectory_groups(out)
    for t, r in zip(group.trajectories, [*with_verdict, *without]):
        t.reward, t.errors = r, ({} if r is not None else {"r": "timeout"})
    counts = {"samples/unscored": 0.0, "groups/partial": 0.0}
    collector = Collector.__new__(Collector)  # only its filter: no engine or pool is needed
    collector.cfg = cfg
    (kept,) = Collector._scored_groups(collector, [group], counts)
    assert counts == {"samples/unscored": 2.0, "groups/partial": 1.0}
    learner = Learner(cfg, load_model("tiny-random"), 0)
    batch, _ = learner.prepare_batch([kept])
    advantages = batch.advantages[:, 0] if batch.advantages.dim() == 2 else batch.advantages
    assert [round(float(a), 4) for a in advantages] == pytest.approx(_grpo(with_verdict), abs=1e-4)
    assert float(advantages[0]) < 0 < float(advantages[1])


def test_reward_errors_scored_zero_are_trained_on_and_still_reported(tmp_path: Path, learner_inputs) -> None:
    """Planted: ``rewards.on_error=zero`` ignored (errored groups dropped), or the error dropped from
    the trajectory once it is scored 0 (uncounted, absent from samples.jsonl)."""
    metrics, groups = _error_run(tmp_path, "zero")
    _check_error_counts(metrics, groups)
    trained_errors = 0
    for _, trajectories, samples in groups:
        assert all(t["reward"] == 0.0 for t in trajectories if t["errors"])
        if trajectories[0]["kept"]:  # the advantages are those of the rewards with the zeros
            expected = _grpo([t["reward"] for t in trajectories])
            assert [s["advantage"] for s in samples] == pytest.approx(expected, rel=1e-4, abs=1e-5)
            trained_errors += sum(bool(t["errors"]) for t in trajectories)
    received = [g for call in learner_inputs for g in call]
    with_errors = [g for g in received if any(g["errors"])]
    assert trained_errors > 0 and sum(sum(map(bool, g["errors"])) for g in with_errors) == trained_errors
    assert all(r == 0.0 for g in with_errors for r, e in zip(g["rewards"], g["errors"]) if e)


# ------------------------------------------------------------------------- 3. KL to the reference
def _k3(policy: torch.nn.Module, reference: torch.nn.Module, batch, max_new: int) -> tuple[float, float]:
    """k3 KL(policy ‖ reference) aggregated like the loss (token-mean), by hand; and the same with
    the two logprobs swapped (what an estimator called with its arguments reversed computes)."""
    logprobs = batch_logprobs(policy, batch, 4, 1.0)
    ref = batch_logprobs(reference, batch, 4, 1.0)
    weights = token_weights(batch.completion_mask, "token-mean", max_new)

    def k3(log_ratio: torch.Tensor) -> float:
        return float(((log_ratio.exp() - 1 - log_ratio) * weights).sum())

    return k3(ref - logprobs), k3(logprobs - ref)


def test_kl_loss_pulls_the_policy_toward_the_reference(tmp_path: Path) -> None:
    """Planted: the KL term's sign flipped in ``policy_update`` (``loss - kl_coef * kl``), or the
    estimator called with its arguments swapped (``kl_fn(ref, logprobs)``)."""
    cfg = _cfg(
        tmp_path,
        _reward("scaled_len", scale=0.0),  # constant rewards: zero advantages, only KL in the loss
        "algo.dynamic_sampling=false",
        "algo.kl_coef=0.5",
        "algo.kl_estimator=k3",
        "optim.lr=1e-3",
        "optim.warmup_steps=0",
        "train.steps=1",
    )
    run = Orchestrator(cfg, quiet=True)
    try:
        reference = load_model("tiny-random")  # loaded here, not taken from the learner
        noise = torch.Generator().manual_seed(0)
        with torch.no_grad():  # start the policy away from the reference
            for p in run.learner.model.parameters():
                p.add_(torch.randn(p.shape, generator=noise) * 0.03)
        collection = run.collector.collect()
        batch, _ = run.learner.prepare_batch(collection.kept)
        assert len(collection.kept) == 2 and float(batch.advantages.abs().max()) == 0.0
        before, swapped = _k3(run.learner.model, reference, batch, cfg.rollout.max_new_tokens)
        assert abs(swapped - before) > 0.1 * before  # the comparison can tell the two apart
        metrics = run.learner.update(collection.kept, collection.seen)
        after, _ = _k3(run.learner.model, reference, batch, cfg.rollout.max_new_tokens)
    finally:
        run.close()
    assert metrics["update/kl"] == pytest.approx(before, rel=1e-4)
    assert metrics["update/loss"] == pytest.approx(0.5 * before, rel=1e-4)  # + kl_coef · KL, nothing else
    assert after < 0.5 * before, (before, after)


# ------------------------------------------------------------------------- 4. frozen old logprobs
@pytest.mark.parametrize("extra", ["algo.epochs=2", "algo.minibatches=2"])
def test_old_logprobs_are_frozen_before_several_updates(tmp_path: Path, extra: str) -> None:
    """Planted: the old logprobs taken from the current policy at every minibatch (``old =
    logprobs.detach()`` whatever ``old_all`` holds): the ratio stays 1 and clipping never acts."""
    cfg = _cfg(tmp_path, extra, "optim.lr=1e-2", "optim.warmup_steps=0", "train.steps=1")
    api.train(cfg, quiet=True)
    metrics = _train_metrics(tmp_path)[1]
    assert metrics["groups/kept"] == 2.0
    assert metrics["update/clip_frac"] > 0.0
    assert metrics["update/ratio_max"] > 1.01  # exactly 1 if old logprobs followed the policy


# ------------------------------------------------------------------------- 5. per-group advantages
def test_advantages_are_computed_within_each_group(tmp_path: Path) -> None:
    """Planted: every completion pooled into one group for the estimator (``group_index`` all 0 in
    ``Learner.prepare_batch``)."""
    cfg = _cfg(
        tmp_path,
        _reward("constant_for_even"),  # group means differ; even-numbered examples' groups are constant
        "algo.dynamic_sampling=false",
        "rollout.prompts_per_step=4",
        "train.steps=1",
        "train.log_trajectories=true",
    )
    api.train(cfg, quiet=True)
    groups = list(_groups(tmp_path))
    assert len(groups) == 4
    means = {statistics.mean(t["reward"] for t in ts) for _, ts, _ in groups}
    constant = [ts for _, ts, _ in groups if len({t["reward"] for t in ts}) == 1]
    assert len(means) > 1 and constant, "groups must differ in mean, and one must be constant"
    for _, trajectories, samples in groups:
        expected = _grpo([t["reward"] for t in trajectories])
        assert [s["advantage"] for s in samples] == pytest.approx(expected, rel=1e-4, abs=1e-5)


# ------------------------------------------------------------------------- 6. temperature
@pytest.mark.parametrize("extra", [[], ["algo.epochs=2", "optim.lr=1e-9"]], ids=["on-policy", "two-epochs"])
def test_logprobs_are_recomputed_at_the_sampling_temperature(tmp_path: Path, extra: list[str]) -> None:
    """Planted: ``Learner.update`` passing 1.0 to ``policy_update`` instead of ``rollout.temperature``
    (sampler diff large), or the frozen old logprobs computed at temperature 1 (ratio far from 1)."""
    cfg = _cfg(tmp_path, "rollout.temperature=0.7", "train.steps=1", *extra)
    api.train(cfg, quiet=True)
    metrics = _train_metrics(tmp_path)[1]
    assert metrics["groups/kept"] > 0
    # at temperature 1 the trainer's logprobs differ from the sampler's by about 0.05 per token
    assert metrics["update/sampler_logprob_diff"] < 1e-4
    assert metrics["update/ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert metrics["update/ratio_max"] == pytest.approx(1.0, abs=1e-3)


# ------------------------------------------------------------------------- 7. sampled evaluation
def test_sampled_eval_scores_each_problem_with_its_own_samples(tmp_path: Path) -> None:
    """Planted: the per-problem slice of ``evaluate`` off by one sample
    (``correct[i * samples + 1 : (i + 1) * samples + 1]``) or taken by problem index
    (``correct[i : i + samples]``)."""
    base = ["data.eval_size=8", "eval.samples=3", "eval.pass_k=[1,2,3]", "eval.group_by=[]"]
    _, held_out = build_datasets(_cfg(tmp_path, *base).data)
    target = held_out[3].id  # right for every sample of this problem, wrong for all others
    cfg = _cfg(
        tmp_path,
        *base,
        _reward("correct_only_for", example_id=target),
        "rollout.max_batch_sequences=6",  # the sampled eval runs two problems per generate call
        "train.steps=0",
    )
    results = api.train(cfg, quiet=True)["after"]
    # one problem of 8 is always solved, the others never: 1/8 whatever k
    for key in ("eval/pass@1", "eval/pass@2", "eval/pass@3", "eval/mean@3", "eval/accuracy"):
        assert results[key] == pytest.approx(1 / 8), key
    records = _log(tmp_path, "eval_samples.jsonl")
    assert [r["id"] for r in records if r["correct"]] == [target]


# ------------------------------------------------------------------------- micro-batches
@pytest.mark.parametrize("loss_agg", ["token-mean", "seq-mean-token-mean"])
def test_micro_batches_add_up_to_the_whole_minibatch(tmp_path: Path, loss_agg: str) -> None:
    """The gradient of an update does not depend on how its rows are cut into micro-batches
    (replaces a test that split a weighted sum in two by hand, which could not fail).

    Planted: the aggregation weights computed per micro-batch (``token_weights(micro.completion_mask,
    ...)``) instead of once per minibatch."""
    extra = [f"algo.loss_agg={loss_agg}", "optim.lr=1e-3", "optim.warmup_steps=0", "train.steps=1"]
    whole = _cfg(tmp_path, *extra, "algo.micro_batch_size=8")
    run = Orchestrator(whole, quiet=True)
    try:
        collection = run.collector.collect()
        assert len(collection.kept) == 2  # 8 rows: one micro-batch, or 3 + 3 + 2 splitting a group
        sliced = copy.deepcopy(whole)
        sliced.algo.micro_batch_size = 3
        other = Learner(sliced, load_model("tiny-random"), run.learner.pad_id)
        for a, b in zip(run.learner.model.parameters(), other.model.parameters()):
            assert torch.equal(a, b)
        m_whole = run.learner.update(collection.kept, collection.seen)
        m_sliced = other.update(copy.deepcopy(collection.kept), copy.deepcopy(collection.seen))
        for key in ("update/loss", "update/grad_norm", "update/entropy", "update/clip_frac"):
            assert m_sliced[key] == pytest.approx(m_whole[key], rel=1e-4, abs=1e-7), key
        grads = [(a.grad, b.grad) for a, b in zip(run.learner.model.parameters(), other.model.parameters())]
        assert all(torch.allclose(a, b, rtol=1e-3, atol=1e-7) for a, b in grads if a is not None)
    finally:
        run.close()
