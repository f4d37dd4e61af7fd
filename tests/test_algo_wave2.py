"""The algorithm zoo's second wave (issue 33), first batch: GDPO, AAPO, BAPO, positive-only entropy.

Each function against numbers worked out by hand on a small batch, with the edge cases the papers
name (all-equal groups, a single correct sample, empty masks); then the trainer wiring: GDPO's
per-reward scores reach the estimator from a real run, and AAPO's state resumes bit for bit.
"""

from __future__ import annotations

import math

import pytest
import torch
from tiny import TINY_RUN

from rlvr import api
from rlvr.algo import POLICY_LOSSES, aapo_advantages, gdpo_advantages, ppo_clip_loss
from rlvr.algo.adaptive_clip import balanced_bounds, positive_share
from rlvr.algo.multi_reward import normalize_component
from rlvr.config import load_config
from rlvr.log import read_jsonl
from rlvr.models import load_model
from rlvr.train.learn.estimate import component_score
from rlvr.train.learn.learner import Learner
from rlvr.trajectory import SAMPLED, Segment, Trajectory, TrajectoryGroup

NAN = float("nan")
S2 = math.sqrt(0.5)  # a two-member group's normalised scores are ±1/√2 (unbiased std)


def _idx(*sizes: int) -> torch.Tensor:
    return torch.arange(len(sizes)).repeat_interleave(torch.tensor(sizes))


def _close(a: torch.Tensor, b: list[float], tol: float = 1e-4) -> None:
    assert torch.allclose(a, torch.tensor(b), atol=tol), (a.tolist(), b)


# ------------------------------------------------------------------------------------------- GDPO
def test_gdpo_keeps_the_combinations_grpo_collapses() -> None:
    # group A: (1,0) vs (0,0); group B: (1,1) vs (0,0). GRPO sees totals [1,0] and [2,0]: ±1/√2 in both.
    components = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    weights = torch.tensor([1.0, 1.0])
    rewards, groups = components @ weights, _idx(2, 2)
    raw = gdpo_advantages(rewards, groups, components, weights, batch_normalize=False)
    # A: the second reward is constant there and adds 0; B: both rewards add ±1/√2
    _close(raw, [S2, -S2, 2 * S2, -2 * S2])
    # batch std of [.707, -.707, 1.414, -1.414] = sqrt(5/3)
    _close(
        gdpo_advantages(rewards, groups, components, weights), [v / math.sqrt(5 / 3) for v in raw.tolist()]
    )


def test_gdpo_weights_each_normalised_reward() -> None:
    components = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    weights = torch.tensor([0.5, 2.0])
    rewards = components @ weights
    raw = gdpo_advantages(rewards, _idx(2, 2), components, weights, batch_normalize=False)
    _close(raw, [0.5 * S2, -0.5 * S2, 2.5 * S2, -2.5 * S2])
    flipped = torch.tensor([0.5, -2.0])  # a negative weight makes its reward a penalty
    raw = gdpo_advantages(components @ flipped, _idx(2, 2), components, flipped, batch_normalize=False)
    _close(raw, [0.5 * S2, -0.5 * S2, -1.5 * S2, 1.5 * S2])


def test_gdpo_single_correct_sample_and_all_equal_groups() -> None:
    # one correct of four: mean 1/4, std 1/2 → [1.5, -0.5, -0.5, -0.5]; the second group is all equal
    correct = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.7, 0.7, 0.7])
    fmt = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.2, 0.2, 0.2])  # constant in both groups
    components = torch.stack([correct, fmt], dim=1)
    weights = torch.tensor([1.0, 0.5])
    adv = gdpo_advantages(components @ weights, _idx(4, 3), components, weights, batch_normalize=False)
    _close(adv, [1.5, -0.5, -0.5, -0.5, 0.0, 0.0, 0.0])
    every = torch.full((6, 2), 0.3)  # every group all-equal: zeros, not NaN, even batch-normalised
    adv = gdpo_advantages(every @ weights, _idx(3, 3), every, weights)
    assert torch.isfinite(adv).all() and adv.abs().max() == 0


