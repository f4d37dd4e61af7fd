"""The algorithm zoo's second wave: GRIP, A*-PO (with its offline V* pass) and C3PO's token budget.

Each against numbers worked out by hand (the arithmetic is in the comments) on small batches, with
all-equal groups, groups of one, empty masks and bad parameters; then each through a real tiny run.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from tiny import TINY_RUN

from rlvr import api
from rlvr.algo import (
    ADVANTAGE_ESTIMATORS,
    POLICY_LOSSES,
    astar_po_advantages,
    astar_po_loss,
    c3po_advantages,
    grip_advantages,
    grpo_advantages,
    token_weights,
)
from rlvr.algo.astar_po import offline_values, read_values, soft_value, write_values
from rlvr.algo.c3po import budget_rows
from rlvr.algo.grip import relative_importance
from rlvr.config import load_config
from rlvr.log import read_jsonl
from rlvr.train.learn.estimate import kl_token_rewards, sampled_kl

E = math.e


def _idx(*sizes: int) -> torch.Tensor:
    return torch.arange(len(sizes)).repeat_interleave(torch.tensor(sizes, dtype=torch.long))


def _close(a: torch.Tensor, b: list[float], tol: float = 1e-4) -> None:
    assert a.shape == (len(b),), (a.shape, b)
    assert a.tolist() == pytest.approx(b, abs=tol)


def test_the_three_methods_are_registered() -> None:
    assert ADVANTAGE_ESTIMATORS.get("grip") is grip_advantages
    assert ADVANTAGE_ESTIMATORS.get("astar_po") is astar_po_advantages
    assert ADVANTAGE_ESTIMATORS.get("c3po") is c3po_advantages
    assert POLICY_LOSSES.get("astar_po") is astar_po_loss


# ----------------------------------------------------------------------------------------- GRIP
def test_grip_weights_by_hand() -> None:
    # group 0: rewards 1, 0 at temperature 1: softmax = e/(1+e), 1/(1+e) = .731059, .268941;
    # times n=2: 1.462117, 0.537883 (mean 1). group 1: all equal -> 1, 1. group 2: one path -> 1
    w = relative_importance(torch.tensor([1.0, 0.0, 2.0, 2.0, 5.0]), _idx(2, 2, 1), 1.0)
    _close(w, [2 * E / (1 + E), 2 / (1 + E), 1.0, 1.0, 1.0])
    # temperature 0.5: r/T = 2, 0: softmax e²/(1+e²) = .880797 -> weights 1.761594, 0.238406
    w = relative_importance(torch.tensor([1.0, 0.0]), _idx(2), 0.5)
    _close(w, [1.761594, 0.238406])


def test_grip_advantages_by_hand() -> None:
    rewards, groups = torch.tensor([1.0, 0.0, 2.0, 2.0, 5.0]), _idx(2, 2, 1)
    # group 0: GRPO ±0.5/std, std (n−1) = sqrt(0.5) -> ±0.707107; times the weights above:
    # 0.707107 · 1.462117 = 1.033873, −0.707107 · 0.537883 = −0.380341
    # group 1 (all equal) and group 2 (one path): GRPO 0, so 0 whatever the weight
    _close(grip_advantages(rewards, groups), [1.033873, -0.380341, 0.0, 0.0, 0.0])
    # unnormalised: ±0.5 times the weights: 0.731059, −0.268941
    _close(grip_advantages(rewards, groups, normalize_std=False), [0.731059, -0.268941, 0.0, 0.0, 0.0])
    # a very large temperature is GRPO's uniform draw
    _close(grip_advantages(rewards, groups, temperature=1e6), grpo_advantages(rewards, groups).tolist())


def test_grip_keeps_large_reward_gaps_finite_and_empty_batches_empty() -> None:
    # 1000/0.01 = 1e5: exp overflows unless the group max is taken out first; the weights are 2, 0
    w = relative_importance(torch.tensor([1000.0, 0.0]), _idx(2), 0.01)
    _close(w, [2.0, 0.0])
    assert grip_advantages(torch.zeros(0), torch.zeros(0, dtype=torch.long)).shape == (0,)


@pytest.mark.parametrize("temperature", [0.0, -1.0])
def test_grip_rejects_a_bad_temperature(temperature: float) -> None:
    with pytest.raises(ValueError, match="temperature"):
        grip_advantages(torch.tensor([1.0, 0.0]), _idx(2), temperature=temperature)


# ------------------------------------------------------------------------------------ A*-PO: V*
def test_soft_value_by_hand() -> None:
    # β = 1: log((e^0 + e^1)/2) = log(1.859141) = 0.620115
    assert soft_value([0.0, 1.0], 1.0) == pytest.approx(0.620115, abs=1e-6)
    # β = 0.1: 0.1 · log((1 + e^10)/2) = 0.1 · (10 + log((e^-10 + 1)/2)) = 0.930690: near the max
    assert soft_value([0.0, 1.0], 0.1) == pytest.approx(0.930690, abs=1e-6)
    # β large: the mean; all equal: that value at any β; one sample: its reward
    assert soft_value([0.0, 1.0], 1e6) == pytest.approx(0.5, abs=1e-6)
    assert soft_value([0.3, 0.3, 0.3], 0.01) == pytest.approx(0.3, abs=1e-9)
    assert soft_value([0.7], 0.5) == pytest.approx(0.7, abs=1e-9)
    # β small: no overflow, the max
    assert soft_value([0.0, 1000.0], 1e-3) == pytest.approx(1000.0 - 1e-3 * math.log(2), abs=1e-6)
    with pytest.raises(ValueError, match="beta"):
        soft_value([1.0], 0.0)
    with pytest.raises(ValueError, match="at least one"):
        soft_value([], 1.0)


class _Completion:
    def __init__(self, prompt_index: int, text: str) -> None:
        self.prompt_index, self.text, self.finish_reason = prompt_index, text, "stop"
        self.logprobs, self.self_certainty = [-1.0], None

    def __len__(self) -> int:
        return 1


def _stub_collector(texts: dict[int, list[str]], ids: list[str]) -> SimpleNamespace:
    """A collector whose engine returns, for prompt i (its prompt ids are [i]), completions with
    ``texts[i]`` and whose reward pool reads a completion's text as its reward ("err": an error)."""
    calls: list[tuple[list[list[int]], object]] = []

    def generate(prompts, params):
        calls.append((prompts, params))
        return [[_Completion(k, t) for t in texts[p[0]][: params.n]] for k, p in enumerate(prompts)]

    def score(completions, examples, lengths, finish, group_sizes=None, **_):
        return [SimpleNamespace(total=None if c == "err" else float(c)) for c in completions]

    cfg = SimpleNamespace(
        rollout=SimpleNamespace(temperature=0.7, top_p=0.9, max_new_tokens=5, prompts_per_step=4)
    )
    return SimpleNamespace(
        cfg=cfg,
        engine=SimpleNamespace(generate=generate, calls=calls),
        pool=SimpleNamespace(score=score),
        self_certainty=False,
        train_prompts=[[i] for i in range(len(ids))],
        train_examples=[SimpleNamespace(id=x) for x in ids],
    )


