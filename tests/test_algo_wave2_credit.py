"""The algorithm zoo's second wave, credit assignment: VAPO, TEMPO, TRePO.

Each estimator against numbers worked out by hand on a small batch (all-equal groups, a group of one,
different lengths, empty completions, bad parameters); TRePO's theorem checked exactly on a problem
small enough to enumerate; then the trainer wiring: the ``token_ids`` context (multi-turn ledgers
included), every logged advantage of a real run, and VAPO's value warm-up in real runs.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from safetensors.torch import load_file
from tiny import TINY_RUN

from rlvr import api
from rlvr.algo import ADVANTAGE_ESTIMATORS, tempo_advantages, trepo_advantages, vapo_advantages
from rlvr.algo.gae import gae_advantages, whiten
from rlvr.algo.tempo import prefix_values
from rlvr.algo.vapo import length_adaptive_lambda
from rlvr.config import load_config
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl
from rlvr.models import load_model
from rlvr.train.learn.learner import Learner
from rlvr.trajectory import CONTEXT, SAMPLED, Segment, Trajectory, TrajectoryGroup

NAN = float("nan")


def _idx(*sizes: int) -> torch.Tensor:
    return torch.arange(len(sizes)).repeat_interleave(torch.tensor(sizes))


def _close(a: torch.Tensor, b: list, tol: float = 1e-4) -> None:
    assert torch.allclose(a.float(), torch.tensor(b, dtype=torch.float32), atol=tol), (a.tolist(), b)


# ------------------------------------------------------------------------------------------- VAPO
# one completion of 3 tokens, values [.5, .2, .1], reward 1 on the last token (gamma 1):
# TD errors δ2 = 1 − .1 = .9, δ1 = .1 − .2 = −.1, δ0 = .2 − .5 = −.3
V3 = torch.tensor([[0.5, 0.2, 0.1]])


def test_vapo_decouples_the_critics_lambda_from_the_policys() -> None:
    adv, targets = vapo_advantages(
        torch.tensor([1.0]), _idx(1), V3, torch.tensor([3]), lam_policy=0.5, normalize=False
    )
    # λ .5: A2 = .9, A1 = −.1 + .5·.9 = .35, A0 = −.3 + .5·.35 = −.125
    _close(adv, [[-0.125, 0.35, 0.9]])
    # λ_critic 1 (default): the returns are the Monte-Carlo return, 1 at every token
    _close(targets["returns"], [[1.0, 1.0, 1.0]])
    # λ_critic .5 moves only the returns: A(.5) + V = [−.125 + .5, .35 + .2, .9 + .1]
    adv_b, targets_b = vapo_advantages(
        torch.tensor([1.0]), _idx(1), V3, torch.tensor([3]), lam_policy=0.5, lam_critic=0.5, normalize=False
    )
    assert torch.equal(adv_b, adv)
    _close(targets_b["returns"], [[0.375, 0.55, 1.0]])


def test_length_adaptive_lambda_per_sequence() -> None:
    # α .05: 1 − 1/(.05·l) = 1 − 20/l: l 0 → 0 (empty), 10 → −1 → 0, 20 → 0, 40 → .5, 100 → .8
    _close(length_adaptive_lambda(torch.tensor([0, 10, 20, 40, 100]), 0.05), [0.0, 0.0, 0.0, 0.5, 0.8])
    # α 1, two lengths in one batch: l 3 → λ 2/3, l 2 → λ 1/2, l 0 → no tokens
    values = torch.tensor([[0.5, 0.2, 0.1], [0.4, 0.3, NAN], [NAN, NAN, NAN]])  # padding may be anything
    adv, targets = vapo_advantages(
        torch.tensor([1.0, 0.0, 5.0]), _idx(2, 1), values, torch.tensor([3, 2, 0]), alpha=1.0, normalize=False
    )
    # row 0: A2 = .9, A1 = −.1 + (2/3)·.9 = .5, A0 = −.3 + (2/3)·.5 = 1/30
    # row 1 (reward 0): δ1 = 0 − .3 = −.3, δ0 = .3 − .4 = −.1; A1 = −.3, A0 = −.1 + .5·(−.3) = −.25
    _close(adv, [[1 / 30, 0.5, 0.9], [-0.25, -0.3, 0.0], [0.0, 0.0, 0.0]])
    # λ_critic 1: returns = reward on every token; the empty row has none
    _close(targets["returns"], [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    # a fixed λ_policy ignores α and length: row 0 at λ .5 is the first test's
    adv_fixed, _ = vapo_advantages(
        torch.tensor([1.0, 0.0, 5.0]),
        _idx(2, 1),
        values,
        torch.tensor([3, 2, 0]),
        lam_policy=0.5,
        normalize=False,
    )
    _close(adv_fixed[0:1], [[-0.125, 0.35, 0.9]])


def test_vapo_with_equal_lambdas_is_gae() -> None:
    gen = torch.Generator().manual_seed(0)
    values = torch.rand(4, 5, generator=gen)
    rewards, lengths = torch.tensor([1.0, 0.0, 0.3, 1.0]), torch.tensor([5, 3, 1, 4])
    kl = -0.01 * torch.rand(4, 5, generator=gen)
    for normalize in (True, False):
        adv, targets = vapo_advantages(
            rewards,
            _idx(4),
            values,
            lengths,
            lam_policy=0.9,
            lam_critic=0.9,
            token_rewards=kl,
            normalize=normalize,
        )
        ref_adv, ref_targets = gae_advantages(
            rewards, _idx(4), values, lengths, lam=0.9, token_rewards=kl, normalize=normalize
        )
        assert torch.allclose(adv, ref_adv, atol=1e-6)
        assert torch.allclose(targets["returns"], ref_targets["returns"], atol=1e-6)
    # default normalize whitens over the valid tokens only
    raw, _ = vapo_advantages(rewards, _idx(4), values, lengths, alpha=0.5, normalize=False)
    mask = (torch.arange(5)[None, :] < lengths[:, None]).float()
    adv, _ = vapo_advantages(rewards, _idx(4), values, lengths, alpha=0.5)
    assert torch.allclose(adv, whiten(raw, mask), atol=1e-6)


def test_vapo_refuses_bad_parameters() -> None:
    args = (torch.tensor([1.0]), _idx(1), V3, torch.tensor([3]))
    for kwargs, name in [
        ({"alpha": 0.0}, "alpha"),
        ({"lam_critic": 1.5}, "lam_critic"),
        ({"lam_policy": -0.1}, "lam_policy"),
        ({"gamma": 2.0}, "gamma"),
    ]:
        with pytest.raises(ValueError, match=name):
            vapo_advantages(*args, **kwargs)


def test_value_warmup_needs_a_trained_critic() -> None:
    with pytest.raises(RlvrError, match="warmup_steps"):
        load_config(None, [*TINY_RUN, "algo.critic.warmup_steps=2"])  # no critic
    with pytest.raises(RlvrError, match="vf_coef"):
        load_config(
            None, [*TINY_RUN, "algo.critic.kind=head", "algo.critic.vf_coef=0", "algo.critic.warmup_steps=2"]
        )


@pytest.mark.parametrize("kind", ["head", "separate"])
def test_value_warmup_trains_the_critic_alone_in_a_run(tmp_path, kind: str) -> None:
    """Three steps, two of warm-up: the policy's weights are the starting ones after steps 1 and 2 and
    move at step 3; the critic's move at step 2 already; the metrics say which steps were warm-up."""
    overrides = [
        *TINY_RUN,
        "algo.advantage=vapo",
        f"algo.critic.kind={kind}",
        "algo.critic.warmup_steps=2",
        "algo.dynamic_sampling=false",
        "optim.lr=1e-3",
        "optim.warmup_steps=0",
        "train.steps=3",
        "train.save_every=1",
        "train.keep_checkpoints=null",
        "eval.before=false",
        "data.eval_size=0",
        f"output_dir={tmp_path}",
        "name=run",
    ]
    api.train(load_config(None, overrides), quiet=True)
    rows = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if r["phase"] == "train"]
    assert [r["critic/warmup"] for r in rows] == [1.0, 1.0, 0.0]
    ckpt = tmp_path / "run" / "checkpoints"
    policy = [load_file(ckpt / f"step-00000{s}" / "model" / "model.safetensors") for s in (1, 2, 3)]
    start = load_model("tiny-random").state_dict()
    for name, tensor in policy[1].items():
        assert torch.equal(tensor, policy[0][name]) and torch.equal(tensor, start[name]), name
    assert any(not torch.equal(policy[2][n], policy[1][n]) for n in policy[1]), "the policy never moved"
    critic = [
        torch.load(ckpt / f"step-00000{s}" / "trainer_state.pt", weights_only=False)["critic"]["weights"]
        for s in (1, 2)
    ]
    assert any(not torch.equal(critic[1][n], critic[0][n]) for n in critic[0]), "the critic never moved"


