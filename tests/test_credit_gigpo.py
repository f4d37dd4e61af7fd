"""GiGPO: step groups from repeated environment states, their advantages against hand-computed
values, the games' states recorded by the rollout, and the estimator's wiring in the learner."""

from __future__ import annotations

import random
import statistics
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from test_rollout_episodes import ScriptedEngine
from tiny import TINY_RUN

from rlvr.algo.gigpo import (
    discounted_returns,
    gigpo_advantages,
    step_advantages,
    step_group_index,
    step_group_metrics,
)
from rlvr.config import load_config
from rlvr.data.example import Example
from rlvr.envs.frozen_lake import FrozenLake, make_board, shortest_path
from rlvr.envs.guess_number import GuessNumber
from rlvr.envs.wordle import Wordle
from rlvr.errors import RlvrError
from rlvr.models import load_model, load_tokenizer
from rlvr.rollout import SamplingParams
from rlvr.rollout.episodes import EpisodeLimits, run_episodes
from rlvr.train.learn.estimate import check_algorithm
from rlvr.train.learn.learner import Learner
from rlvr.trajectory import (
    CONTEXT,
    SAMPLED,
    Segment,
    Trajectory,
    TrajectoryGroup,
    group_records,
    read_trajectory_groups,
)

# Three episodes of one group (a lake: s0 the start, s1 beside G, s2 a dead end):
#   a: s0 -> s1 -> G          turn rewards [0, 1]      return 1
#   b: s0 -> s0 (wall) -> s1 -> G   [0, 0, 1]         return 1
#   c: s0 -> s2 -> hole       [0, 0]                   return 0
REWARDS = [[0.0, 1.0], [0.0, 0.0, 1.0], [0.0, 0.0]]
STATES = [["s0", "s1"], ["s0", "s0", "s1"], ["s0", "s2"]]
GAMMA = 0.95


def _by_hand() -> list[list[float]]:
    """GiGPO's advantage of every turn, computed with the statistics module from the definition."""
    returns = [[GAMMA * 1.0, 1.0], [GAMMA**2, GAMMA, 1.0], [0.0, 0.0]]
    episode = [1.0, 1.0, 0.0]
    e_mean, e_std = statistics.mean(episode), statistics.stdev(episode)
    s0 = [returns[0][0], returns[1][0], returns[1][1], returns[2][0]]
    s0_mean, s0_std = statistics.mean(s0), statistics.stdev(s0)
    step = {  # s1's two returns are equal (std 0: no signal), s2 is seen once
        (0, 0): (returns[0][0] - s0_mean) / s0_std,
        (1, 0): (returns[1][0] - s0_mean) / s0_std,
        (1, 1): (returns[1][1] - s0_mean) / s0_std,
        (2, 0): (returns[2][0] - s0_mean) / s0_std,
    }
    return [
        [(episode[i] - e_mean) / e_std + step.get((i, t), 0.0) for t in range(len(REWARDS[i]))]
        for i in range(3)
    ]


def test_discounted_returns_and_step_groups():
    assert discounted_returns([0.0, 0.0, 1.0], 0.5) == [0.25, 0.5, 1.0]
    assert discounted_returns([], 0.9) == []
    index = torch.tensor([0, 0, 1])
    ids = step_group_index(index, [["a", None, "b"], ["a", "b"], ["a", None]])
    # the same state in another group, and states of None, are never grouped
    assert ids[0][0] == ids[1][0] and ids[0][2] == ids[1][1]
    assert len({ids[0][1], ids[2][1], ids[2][0], ids[0][0]}) == 4


def test_gigpo_advantages_against_hand_values():
    """Fails if the step groups ignore the state, the discount is dropped, the step part is left
    out (or added without its weight), or the episode part is not group-normalised."""
    index = torch.zeros(3, dtype=torch.long)
    lengths = [[2, 3], [1, 1, 2], [2, 1]]
    adv = gigpo_advantages(torch.zeros(3), index, REWARDS, STATES, lengths, step_weight=1.0, discount=GAMMA)
    expected = _by_hand()
    assert adv.shape == (3, 5)
    for i, row in enumerate(lengths):
        tokens = [expected[i][t] for t, n in enumerate(row) for _ in range(n)]
        tokens += [0.0] * (5 - len(tokens))
        assert adv[i].tolist() == pytest.approx(tokens, abs=1e-4)
    # the wall move (b's first turn) gets less than a's first move from the same square
    assert adv[1, 0] < adv[0, 0]
    # step_weight 0 is episode-level GRPO: every turn of an episode alike
    plain = gigpo_advantages(torch.zeros(3), index, REWARDS, STATES, lengths, step_weight=0.0, discount=GAMMA)
    assert plain[0, :5].tolist() == pytest.approx([1 / 3**0.5 * 1.0] * 5, abs=1e-4)
    half = gigpo_advantages(torch.zeros(3), index, REWARDS, STATES, lengths, step_weight=0.5, discount=GAMMA)
    assert torch.allclose(half, plain + 0.5 * (adv - plain), atol=1e-5)