def test_gdpo_a_missing_score_stays_out_of_its_rewards_statistics() -> None:
    # row 1 has no score for the first reward (its reward errored under rewards.on_error=zero: total 0)
    components = torch.tensor([[1.0, 1.0], [NAN, 1.0], [0.0, 0.0]])
    weights = torch.tensor([1.0, 1.0])
    rewards = torch.tensor([2.0, 0.0, 0.0])
    adv = gdpo_advantages(rewards, _idx(3), components, weights, batch_normalize=False)
    # first reward over rows 0 and 2 only: ±1/√2, row 1 gets 0 from it; second: mean 2/3, std 1/√3
    second = [(1 / 3) * math.sqrt(3), (1 / 3) * math.sqrt(3), -(2 / 3) * math.sqrt(3)]
    _close(adv, [S2 + second[0], second[1], -S2 + second[2]])
    _close(normalize_component(torch.tensor([NAN, 1.0, NAN]), _idx(3)), [0.0, 0.0, 0.0])  # one value: 0


def test_gdpo_what_the_total_holds_beyond_the_rewards_is_one_more_component() -> None:
    components = torch.tensor([[1.0], [0.0], [1.0], [0.0]])
    rewards = torch.tensor([1.5, 0.0, 1.0, 0.0])  # +0.5 from shaping / a turn reward on row 0
    adv = gdpo_advantages(rewards, _idx(4), components, torch.tensor([1.0]), batch_normalize=False)
    half = 0.5 * math.sqrt(3)  # (v - 1/2) / sqrt(1/3) for v in {0, 1}
    _close(adv, [half + 1.5, -half - 0.5, half - 0.5, -half - 0.5])


def test_gdpo_rounding_of_the_total_is_not_a_residual() -> None:
    # totals summed in double by the reward pool, components and weights in float32: the last row's
    # float32 total differs from its float32 Σ w·c by 6e-8, which must not become a component
    rows = [[0.0, 1.0, 0.44], [1.0, 0.0, 0.81], [0.0, 0.0, 0.72], [1.0, 0.0, 0.61]]
    weights = [0.5, 0.5, 0.25]
    components, w = torch.tensor(rows), torch.tensor(weights)
    rewards = torch.tensor([sum(a * c for a, c in zip(weights, row)) for row in rows])
    assert (rewards - components @ w).abs().max() > 0  # the rounding is there
    adv = gdpo_advantages(rewards, _idx(4), components, w, batch_normalize=False)
    expected = sum(w[k] * normalize_component(components[:, k], _idx(4)) for k in range(3))
    assert torch.allclose(adv, expected, atol=1e-5)


def test_gdpo_refuses_components_of_the_wrong_shape() -> None:
    with pytest.raises(ValueError, match="reward_components"):
        gdpo_advantages(torch.zeros(3), _idx(3), torch.zeros(3, 2), torch.ones(3))


def test_a_rewards_score_is_read_by_its_label_and_from_dict_rewards() -> None:
    rewards = {"a": 0.5, "p/score": 0.25, "p/bonus": 2.0, "q/x": 1.0, "q/y": 2.0}
    assert component_score(rewards, "a") == 0.5
    assert component_score(rewards, "p") == 0.25  # a dict reward's score
    assert component_score(rewards, "q") == 3.0  # no score: the sum of its parts
    assert math.isnan(component_score(rewards, "missing"))