# ------------------------------------------------------------------------------------------ TEMPO
# one group of four: tokens [1,2,3] r 1, [1,2,4] r 0, [1,5,6] r 1, [7] r 0 (a shorter one)
IDS = torch.tensor([[1, 2, 3], [1, 2, 4], [1, 5, 6], [7, 0, 0]])
LENS = torch.tensor([3, 3, 3, 1])
R4 = torch.tensor([1.0, 0.0, 1.0, 0.0])


def test_tempo_hand_values() -> None:
    # node values: root (all) .5; [1] (rows 0-2) 2/3; [1,2] (rows 0,1) .5; [1,5] 1; [7] 0; leaves = own r.
    # row 0: R − V(root) = .5; TD = [2/3 − .5, .5 − 2/3, 1 − .5] = [1/6, −1/6, .5] → [2/3, 1/3, 1]
    # row 1: −.5 + [1/6, −1/6, 0 − .5] → [−1/3, −2/3, −1]
    # row 2: .5 + [1/6, 1 − 2/3, 1 − 1] → [2/3, 5/6, 1/2]
    # row 3: −.5 + [0 − .5] → [−1], then padding
    raw = [[2 / 3, 1 / 3, 1.0], [-1 / 3, -2 / 3, -1.0], [2 / 3, 5 / 6, 0.5], [-1.0, 0.0, 0.0]]
    _close(tempo_advantages(R4, _idx(4), IDS, LENS, normalize_std=False), raw)
    # with the group's std (unbiased, of [1,0,1,0]: sqrt(1/3)) dividing both terms
    std = math.sqrt(1 / 3)
    _close(tempo_advantages(R4, _idx(4), IDS, LENS), [[v / std for v in row] for row in raw], tol=1e-3)
    # per-row lists give the same as the padded tensor
    lists = [[1, 2, 3], [1, 2, 4], [1, 5, 6], [7]]
    assert torch.equal(tempo_advantages(R4, _idx(4), lists, LENS), tempo_advantages(R4, _idx(4), IDS, LENS))


