"""GRPO-CARE's consistency bonus: the answer span, the consistency score and the bonus by hand, then
a real run in which the reference's log-probs reach the estimator (at step 1 the EMA reference is the
policy that sampled, so they equal the logged sampling log-probs)."""

from __future__ import annotations

import math

import pytest
import torch
from tiny import TINY_RUN

from rlvr import api
from rlvr.algo import grpo_advantages
from rlvr.algo.care import AnswerSpans, consistency, consistency_bonus, grpo_care_advantages
from rlvr.config import load_config
from rlvr.log import read_jsonl

NAN = float("nan")
# id: 0 "", 1 "The", 2 " sum", 3 " <", 4 "answer", 5 ">", 6 "1", 7 "7", 8 "</", 9 ">1", 10 "answer>"
PIECES = ["", "The", " sum", " <", "answer", ">", "1", "7", "</", ">1", "answer>"]


def test_the_answer_span_is_what_follows_the_last_marker() -> None:
    spans = AnswerSpans(PIECES, "<answer>")
    # "The sum <answer>17</answer>": the marker ends after token 5; tokens 6.. follow it
    assert spans.row([1, 2, 3, 4, 5, 6, 7, 8, 10]) == [False] * 5 + [True] * 4
    # two markers: only what follows the last; an empty piece is never part of it
    assert spans.row([3, 4, 5, 6, 3, 4, 5, 0, 7]) == [False] * 7 + [False, True]
    # a token that straddles the marker's end (">1") is not wholly after it: the span starts after it
    assert spans.row([3, 4, 9, 7]) == [False, False, False, True]
    assert spans.row([1, 2, 6]) == [False, False, False]  # no marker, no span
    mask = spans.mask(torch.tensor([[3, 4, 5, 6, 7], [3, 4, 5, 6, 7]]), torch.tensor([5, 4]))
    assert mask.tolist() == [[False, False, False, True, True], [False, False, False, True, False]]
    with pytest.raises(ValueError, match="marker"):
        AnswerSpans(PIECES, "")


def test_consistency_is_the_answers_mean_reference_logprob() -> None:
    logprobs = torch.tensor([[-5.0, -1.0, -3.0], [-2.0, -2.0, -2.0]])
    answer = torch.tensor([[False, True, True], [False, False, False]])
    scores = consistency(logprobs, answer)
    assert scores[0] == -2.0 and math.isnan(scores[1])  # (−1 − 3)/2; no answer: no score


def test_the_bonus_goes_to_correct_answers_more_consistent_than_their_peers() -> None:
    # group 0: rewards (1, 1, 0, 1), consistency (−1, −3, −2, none)
    #   row 0: peers (−3, −2) mean −2.5 < −1 → bonus; row 1: peers (−1, −2) mean −1.5 > −3 → none;
    #   row 2 is wrong; row 3 has no answer span
    # group 1: one row, no peers → none; group 2: (1, 1), (−1, −1) → ties earn nothing
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 2, 2])
    scores = torch.tensor([-1.0, -3.0, -2.0, NAN, -0.5, -1.0, -1.0])
    bonus = consistency_bonus(rewards, groups, scores, coef=0.5, success_threshold=0.5)
    assert bonus.tolist() == [0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    # a wrong answer never earns it, however consistent
    assert consistency_bonus(
        torch.tensor([0.0, 1.0]), torch.tensor([0, 0]), torch.tensor([0.0, -9.0]), 0.5, 0.5
    ).tolist() == [0.0, 0.0]


def test_grpo_care_refuses_a_negative_coef() -> None:
    with pytest.raises(ValueError, match="coef"):
        grpo_care_advantages(
            torch.zeros(2), torch.zeros(2, dtype=torch.long), torch.zeros(2, 1, dtype=torch.long),
            torch.ones(2, dtype=torch.long), torch.zeros(2, 1), "tiny-random", coef=-1.0,
        )  # fmt: skip


def test_the_references_logprobs_reach_the_estimator_in_a_run(tmp_path) -> None:
    overrides = [
        *TINY_RUN,
        "algo.advantage=grpo_care",
        # tiny-random writes no <answer>: "e" occurs in most of its completions' text
        "algo.advantage_params={tokenizer: tiny-random, marker: e, coef: 0.5, success_threshold: 0.0}",
        "algo.reference.update=ema",
        "algo.dynamic_sampling=false",
        "train.steps=1",
        "train.log_trajectories=true",
        "eval.before=false",
        f"output_dir={tmp_path}",
        "name=run",
    ]
    api.train(load_config(None, overrides), quiet=True)
    rows = read_jsonl(tmp_path / "run" / "trajectories.jsonl")
    ids = [[x for seg in r["segments"] for x in seg["token_ids"]] for r in rows]
    logprobs = [[x for seg in r["segments"] for x in seg["logprobs"]] for r in rows]
    width = max(len(x) for x in ids)
    pad = lambda rows_, fill: torch.tensor([x + [fill] * (width - len(x)) for x in rows_])  # noqa: E731
    rewards, groups = torch.tensor([r["reward"] for r in rows]), torch.tensor([r["group"] for r in rows])
    lengths = torch.tensor([len(x) for x in ids])
    expected = grpo_care_advantages(
        rewards,
        groups,
        pad(ids, 0),
        lengths,
        pad(logprobs, 0.0),
        "tiny-random",
        marker="e",
        success_threshold=0.0,
    )
    assert not torch.allclose(expected, grpo_advantages(rewards, groups)), (
        "no bonus paid: the test checks too little"
    )
    assert [r["advantage"] for r in rows] == pytest.approx(expected.tolist(), abs=1e-4)