def test_gdpo_receives_each_rewards_score_in_a_run(tmp_path) -> None:
    """A real step: three rewards (one a dict, one that errors on some samples and is scored 0 under
    on_error=zero); every logged advantage is GDPO's of the logged component scores."""
    overrides = [
        *(o for o in TINY_RUN if not o.startswith("rewards.functions=")),
        "rewards.functions=[{name: 'reward_fixtures:scaled_len', label: len, params: {scale: 0.01}},"
        " {name: 'reward_fixtures:fail_some', label: some, weight: 0.5},"
        " {name: 'reward_fixtures:parts', label: parts, weight: 0.25}]",
        "rewards.on_error=zero",
        "rollout.prompts_per_step=4",
        "algo.advantage=gdpo",
        "algo.dynamic_sampling=false",
        "train.steps=1",
        "train.log_trajectories=true",
        "eval.before=false",
        f"output_dir={tmp_path}",
        "name=run",
    ]
    api.train(load_config(None, overrides), quiet=True)
    rows = read_jsonl(tmp_path / "run" / "trajectories.jsonl")
    assert all(r["kept"] for r in rows) and len(rows) == 16
    assert any(r["errors"] for r in rows), "no planted reward error: the test checks too little"
    components = torch.tensor(
        [
            [r["rewards"].get("len", NAN), r["rewards"].get("some", NAN), r["rewards"]["parts/score"]]
            for r in rows
        ]
    )
    rewards, groups = torch.tensor([r["reward"] for r in rows]), torch.tensor([r["group"] for r in rows])
    expected = gdpo_advantages(rewards, groups, components, torch.tensor([1.0, 0.5, 0.25]))
    assert [r["advantage"] for r in rows] == pytest.approx(expected.tolist(), abs=1e-5)


# ------------------------------------------------------------------------------------------- AAPO
def test_aapo_first_step_is_grpo_and_sets_the_references() -> None:
    state: dict = {}
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    adv = aapo_advantages(rewards, _idx(4, 4), ["p"] * 4 + ["q"] * 4, state)
    _close(adv, [1.5, -0.5, -0.5, -0.5, 0, 0, 0, 0])  # no reference yet: no margin
    assert state == {"prompts": {"p": 0.25, "q": 0.0}, "batch": 0.125}


def test_aapo_margin_over_the_moving_reference() -> None:
    state = {"prompts": {"p": 0.25, "q": 0.0}, "batch": 0.125}
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    adv = aapo_advantages(rewards, _idx(4, 4), ["p"] * 4 + ["r"] * 4, state)
    # p is all correct (group advantage 0) but above its reference .25: margin clipped to +0.28.
    # r is new: its reference is the batch one (.125); group advantages [-.5, -.5, 1.5, -.5]
    _close(adv, [0.28] * 4 + [-0.625, -0.625, 1.5 + 0.28, -0.625])
    assert state["prompts"] == pytest.approx({"p": 0.9 * 0.25 + 0.1, "q": 0.0, "r": 0.25})
    assert state["batch"] == pytest.approx(0.9 * 0.125 + 0.1 * 5 / 8)
    # now all wrong on p, far below its reference: the margin is clipped at -0.2
    adv = aapo_advantages(torch.zeros(2), _idx(2), ["p", "p"], state, momentum=0.0, margin_low=0.2)
    _close(adv, [-0.2, -0.2])
    assert state["prompts"]["p"] == 0.0  # momentum 0: the reference is the last group's mean


def test_aapo_refuses_bad_parameters() -> None:
    with pytest.raises(ValueError, match="momentum"):
        aapo_advantages(torch.zeros(2), _idx(2), ["a", "a"], {}, momentum=1.0)
    with pytest.raises(ValueError, match="example_ids"):
        aapo_advantages(torch.zeros(2), _idx(2), ["a"], {})


def test_aapo_state_is_in_the_learners_checkpoint_state(tmp_path) -> None:
    cfg = load_config(None, [*TINY_RUN, "algo.advantage=aapo", f"output_dir={tmp_path}"])
    learner = Learner(cfg, load_model("tiny-random"), pad_id=0)
    group = TrajectoryGroup(
        3,
        [
            Trajectory([1, 2], [Segment(SAMPLED, [5, 6], [-1.0, -1.0])], "stop", example_id="ex-3", reward=r)
            for r in (1.0, 0.0)
        ],
    )
    learner.prepare_batch([group])
    assert learner.state_dict()["estimator"] == {"prompts": {"ex-3": 0.5}, "batch": 0.5}
    other = Learner(cfg, load_model("tiny-random"), pad_id=0)
    assert "estimator" not in other.state_dict()  # a fresh learner has no state to save
    other.load_state_dict(learner.state_dict())
    assert other.estimator_state == learner.estimator_state
    assert other.estimator_state is not learner.estimator_state