def test_tempo_is_grpo_off_branches_and_with_coef_zero() -> None:
    # both share [4, 4] and branch at the third token: TD 0 on the first two (GRPO's ±.5), ±.5 at the third
    ids, lens, r = torch.tensor([[4, 4, 1], [4, 4, 2]]), torch.tensor([3, 3]), torch.tensor([1.0, 0.0])
    _close(
        tempo_advantages(r, _idx(2), ids, lens, normalize_std=False), [[0.5, 0.5, 1.0], [-0.5, -0.5, -1.0]]
    )
    # coef 0 is GRPO on every token
    grpo = ADVANTAGE_ESTIMATORS.get("grpo")(R4, _idx(4))
    expected = torch.where(torch.arange(3)[None, :] < LENS[:, None], grpo[:, None], torch.tensor(0.0))
    assert torch.allclose(tempo_advantages(R4, _idx(4), IDS, LENS, coef=0.0), expected, atol=1e-6)


def test_tempo_edge_cases() -> None:
    # a completion that is a prefix of another: [1,2] r 0 and [1,2,3] r 1 → V: root .5, [1] .5, [1,2] .5,
    # [1,2,3] 1. Row 0: −.5 + [0, 0]; row 1: .5 + [0, 0, .5]
    _close(
        tempo_advantages(
            torch.tensor([0.0, 1.0]), _idx(2), [[1, 2], [1, 2, 3]], torch.tensor([2, 3]), normalize_std=False
        ),
        [[-0.5, -0.5, 0.0], [0.5, 0.5, 1.0]],
    )
    # all-equal group, a group of one, and an empty completion (in a varying group: only its tokens are 0)
    r = torch.tensor([0.3, 0.3, 0.3, 1.0, 1.0, 0.0])
    ids = torch.tensor([[1, 2], [1, 3], [4, 4], [9, 9], [5, 5], [0, 0]])
    adv = tempo_advantages(r, _idx(3, 1, 2), ids, torch.tensor([2, 2, 2, 2, 2, 0]))
    assert torch.isfinite(adv).all()
    assert adv[:4].abs().max() == 0 and adv[5].abs().max() == 0
    # last group [5,5] r 1 vs empty r 0: mean .5, std 1/√2; row 4: (.5 + [1 − .5, 0]) / (1/√2)
    _close(adv[4], [math.sqrt(2), 0.5 * math.sqrt(2)], tol=1e-3)


def test_tempo_refuses_bad_parameters() -> None:
    with pytest.raises(ValueError, match="coef"):
        tempo_advantages(R4, _idx(4), IDS, LENS, coef=-1.0)
    with pytest.raises(ValueError, match="eps"):
        tempo_advantages(R4, _idx(4), IDS, LENS, eps=0.0)
    with pytest.raises(ValueError, match="token_ids"):
        tempo_advantages(R4, _idx(4), IDS[:3], LENS)