def test_gigpo_edge_cases():
    index = torch.zeros(2, dtype=torch.long)
    # all episodes alike and every state once: no signal anywhere
    flat = gigpo_advantages(torch.zeros(2), index, [[0.0, 1.0], [1.0]], [["x", "y"], ["z"]], [[1, 1], [2]])
    assert flat.abs().max() == 0
    # no states at all (None): GRPO over the episodes
    grpo = gigpo_advantages(torch.zeros(2), index, [[1.0], [0.0]], [[None], [None]], [[1], [1]])
    assert grpo[:, 0].tolist() == pytest.approx([2**-0.5, -(2**-0.5)], abs=1e-4)
    # without std normalisation: plain differences from the means
    raw = gigpo_advantages(
        torch.zeros(2), index, [[0.0, 1.0], [0.0, 0.0]], [["a", "b"], ["a", "c"]], [[1, 1], [1, 1]],
        discount=0.5, normalize_std=False,
    )  # fmt: skip
    # episode: 1 - 0.5 and 0 - 0.5; turn 0 in "a": returns 0.5 and 0, mean 0.25
    assert raw.flatten().tolist() == pytest.approx([0.5 + 0.25, 0.5, -0.5 - 0.25, -0.5])
    # an empty batch
    assert gigpo_advantages(torch.zeros(0), torch.zeros(0, dtype=torch.long), [], [], []).shape == (0, 0)
    with pytest.raises(ValueError, match="one entry per turn"):
        step_advantages(index, [[0.0, 1.0], [1.0]], [["x"], ["z"]], 0.9)
    metrics = step_group_metrics(torch.zeros(3, dtype=torch.long), STATES)
    assert metrics["gigpo/grouped_turns"] == pytest.approx(6 / 7)
    assert metrics["gigpo/step_group_size"] == pytest.approx((4 * 4 + 2 * 2) / 6)


# -- the games' states, recorded by the rollout --------------------------------------------------


def test_the_games_report_their_state():
    lake = FrozenLake(demonstrate=False)
    lake.reset(Example(id="b", prompt=[], metadata={"seed": 4}), random.Random(0))
    assert lake.state() == "0,0"
    path = shortest_path(make_board(4), (0, 0))
    lake.step(f"<move>{path[0]}</move>")
    assert lake.state() != "0,0"
    wall = FrozenLake(demonstrate=False)
    wall.reset(Example(id="b", prompt=[], metadata={"seed": 4}), random.Random(0))
    wall.step("<move>up</move>")  # into the wall: the same square
    assert wall.state() == "0,0"

    game = GuessNumber(demonstrate=False)
    game.reset(Example(id="g", prompt=[], metadata={"seed": 3}), random.Random(0))
    before = game.state()
    game.step(f"<guess>{game.secret + 1 if game.secret < game.high else game.secret - 1}</guess>")
    assert game.state() != before and GuessNumber().state() is None

    word = Wordle(demonstrate=False)
    word.reset(Example(id="w", prompt=[], metadata={"seed": 1}), random.Random(0))
    guesses = [w for w in ("crane", "slate") if w != word.secret]
    for w in guesses:
        word.step(f"<guess>{w}</guess>")
    other = Wordle(demonstrate=False)
    other.reset(Example(id="w", prompt=[], metadata={"seed": 1}), random.Random(0))
    for w in reversed(guesses):  # the same words in another order: the same knowledge
        other.step(f"<guess>{w}</guess>")
    assert word.state() == other.state() != ""


def test_the_rollout_records_the_state_before_each_turn(tmp_path):
    tok = load_tokenizer("tiny-random")
    engine = ScriptedEngine(tok, ["<move>up</move>", "<move>up</move>", "<move>left</move>"])
    with ThreadPoolExecutor(2) as threads:
        groups = run_episodes(
            engine, tok, [(0, Example(id="b", prompt=[], metadata={"seed": 4}))],
            lambda e: FrozenLake(demonstrate=False, max_moves=6), SamplingParams(n=2, max_new_tokens=16),
            EpisodeLimits(max_turns=3, max_tokens=2000), threads,
        )  # fmt: skip
    t = groups[0][0]
    assert t.turn_states == ["0,0", "0,0", "0,0"]  # up, up, left: never leaves the corner
    assert sum(s.kind == SAMPLED for s in t.segments) == len(t.turn_states)
    # the JSONL form keeps them
    path = tmp_path / "t.jsonl"
    path.write_text(
        "".join(
            f"{__import__('json').dumps(r)}\n"
            for r in group_records([TrajectoryGroup(0, groups[0])], [True], 0)
        )
    )
    back = read_trajectory_groups(path)[0][0].trajectories[0]
    assert back.turn_states == t.turn_states