def test_offline_values_sample_the_engine_and_score_each_prompt() -> None:
    collector = _stub_collector(
        {0: ["0", "1"], 1: ["1", "err"], 2: ["err", "err"], 3: ["2", "2"]}, ["a", "b", "", "d"]
    )
    values, unscored = offline_values(collector, samples=2, beta=1.0, prompts_per_call=3)
    # a: rewards 0, 1 -> log((1+e)/2) = 0.620115; b: 1 scored (the error left out) -> 1;
    # the third (no id: "index:2"): nothing scored -> no value; d: all equal 2 -> 2
    assert values == pytest.approx({"a": 0.620115, "b": 1.0, "d": 2.0}, abs=1e-6)
    assert unscored == ["index:2"]
    # two engine calls (3 prompts, then 1), each for 2 samples at the rollout's sampling settings
    assert [p for p, _ in collector.engine.calls] == [[[0], [1], [2]], [[3]]]
    params = collector.engine.calls[0][1]
    assert (params.n, params.temperature, params.top_p, params.max_new_tokens) == (2, 0.7, 0.9, 5)


def test_offline_values_reject_bad_parameters() -> None:
    collector = _stub_collector({0: ["1"]}, ["a"])
    with pytest.raises(ValueError, match="samples"):
        offline_values(collector, samples=0, beta=1.0)
    with pytest.raises(ValueError, match="beta"):
        offline_values(collector, samples=1, beta=-1.0)
    assert collector.engine.calls == []  # nothing sampled before the parameters were checked