# ------------------------------------------------------------------------------------------ TRePO
def test_trepo_hand_values() -> None:
    # row 0 ([1,2,3] r 1): token 0 (root): others' mean (0+1+0)/3 = 1/3 → 2/3; token 1 (after [1]):
    # others through [1] are rows 1, 2: mean .5 → .5; token 2 (after [1,2]): row 1: 0 → 1
    # row 1 (r 0): [0 − 2/3, 0 − 1, 0 − 1]; row 2 ([1,5,6] r 1): 1 − 1/3; [1] → rows 0, 1: .5 → .5;
    # after [1,5] no other row: the deepest shared prefix [1] again → .5
    # row 3 ([7] r 0): others' mean 2/3 → −2/3
    expected = [[2 / 3, 0.5, 1.0], [-2 / 3, -1.0, -1.0], [2 / 3, 0.5, 0.5], [-2 / 3, 0.0, 0.0]]
    _close(trepo_advantages(R4, _idx(4), IDS, LENS), expected)


def test_trepo_without_the_prefix_baseline_or_without_shared_prefixes_is_rloo() -> None:
    rloo = ADVANTAGE_ESTIMATORS.get("rloo")(R4, _idx(4))  # [2/3, −2/3, 2/3, −2/3]
    valid = torch.arange(3)[None, :] < LENS[:, None]
    broadcast = torch.where(valid, rloo[:, None], torch.tensor(0.0))
    assert torch.allclose(trepo_advantages(R4, _idx(4), IDS, LENS, prefix_baseline=False), broadcast)
    distinct = torch.tensor([[1, 2, 3], [2, 2, 4], [3, 5, 6], [7, 0, 0]])  # no two share a first token
    assert torch.allclose(trepo_advantages(R4, _idx(4), distinct, LENS), broadcast)


def test_trepo_edge_cases() -> None:
    # group of one: no baseline, 0; all-equal group: 0; an empty completion's row: 0; different lengths
    r = torch.tensor([5.0, 0.4, 0.4, 1.0, 0.0, 0.0])
    ids = torch.tensor([[3, 3], [1, 2], [1, 3], [1, 2], [1, 0], [0, 0]])
    adv = trepo_advantages(r, _idx(1, 2, 3), ids, torch.tensor([2, 2, 2, 2, 1, 0]))
    assert adv[:3].abs().max() == 0 and adv[5].abs().max() == 0
    # group [1,2] r 1, [1] r 0, [] r 0. Row 3: root: others (0, 0) → 1; after [1]: row 4 (length 1
    # shares [1]) → 1 − 0 = 1. Row 4: root: others (1, 0) → −.5
    _close(adv[3:5], [[1.0, 1.0], [-0.5, 0.0]])


def _two_token_problem():
    """Binary tokens, two steps, tabular softmax policy; token-level rewards that break the
    Zero-Reward Assumption (the first token is rewarded too); the response reward is their sum."""
    theta = torch.tensor([[0.3, -0.4], [0.1, 0.6], [-0.5, 0.2]], dtype=torch.float64, requires_grad=True)
    first_reward = torch.tensor([0.3, -0.2], dtype=torch.float64)
    second_reward = torch.tensor([[1.0, 0.0], [0.5, 2.0]], dtype=torch.float64)
    seqs = list(itertools.product((0, 1), repeat=2))

    def logp(a: int, b: int) -> tuple[torch.Tensor, torch.Tensor]:  # log π(a | root), log π(b | a)
        return theta[0].log_softmax(0)[a], theta[1 + a].log_softmax(0)[b]

    def reward(a: int, b: int) -> float:
        return float(first_reward[a] + second_reward[a, b])

    return theta, seqs, logp, reward