# -- through the learner ---------------------------------------------------------------------------


def _traj(turns: list[int], reward: float, turn_rewards: list[float], states: list[str | None]) -> Trajectory:
    segments = []
    for k, n in enumerate(turns):
        if k:
            segments.append(Segment(CONTEXT, [7] * 3))
        segments.append(Segment(SAMPLED, [5 + k] * n, [-1.0] * n))
    return Trajectory(
        [1, 2, 3], segments, "stop", reward=reward, turn_rewards=turn_rewards, turn_states=states
    )


def _learner(tmp_path: Path, *extra: str) -> Learner:
    cfg = load_config(None, [*TINY_RUN, f"output_dir={tmp_path}", "algo.advantage=gigpo", *extra])
    check_algorithm(cfg)
    return Learner(cfg, load_model(cfg.model.name, cfg.model.dtype, cfg.model.device), pad_id=0)


def test_the_learner_gives_each_turn_its_gigpo_advantage(tmp_path):
    """The learner builds the turn context from the ledger (outcome on the last turn, context tokens
    skipped) and scatters the advantages onto the model's tokens only; fails if the outcome is not
    counted, the states are not passed, or the advantages land on the environment's tokens."""
    lengths = [[2, 3], [1, 1, 2], [2, 1]]
    # outcome reward of 1 for a and b given as the trajectory's reward, no turn rewards
    trajectories = [
        _traj(lengths[0], 1.0, [0.0, 0.0], STATES[0]),
        _traj(lengths[1], 1.0, [0.0, 0.0, 0.0], STATES[1]),
        _traj(lengths[2], 0.0, [0.0, 0.0], STATES[2]),
    ]
    learner = _learner(tmp_path, "algo.advantage_params={discount: 0.95}")
    batch, metrics = learner.prepare_batch([TrajectoryGroup(0, trajectories)])
    adv, mask = batch.advantages.cpu(), batch.completion_mask.cpu()
    expected = _by_hand()
    for i, t in enumerate(trajectories):
        at, k = 0, 0
        for s in t.segments:
            values = adv[i, at : at + len(s.token_ids)].tolist()
            if s.kind == CONTEXT:
                assert values == [0.0] * len(s.token_ids)
            else:
                assert values == pytest.approx([expected[i][k]] * len(s.token_ids), abs=1e-4)
                k += 1
            at += len(s.token_ids)
    assert (adv * (1 - mask)).abs().max() == 0
    assert metrics["gigpo/grouped_turns"] == pytest.approx(6 / 7)


def test_gigpo_is_refused_without_states_and_with_reward_shaping(tmp_path):
    learner = _learner(tmp_path)
    stateless = [_traj([2], 1.0, [0.0], []), _traj([2], 0.0, [0.0], [])]
    with pytest.raises(RlvrError, match="no episode of this batch reported one"):
        learner.prepare_batch([TrajectoryGroup(0, stateless)])
    with pytest.raises(RlvrError, match="algo.kl_in_reward"):
        check_algorithm(
            load_config(
                None, [*TINY_RUN, "algo.advantage=gigpo", "algo.kl_in_reward=true", "algo.kl_coef=0.1"]
            )
        )
    with pytest.raises(RlvrError, match="turn_advantage"):
        check_algorithm(load_config(None, [*TINY_RUN, "algo.advantage=gigpo", "algo.turn_advantage=turn"]))


def test_a_broken_state_ends_its_episode_not_the_run():
    tok = load_tokenizer("tiny-random")

    class Broken(FrozenLake):
        def state(self):
            return 3  # not a string

    engine = ScriptedEngine(tok, ["<move>down</move>"])
    with ThreadPoolExecutor(2) as threads:
        groups = run_episodes(
            engine, tok, [(0, Example(id="b", prompt=[], metadata={"seed": 4}))],
            lambda e: Broken(demonstrate=False), SamplingParams(n=2, max_new_tokens=16),
            EpisodeLimits(max_turns=3, max_tokens=2000), threads,
        )  # fmt: skip
    t = groups[0][0]
    assert "state() must return a string" in t.errors["env"]
    assert t.turn_states == []