def test_aapo_resumes_bit_for_bit(tmp_path) -> None:
    """4 steps straight equal 1 step, a stop, a resume and 3 more: the references are checkpointed."""
    base = [
        *TINY_RUN,
        "data.train_size=4",
        "data.eval_size=0",
        "eval.before=false",
        "train.steps=4",
        "train.save_every=2",
        "optim.lr=1e-3",
        "algo.advantage=aapo",
        "algo.loss=reinforce",
        "algo.dynamic_sampling=false",
    ]

    def cfg(name: str, *extra: str):
        return load_config(None, [*base, f"output_dir={tmp_path}", f"name={name}", *extra])

    api.train(cfg("full"), quiet=True)
    api.train(cfg("cut", "train.time_limit_s=0.001"), quiet=True)  # stops after step 1, checkpointed
    assert [r["step"] for r in read_jsonl(tmp_path / "cut" / "metrics.jsonl")] == [1]
    api.train(cfg("cut"), resume=True, quiet=True)

    def rows(name: str) -> list[dict]:
        train = [r for r in read_jsonl(tmp_path / name / "metrics.jsonl") if r["phase"] == "train"]
        return [{k: v for k, v in r.items() if not k.startswith(("time/", "throughput/"))} for r in train]

    assert [r["step"] for r in rows("cut")] == [1, 2, 3, 4]
    assert rows("cut") == rows("full")
    advantages = {
        n: [s["advantage"] for s in read_jsonl(tmp_path / n / "samples.jsonl")] for n in ("full", "cut")
    }
    assert advantages["cut"] == advantages["full"]
    state = torch.load(
        tmp_path / "cut" / "checkpoints" / "step-000002" / "trainer_state.pt", weights_only=False
    )
    assert set(state["estimator"]) == {"prompts", "batch"} and state["estimator"]["prompts"]


# ------------------------------------------------------------------------------------------- BAPO
# five one-token samples: two positive (ratios 1.43, 1.0), three negative (0.5, 0.72, 1.0)
RATIO = torch.tensor([1.43, 1.0, 0.5, 0.72, 1.0])
ADV = torch.tensor([1.0, 1.0, -1.0, -1.0, -1.0])
ONES = torch.ones(5, 1)


def test_bapo_raises_the_bounds_until_positives_carry_their_share() -> None:
    ratio = RATIO[:, None]
    # at [0.6, 1.2]: positives keep 1.0 (1.43 is clipped), negatives 0.72 + 1.0 → share 1/2.72
    assert positive_share(ratio, ADV, ONES, 0.6, 1.2) == pytest.approx(1 / 2.72)
    # at 0.75 the 0.72 negative drops out: 1.0 vs 1.0 reaches 0.5
    c_low, c_high, share = balanced_bounds(ratio, ADV, ONES, 0.5, (0.6, 0.9), (1.2, 3.0), 0.05, 0.05)
    assert (c_low, c_high, share) == pytest.approx((0.75, 1.35, 0.5))
    # a higher target: at 1.45 the 1.43 positive comes in, (1.43 + 1) / (1.43 + 1 + 1)
    c_low, c_high, share = balanced_bounds(ratio, ADV, ONES, 0.6, (0.6, 0.9), (1.2, 3.0), 0.05, 0.05)
    assert (c_low, c_high, share) == pytest.approx((0.85, 1.45, 2.43 / 3.43))


def test_bapo_loss_is_ppo_with_the_found_bounds() -> None:
    old = torch.zeros(5, 1)
    new = RATIO.log()[:, None].clone().requires_grad_(True)
    loss, stats = POLICY_LOSSES.get("bapo")(new, old, ADV, ONES)
    assert stats["bapo_clip_low"] == pytest.approx(0.75) and stats["bapo_clip_high"] == pytest.approx(1.35)
    assert stats["bapo_positive_share"] == pytest.approx(0.5)
    # -min(rA, clip(r, .75, 1.35)A): 1.43 → -1.35; 1.0 → -1; 0.5 and 0.72 (A<0) → +0.75; 1.0 → +1
    _close(loss[:, 0].detach(), [-1.35, -1.0, 0.75, 0.75, 1.0])
    loss.sum().backward()
    # clipped tokens have no gradient; the others -rA (d r / d log π = r)
    _close(new.grad[:, 0], [0.0, -1.0, 0.0, 0.0, 1.0])
    ppo, _ = ppo_clip_loss(new, old, ADV, ONES, 0.25, 0.35)
    assert torch.allclose(loss, ppo)