@pytest.mark.parametrize("prefix_baseline", [True, False])
def test_trepo_is_an_unbiased_token_level_policy_gradient(prefix_baseline: bool) -> None:
    """The Trajectory Policy Gradient Theorem, exactly: E over every group of 3 completions of
    (1/3) Σ_i Σ_t A_it ∇log π(a_it | s_it) equals ∇J, J = E[r_1 + r_2]. A self-inclusive prefix
    baseline (the tree's node values, as TEMPO's V(s_t)) is biased: the leave-one-out matters."""
    theta, seqs, logp, reward = _two_token_problem()
    true_j = sum(torch.exp(sum(logp(a, b))) * reward(a, b) for a, b in seqs)
    (true_grad,) = torch.autograd.grad(true_j, theta)
    surrogate, biased = 0.0, 0.0
    for group in itertools.product(seqs, repeat=3):
        ids = torch.tensor(group)
        r = torch.tensor([reward(a, b) for a, b in group], dtype=torch.float64)
        prob = torch.exp(sum(sum(logp(a, b)) for a, b in group)).detach()
        adv = trepo_advantages(r, _idx(3), ids, torch.tensor([2, 2, 2]), prefix_baseline=prefix_baseline)
        node = prefix_values(r, (ids[:, None, :] == ids[None, :, :]).long().cumprod(2).sum(2), 2)[:, :2]
        for i, (a, b) in enumerate(group):
            lp = torch.stack(logp(a, b))
            surrogate = surrogate + prob * (adv[i] * lp).sum() / 3
            biased = biased + prob * ((r[i] - node[i]) * lp).sum() / 3
    (estimate,) = torch.autograd.grad(surrogate, theta, retain_graph=True)
    assert torch.allclose(estimate, true_grad, atol=1e-10), (estimate, true_grad)
    (biased_estimate,) = torch.autograd.grad(biased, theta)
    assert not torch.allclose(biased_estimate, true_grad, atol=1e-3)


# --------------------------------------------------------------------------------- trainer wiring
def _turns(first: list[int], second: list[int] | None, reward: float) -> Trajectory:
    segments = [Segment(SAMPLED, first, [-1.0] * len(first))]
    if second is not None:  # an environment's reply between two sampled turns
        segments += [Segment(CONTEXT, [9, 9]), Segment(SAMPLED, second, [-1.0] * len(second))]
    return Trajectory([1, 2], segments, "stop", example_id="ex", reward=reward)


@pytest.mark.parametrize("name", ["tempo", "trepo"])
def test_token_ids_reach_the_estimator_as_the_sampled_prefix(tmp_path, name: str) -> None:
    """Multi-turn ledgers: the estimator sees each row's sampled tokens only, left-aligned, and its
    advantages go back to the sampled positions (0 on the environment's tokens)."""
    cfg = load_config(None, [*TINY_RUN, f"algo.advantage={name}", f"output_dir={tmp_path}"])
    learner = Learner(cfg, load_model("tiny-random"), pad_id=0)
    trajectories = [_turns([5, 6], [7], 1.0), _turns([5, 6], [8], 0.0), _turns([5, 3], None, 0.5)]
    batch, _ = learner.prepare_batch([TrajectoryGroup(0, trajectories)])
    sampled = [[5, 6, 7], [5, 6, 8], [5, 3]]
    expected = ADVANTAGE_ESTIMATORS.get(name)(
        torch.tensor([1.0, 0.0, 0.5]), _idx(3), sampled, torch.tensor([3, 3, 2])
    )
    assert expected[:2, 2].abs().min() > 0  # the branch after the environment's reply carries credit
    ledger = batch.advantages.cpu()
    assert torch.allclose(ledger[:2, [0, 1, 4]], expected[:2], atol=1e-6)
    assert ledger[:2, 2:4].abs().max() == 0  # the environment's tokens
    assert torch.allclose(ledger[2, :2], expected[2, :2], atol=1e-6) and ledger[2, 2:].abs().max() == 0


@pytest.mark.parametrize("name", ["tempo", "trepo"])
def test_every_logged_advantage_is_the_estimators_in_a_run(tmp_path, name: str) -> None:
    """A real step: each logged advantage (the mean over a completion's tokens) is the estimator's,
    recomputed from the logged rewards, groups and sampled token ids."""
    overrides = [
        *TINY_RUN,
        f"algo.advantage={name}",
        "algo.dynamic_sampling=false",
        "train.steps=1",
        "train.log_trajectories=true",
        "eval.before=false",
        "data.eval_size=0",
        f"output_dir={tmp_path}",
        "name=run",
    ]
    api.train(load_config(None, overrides), quiet=True)
    rows = [r for r in read_jsonl(tmp_path / "run" / "trajectories.jsonl") if r["kept"]]
    assert len(rows) == 8
    ids = [[t for s in r["segments"] if s["kind"] == SAMPLED for t in s["token_ids"]] for r in rows]
    lengths = torch.tensor([len(x) for x in ids])
    rewards, groups = torch.tensor([r["reward"] for r in rows]), torch.tensor([r["group"] for r in rows])
    per_token = ADVANTAGE_ESTIMATORS.get(name)(rewards, groups, ids, lengths)
    expected = per_token.sum(dim=1) / lengths.clamp(min=1)
    assert expected.abs().max() > 0, "no signal: the test checks too little"
    assert [r["advantage"] for r in rows] == pytest.approx(expected.tolist(), abs=1e-5)