def _values_file(tmp_path: Path, values: dict[str, float], name: str = "v.jsonl") -> Path:
    path = tmp_path / name
    write_values(path, values, beta=0.5, samples=4)
    return path


def test_astar_po_advantage_is_reward_minus_v_star(tmp_path: Path) -> None:
    path = _values_file(tmp_path, {"a": 0.5, "b": -0.25})
    assert read_values(path) == {"a": 0.5, "b": -0.25}
    # 1 − 0.5 = 0.5; 0 − (−0.25) = 0.25; 0.5 − 0.5 = 0 (groups play no part: one sample per prompt)
    adv = astar_po_advantages(torch.tensor([1.0, 0.0, 0.5]), _idx(1, 1, 1), ["a", "b", "a"], str(path))
    _close(adv, [0.5, 0.25, 0.0])
    # a changed file is read again
    write_values(path, {"a": 2.0, "b": 0.0}, beta=0.5, samples=4)
    os.utime(path, ns=(1, 1))
    _close(astar_po_advantages(torch.tensor([1.0]), _idx(1), ["a"], str(path)), [-1.0])


def test_astar_po_names_the_file_and_the_id_it_lacks(tmp_path: Path) -> None:
    path = _values_file(tmp_path, {"a": 0.5})
    with pytest.raises(ValueError, match=rf"{path.name}.*'zz'"):
        astar_po_advantages(torch.tensor([1.0, 0.0]), _idx(1, 1), ["a", "zz"], str(path))
    with pytest.raises(ValueError, match="nope.jsonl"):
        astar_po_advantages(torch.tensor([1.0]), _idx(1), ["a"], str(tmp_path / "nope.jsonl"))
    with pytest.raises(ValueError, match="values_path"):
        astar_po_advantages(torch.tensor([1.0]), _idx(1), ["a"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"example_id": "a", "value": 1.0}\n{"example_id": "b"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2"):
        read_values(bad)
    bad.write_text('{"example_id": "a", "value": 1.0}\n{"example_id": "a", "value": 2.0}\n')
    with pytest.raises(ValueError, match="twice"):
        read_values(bad)


# ---------------------------------------------------------------------------------- A*-PO: loss
def _loss_batch():
    logprobs = torch.tensor([[-1.0, -2.0, 9.0], [-1.0, 0.0, 0.0], [-3.0, -3.0, -3.0]], requires_grad=True)
    sampling = torch.tensor([[-1.5, -2.5, 0.0], [-0.5, 0.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])  # row 2: no tokens
    return logprobs, sampling, mask


def test_astar_po_loss_by_hand() -> None:
    logprobs, sampling, mask = _loss_batch()
    adv = torch.tensor([0.2, -1.0, 3.0])
    loss, stats = astar_po_loss(logprobs, torch.zeros(3, 3), adv, mask, sampling_logprobs=sampling, beta=0.5)
    # row 0: Σ log π − log π_s = 0.5 + 0.5 = 1, ψ = 0.5 · 1 = 0.5, residual 0.5 − 0.2 = 0.3, square 0.09,
    #        gradient per token 2 · 0.5 · 0.3 = 0.3
    # row 1: Σ = −1 + 0.5 = −0.5, ψ = −0.25, residual −0.25 + 1 = 0.75, square 0.5625, gradient 0.75
    # row 2: no tokens: no loss, no gradient
    assert loss.flatten().tolist() == pytest.approx(
        [0.09, 0.09, 0.0, 0.5625, 0.0, 0.0, 0.0, 0.0, 0.0], abs=1e-6
    )
    loss.sum().backward()
    assert logprobs.grad.flatten().tolist() == pytest.approx(
        [0.3, 0.3, 0.0, 0.75, 0.0, 0.0, 0, 0, 0], abs=1e-6
    )
    # the mean over rows with tokens: (0.09 + 0.5625)/2 = 0.32625; log-ratios (1 − 0.5)/2 = 0.25
    assert stats["astar_po_sq_residual"] == pytest.approx(0.32625)
    assert stats["astar_po_log_ratio"] == pytest.approx(0.25)


def test_astar_po_loss_is_the_gradient_of_the_mean_squared_residual() -> None:
    # with seq-mean-token-sum (mask / B) the aggregated gradient is that of mean_i (ψ_i − A_i)²
    logprobs, sampling, mask = _loss_batch()
    adv = torch.tensor([0.2, -1.0, 3.0])
    loss, _ = astar_po_loss(logprobs, torch.zeros(3, 3), adv, mask, sampling_logprobs=sampling, beta=0.5)
    (loss * token_weights(mask, "seq-mean-token-sum")).sum().backward()
    got = logprobs.grad.clone()
    logprobs.grad = None
    psi = 0.5 * ((logprobs - sampling) * mask).sum(dim=1)
    ((psi - adv) ** 2).mean().backward()
    assert got.flatten().tolist() == pytest.approx(logprobs.grad.flatten().tolist(), abs=1e-6)


def test_astar_po_loss_takes_per_token_advantages_and_the_old_anchor() -> None:
    logprobs, sampling, mask = _loss_batch()
    # per-token advantages: their mean over valid tokens, (0.1 + 0.3)/2 = 0.2 and −1: as above
    adv = torch.tensor([[0.1, 0.3, 99.0], [-1.0, 5.0, 5.0], [3.0, 3.0, 3.0]])
    loss, _ = astar_po_loss(logprobs, torch.zeros(3, 3), adv, mask, sampling_logprobs=sampling, beta=0.5)
    assert loss[:2, 0].tolist() == pytest.approx([0.09, 0.5625], abs=1e-6)
    # anchor old: the old log-probs replace the sampling ones (here the same numbers: same loss)
    old, _ = astar_po_loss(logprobs, sampling, adv, mask, beta=0.5, anchor="old")
    assert old.flatten().tolist() == pytest.approx(loss.flatten().tolist(), abs=1e-6)


def test_astar_po_with_the_in_reward_kl_regresses_onto_the_reference_log_ratio() -> None:
    """The trainer's in-reward KL (kl_coef = β) turns the loss's log-ratio to the sampling policy
    into the paper's log-ratio to the reference: ψ − A = β log π/π_ref − (r − V*)."""
    beta = 0.5
    logprobs, sampling, mask = _loss_batch()
    ref = torch.tensor([[-1.0, -1.0, 0.0], [-2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    rewards, v_star = torch.tensor([1.0, 0.0, 1.0]), torch.tensor([0.4, 0.6, 0.5])
    # what the learner does: the sampled k1 KL as per-token rewards, summed into the sequence reward
    token_rewards = kl_token_rewards(sampled_kl(sampling, ref, mask), mask, beta)
    advantages = rewards + token_rewards.sum(dim=1) - v_star
    loss, _ = astar_po_loss(logprobs, ref, advantages, mask, sampling_logprobs=sampling, beta=beta)
    exact = beta * ((logprobs - ref) * mask).sum(dim=1) - (rewards - v_star)
    # row 0: β Σ log π/π_ref = 0.5 · (0 + −1) = −0.5; r − V* = 0.6; residual −1.1, square 1.21
    assert exact[0].item() == pytest.approx(-1.1)
    assert loss[:2, 0].tolist() == pytest.approx((exact[:2] ** 2).tolist(), abs=1e-6)


def test_astar_po_loss_rejects_bad_parameters() -> None:
    logprobs, sampling, mask = _loss_batch()
    adv = torch.zeros(3)
    with pytest.raises(ValueError, match="beta"):
        astar_po_loss(logprobs, sampling, adv, mask, sampling_logprobs=sampling, beta=0.0)
    with pytest.raises(ValueError, match="anchor"):
        astar_po_loss(logprobs, sampling, adv, mask, sampling_logprobs=sampling, anchor="ref")
    with pytest.raises(ValueError, match="sampling_logprobs"):
        astar_po_loss(logprobs, sampling, adv, mask)


# ---------------------------------------------------------------------------------------- C3PO
def test_c3po_keeps_whole_groups_within_the_budget_by_hand() -> None:
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 3.0])
    groups = _idx(2, 2, 2, 1)
    lengths = torch.tensor([5, 5, 20, 20, 4, 6, 3])  # group tokens: 10, 40, 10, 3
    # budget 25, first fit in batch order: g0 (10, used 10), g1 (40 > 15 left: skipped),
    # g2 (10, used 20), g3 (3, used 23)
    assert budget_rows(lengths, groups, 25).tolist() == [True, True, False, False, True, True, True]
    # kept groups: GRPO ±0.707107 (0/1 rewards, std sqrt(0.5)); g1 zeroed; g3 one sample: 0
    _close(
        c3po_advantages(rewards, groups, lengths, token_budget=25),
        [0.707107, -0.707107, 0.0, 0.0, -0.707107, 0.707107, 0.0],
    )
    # budget 20: g0 (10), g1 skipped, g2 (10) fills it exactly and is kept, g3 (3) no longer fits
    assert budget_rows(lengths, groups, 20).tolist() == [True, True, False, False, True, True, False]
    # a budget that fits everything is GRPO; exactly the total (63) still fits
    _close(
        c3po_advantages(rewards, groups, lengths, token_budget=63), grpo_advantages(rewards, groups).tolist()
    )
    # a budget no group fits: no signal at all
    _close(c3po_advantages(rewards, groups, lengths, token_budget=2), [0.0] * 7)


@pytest.mark.parametrize("budget", [None, 0, -5, 2.5, True])
def test_c3po_rejects_a_bad_budget(budget) -> None:
    with pytest.raises(ValueError, match="token_budget"):
        c3po_advantages(torch.tensor([1.0, 0.0]), _idx(2), torch.tensor([1, 1]), token_budget=budget)


# ------------------------------------------------------------------------------------ tiny runs
def _run(tmp_path: Path, *extra: str) -> list[dict]:
    overrides = [
        *TINY_RUN,
        "algo.dynamic_sampling=false",
        "train.steps=1",
        "train.log_trajectories=true",
        "eval.before=false",
        f"output_dir={tmp_path}",
        "name=run",
        *extra,
    ]
    api.train(load_config(None, overrides), quiet=True)
    return read_jsonl(tmp_path / "run" / "trajectories.jsonl")


def _logged(rows: list[dict]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rewards = torch.tensor([r["reward"] for r in rows])
    groups = torch.tensor([r["group"] for r in rows])
    lengths = torch.tensor([sum(len(s["token_ids"]) for s in r["segments"]) for r in rows])
    return rewards, groups, lengths


def test_grip_in_a_run(tmp_path: Path) -> None:
    rows = _run(tmp_path, "algo.advantage=grip", "algo.advantage_params={temperature: 0.01}")
    rewards, groups, _ = _logged(rows)
    expected = grip_advantages(rewards, groups, temperature=0.01)
    assert (expected - grpo_advantages(rewards, groups)).abs().max() > 0.01, "weights invisible"
    assert [r["advantage"] for r in rows] == pytest.approx(expected.tolist(), abs=1e-4)


def test_c3po_in_a_run(tmp_path: Path) -> None:
    # tiny-random never stops: every completion has 8 tokens, a group of 4 has 32; budget 40 keeps one
    rows = _run(tmp_path, "algo.advantage=c3po", "algo.advantage_params={token_budget: 40}")
    rewards, groups, lengths = _logged(rows)
    keep = budget_rows(lengths, groups, 40)
    assert 0 < int(keep.sum()) < len(rows), "the budget kept all or nothing: the test checks too little"
    expected = torch.where(keep, grpo_advantages(rewards, groups), torch.zeros(len(rows)))
    assert expected.abs().max() > 0.01, "no signal in the kept group: the test checks too little"
    assert [r["advantage"] for r in rows] == pytest.approx(expected.tolist(), abs=1e-4)


def test_astar_po_offline_pass_then_a_run(tmp_path: Path) -> None:
    """Stage 1 on the tiny model writes a V* for every training prompt; stage 2 (the preset's
    settings: one sample per prompt, in-reward KL at kl_coef = β) trains on r − V*."""
    from rlvr.algo.astar_po import collect_values

    base = [*TINY_RUN, "rollout.group_size=1", "rollout.prompts_per_step=4"]
    values_path = tmp_path / "v.jsonl"
    summary = collect_values(load_config(None, base), values_path, samples=3, beta=0.1)
    values = read_values(values_path)
    rows = [json.loads(line) for line in values_path.read_text().splitlines()]
    assert summary["valued"] == summary["prompts"] == len(values) > 0 and summary["unscored"] == []
    assert {(r["beta"], r["samples"]) for r in rows} == {(0.1, 3)}
    run = tmp_path / "stage2"
    run.mkdir()
    logged = _run(
        run,
        "rollout.group_size=1",
        "rollout.prompts_per_step=4",
        "algo.advantage=astar_po",
        f"algo.advantage_params={{values_path: '{values_path}'}}",
        "algo.loss=astar_po",
        "algo.loss_params={beta: 0.1}",
        "algo.loss_agg=seq-mean-token-sum",
        "algo.kl_coef=0.1",
        "algo.kl_in_reward=true",
    )
    assert len(logged) == 4 and len({r["group"] for r in logged}) == 4
    # step 1: the policy is the reference, so the in-reward KL is ~0 and the advantage r − V*
    expected = [r["reward"] - values[r["example_id"]] for r in logged]
    assert any(abs(e) > 1e-3 for e in expected)
    assert [r["advantage"] for r in logged] == pytest.approx(expected, abs=1e-3)


def test_astar_po_without_a_readable_values_file_is_refused_before_any_model_loads(tmp_path: Path) -> None:
    from rlvr.errors import RlvrError
    from rlvr.train.learn.estimate import check_algorithm

    with pytest.raises(
        RlvrError, match=r"values_path: astar_po: cannot read the V\* values file astar_po_values"
    ):
        check_algorithm(load_config("astar_po"))  # the preset's default path, not written yet
    with pytest.raises(RlvrError, match="values_path: the 'astar_po' estimator reads each prompt's V"):
        check_algorithm(load_config("astar_po", ["algo.advantage_params={values_path: ''}"]))
    bad = tmp_path / "v.jsonl"
    bad.write_text('{"example_id": "a", "value": 0.5}\nnot json\n')
    with pytest.raises(RlvrError, match=r"values_path: astar_po: .*v.jsonl:2: not a values row"):
        check_algorithm(load_config("astar_po", [f"algo.advantage_params={{values_path: '{bad}'}}"]))