def test_bapo_edge_cases() -> None:
    ratio = RATIO[:, None]
    start = ((0.6, 0.9), (1.2, 3.0), 0.05, 0.05)
    # nothing to balance: empty mask, all-equal groups (zero advantages) → the start bounds
    assert balanced_bounds(ratio, ADV, torch.zeros(5, 1), 0.5, *start) == (0.6, 1.2, None)
    assert balanced_bounds(ratio, torch.zeros(5), ONES, 0.5, *start) == (0.6, 1.2, None)
    # only positives: already balanced; only negatives: the bounds go to their maxima and stop
    assert balanced_bounds(ratio, ADV.abs(), ONES, 0.5, *start) == (0.6, 1.2, 1.0)
    c_low, c_high, share = balanced_bounds(ratio, -ADV.abs(), ONES, 0.5, *start)
    assert (c_low, c_high, share) == (0.9, 3.0, 0.0)
    # no step: no search (and no endless loop)
    assert balanced_bounds(ratio, ADV, ONES, 0.5, (0.6, 0.9), (1.2, 3.0), 0.0, 0.0)[:2] == (0.6, 1.2)
    # on-policy every ratio is 1: nothing is clipped, BAPO is PPO
    new = torch.full((5, 1), -1.0)
    loss, _ = POLICY_LOSSES.get("bapo")(new, new, ADV, ONES)
    assert torch.allclose(loss, ppo_clip_loss(new, new, ADV, ONES)[0])
    loss, stats = POLICY_LOSSES.get("bapo")(new, new, ADV, torch.zeros(5, 1))
    assert torch.isfinite(loss).all() and stats["bapo_positive_share"] == 0.0
    with pytest.raises(ValueError, match="lower_start"):
        POLICY_LOSSES.get("bapo")(new, new, ADV, ONES, lower_start=1.2)


# ------------------------------------------------------------------------------- positive entropy
def test_positive_entropy_only_on_positive_samples() -> None:
    new = torch.full((3, 2), -1.0)
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
    entropy = torch.tensor([[0.5, 0.5], [0.7, 0.7], [0.2, 0.2]], requires_grad=True)
    adv = torch.tensor([1.0, -1.0, 0.0])  # a positive, a negative, an all-equal group's zero
    fn = POLICY_LOSSES.get("positive_entropy")
    loss, stats = fn(new, new, adv, mask, entropy_with_grad=entropy, coef=0.1)
    inner, _ = ppo_clip_loss(new, new, adv, mask)
    _close(loss - inner, [[-0.05, -0.05], [0.0, 0.0], [0.0, 0.0]], tol=1e-6)
    assert stats["positive_entropy_frac"] == pytest.approx(1 / 5)  # 1 of the 5 valid tokens
    (loss * mask).sum().backward()
    _close(entropy.grad, [[-0.1, 0.0], [0.0, 0.0], [0.0, 0.0]], tol=1e-6)
    # per-token advantages: each token by its own sign; a controller's entropy_coef wins over coef
    token_adv = torch.tensor([[1.0, -1.0], [0.5, 0.0], [-2.0, 3.0]])
    loss, stats = fn(
        new, new, token_adv, mask, entropy_with_grad=entropy.detach(), coef=0.1, entropy_coef=1.0
    )
    inner, _ = ppo_clip_loss(new, new, token_adv, mask)
    _close(loss - inner, [[-0.5, 0.0], [-0.7, 0.0], [0.0, -0.2]], tol=1e-6)
    assert stats["entropy_coef"] == 1.0
    # an empty mask: the bonus is masked out like the loss, and the fraction is 0
    _, stats = fn(new, new, adv, torch.zeros(3, 2), entropy_with_grad=entropy.detach())
    assert stats["positive_entropy_frac"] == 0.0
