"""Test-time scaling in eval: best-of-N, weighted votes and self-verification against hand-computed
cases, their tie-breaking, and the wiring through a training run on tiny-random."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tiny import TINY_RUN

from rlvr.data import Example
from rlvr.errors import RlvrError
from rlvr.eval import aggregate_pass_at_k
from rlvr.eval.evaluate import evaluate, vote
from rlvr.eval.scaling import (
    Sample,
    ScalingPlan,
    answer_key,
    scaling_metrics,
    select_best,
    vote_weights,
    weighted_vote,
)
from rlvr.eval.self_verify import Outcome, SelfVerify, revision, verify_metrics
from rlvr.rewards import RewardResult
from rlvr.rollout import Completion


def S(answer, correct=False, score=None, logprob=None, rm=None) -> Sample:  # noqa: N802
    return Sample(answer, correct, score, logprob, rm)


# ----------------------------------------------------------------------------- answers
def test_answers_group_by_exact_value_not_by_float() -> None:
    assert {
        answer_key(a) for a in ["17", "17.0", " 17 ", "34/2", "\\frac{34}{2}", "$17$", "17.", "1.7e1"]
    } == {"17"}
    # 2**60 and 2**60 + 1 are the same float: a float key would merge two different answers
    assert answer_key("1152921504606846976") != answer_key("1152921504606846977")
    assert answer_key("0.1") != answer_key("0.1000000000000000001")
    assert answer_key("  Paris  France ") == answer_key("paris france")
    assert answer_key(None) is None
    assert vote("the answer is <answer>34/2</answer>") == vote("so 17.0") == "17"


# ----------------------------------------------------------------------------- best-of-N
def test_best_of_picks_the_highest_key_earliest_on_ties_none_last() -> None:
    samples = [
        S("1", score=0.0, logprob=-3.0),
        S("2", score=1.0, logprob=-0.5),
        S("3", score=1.0, logprob=-0.2),
    ]
    assert select_best(samples, "verifier") == 1  # the first of two 1.0 scores
    assert select_best(samples, "logprob") == 2
    unscored = [S("1", score=None, logprob=None), S("2", score=-5.0, logprob=-9.0)]
    assert select_best(unscored, "verifier") == 1  # a score, however low, beats no score
    assert select_best(unscored, "logprob") == 1  # an empty completion has no mean logprob
    assert select_best([S("1"), S("2")], "reward_model") == 0  # nothing scored: the first
    ties = [S("a", rm=0.5), S("b", rm=0.5), S("c", rm=0.5)]
    assert select_best(ties, "reward_model") == 0
    with pytest.raises(RlvrError, match="eval.select_by"):
        select_best(samples, "length")


# ----------------------------------------------------------------------------- weighted votes
def test_vote_weights_hand_computed() -> None:
    samples = [S("a", logprob=-1.0, rm=2.0), S("b", logprob=-3.0, rm=0.0), S("c", logprob=None, rm=None)]
    assert vote_weights(samples, "none") == [1.0, 1.0, 1.0]
    assert vote_weights(samples, "logprob") == pytest.approx([1.0, math.exp(-2.0), 0.0])
    assert vote_weights(samples, "reward_model") == pytest.approx([1.0, math.exp(-2.0), 0.0])
    # a large offset changes nothing (a softmax over the problem's samples) and stays finite
    shifted = [S("a", rm=1002.0), S("b", rm=1000.0)]
    assert vote_weights(shifted, "reward_model") == pytest.approx([1.0, math.exp(-2.0)])
    assert vote_weights([S("a"), S("b")], "logprob") == [0.0, 0.0]


def test_weighted_vote_hand_computed_and_ties() -> None:
    answers = ["a", "b", "b", None]
    assert weighted_vote(answers, [1.0, 1.0, 1.0, 1.0]) == 1  # b twice: the index of b's first sample
    assert weighted_vote(answers, [0.9, 0.3, 0.3, 5.0]) == 0  # a 0.9 > b 0.6; None never votes
    assert weighted_vote(answers, [0.6, 0.3, 0.3, 0.0]) == 0  # a tie: the answer seen first (a) wins
    assert weighted_vote(["b", "a", "a", "b"], [1.0] * 4) == 0  # 2-2: b came first
    assert weighted_vote([None, None], [1.0, 1.0]) is None
    with pytest.raises(ValueError, match="length"):
        weighted_vote(["a"], [1.0, 2.0])


def test_scaling_metrics_hand_computed() -> None:
    problems = [
        # p0: right answer 5 is the minority but the confident one; the first sample is wrong
        [
            S("4", False, 0.0, -2.0, 0.1),
            S("5", True, 1.0, -0.1, 0.9),
            S("4", False, 0.0, -2.5, 0.2),
            S("4", False, 0.0, -3.0, 0.0),
        ],
        # p1: every sample right
        [S("7", True, 1.0, -1.0, 0.0)] * 4,
        # p2: all wrong, no answers in two
        [S(None, False, 0.0, -0.5, 3.0), S("1", False, 0.0, -1.0, 0.0), S(None, False, None, None, None)]
        + [S("2", False, 0.0, -0.2, 1.0)],
    ]
    metrics, records = scaling_metrics(
        problems, [1, 2, 4], ["verifier", "logprob", "reward_model"], ["none", "logprob", "reward_model"]
    )
    third = pytest.approx(1 / 3)
    assert metrics["eval/best_of_1/verifier"] == third  # the first sample: only p1 right
    assert metrics["eval/best_of_1/logprob"] == third
    assert metrics["eval/best_of_2/verifier"] == pytest.approx(2 / 3)  # p0's second sample is right
    assert metrics["eval/best_of_2/logprob"] == pytest.approx(2 / 3)  # -0.1 > -2.0
    assert metrics["eval/best_of_4/reward_model"] == pytest.approx(2 / 3)
    # N=4 plain vote on p0: "4" three times wins (wrong); weighted by exp(logprob):
    # "4": e^-2 + e^-2.5 + e^-3 = 0.267 < "5": e^-0.1 = 0.905 -> right
    assert metrics["eval/vote_4/none"] == third
    assert metrics["eval/vote_4/logprob"] == pytest.approx(2 / 3)
    # exp(rm): "4": e^0.1 + e^0.2 + e^0 = 3.33 > "5": e^0.9 = 2.46 -> wrong
    assert metrics["eval/vote_4/reward_model"] == third
    # N=2 on p0: 1-1 between "4" and "5": weight 1 ties go to the first seen ("4", wrong)
    assert metrics["eval/vote_2/none"] == third
    assert records[0]["best_of"]["2"] == {"verifier": 1, "logprob": 1, "reward_model": 1}
    assert records[0]["vote"]["4"] == {"none": 0, "logprob": 1, "reward_model": 0}
    assert records[2]["vote"]["1"]["none"] is None  # its first sample has no answer: no vote
    with pytest.raises(RlvrError, match="eval.best_of"):
        scaling_metrics(problems, [8], ["verifier"], ["none"])


@given(st.lists(st.lists(st.booleans(), min_size=4, max_size=4), min_size=1, max_size=12))
def test_verifier_best_of_all_samples_is_pass_at_n(grades: list[list[bool]]) -> None:
    """The verifier is an oracle: with a 0/1 grader best-of-N over all N samples is pass@N."""
    problems = [[S(str(i), ok, float(ok)) for i, ok in enumerate(row)] for row in grades]
    metrics, _ = scaling_metrics(problems, [4], ["verifier"], ["none"])
    expected = aggregate_pass_at_k([(4, sum(row)) for row in grades], [4])["pass@4"]
    assert metrics["eval/best_of_4/verifier"] == pytest.approx(expected)


# ----------------------------------------------------------------------------- self-verification
def test_revision_compares_normalised_tagged_answers() -> None:
    assert revision("so <answer>17</answer>", "Yes. <answer>17.0</answer>") == ("17", False)
    assert revision("so <answer>17</answer>", "No, it is <answer>18</answer>") == ("18", True)
    # no tag in the reply: kept, even though the reply mentions other numbers
    assert revision("so <answer>17</answer>", "Checking 3 + 4 = 7, yes.") == (None, False)
    assert revision("no idea", "<answer>5</answer>") == ("5", True)


def test_verify_metrics_bookkeeping() -> None:
    outcomes = [
        Outcome(before=True, after=True, revised=False, answered=True),  # confirmed
        Outcome(before=False, after=True, revised=True, answered=True),  # fixed
        Outcome(before=True, after=False, revised=True, answered=True),  # broken
        Outcome(before=False, after=False, revised=True, answered=True),  # wrong -> other wrong
        Outcome(before=False, after=False, revised=False, skipped=True),
        Outcome(before=True, after=True, revised=True, answered=True),  # right -> another right: neither
    ]
    metrics = verify_metrics(outcomes)
    assert metrics == pytest.approx(
        {
            "eval/self_verify/accuracy": 3 / 6,
            "eval/self_verify/revised": 4 / 6,
            "eval/self_verify/fixed": 1 / 6,
            "eval/self_verify/broken": 1 / 6,
            "eval/self_verify/answered": 5 / 6,
            "eval/self_verify/skipped": 1 / 6,
        }
    )


# a chat rendered as ids: [problem id] for the first turn, [problem id, 900] for the verification
# turn (problem 5's verification turn is 100 ids long: too long for the context given below)
def _encode(messages: list[dict[str, str]]) -> list[int]:
    pid = int(messages[0]["content"])
    return [pid, 900] * (50 if pid == 5 else 1) if len(messages) > 1 else [pid]


GREEDY = {0: "<answer>1</answer>", 1: "<answer>9</answer>", 2: "<answer>3</answer>", 3: "I think 9"}
GREEDY |= {4: "<answer>9</answer>", 5: "<answer>9</answer>"}
REPLY = {
    0: "Correct. <answer>1</answer>",  # right, confirmed
    1: "Wrong, it is <answer>2</answer>",  # wrong -> right: fixed
    2: "Oops <answer>4</answer>",  # right -> wrong: broken
    3: "Looks fine.",  # wrong, no tag: kept
    4: "No: <answer>8</answer>",  # wrong -> other wrong
    5: "<answer>6</answer>",  # never asked: too long for the context
}
REFERENCE = {0: "1", 1: "2", 2: "3", 3: "4", 4: "5", 5: "6"}


class ScriptedEngine:
    """First turns answer from GREEDY (sampled: the reference on even problems); verification
    turns from REPLY. Records every verification prompt it is asked."""

    def __init__(self) -> None:
        self.verify_prompts: list[list[int]] = []

    def generate(self, prompts, params):
        groups = []
        for i, p in enumerate(prompts):
            if len(p) > 1:
                self.verify_prompts.append(p)
                text = REPLY[p[0]]
            elif params.temperature == 0:
                text = GREEDY[p[0]]
            else:
                text = f"<answer>{REFERENCE[p[0]] if p[0] % 2 == 0 else 0}</answer>"
            groups.append(
                [Completion(i, p, [1, 2], [-0.5, -0.5], "stop", text=text) for _ in range(params.n)]
            )
        return groups


def _score(completions, examples, sizes):
    return [
        RewardResult(float(vote(c.text) == vote(e.reference)), {}, {}) for c, e in zip(completions, examples)
    ]


def test_self_verify_in_evaluate_counts_fixed_broken_revised_and_records_them() -> None:
    examples = [
        Example(id=str(i), prompt=[{"role": "user", "content": str(i)}], reference=REFERENCE[i])
        for i in range(6)
    ]
    engine, records = ScriptedEngine(), []
    plan = ScalingPlan(verify=SelfVerify(encode=_encode, context=20))
    metrics = evaluate(
        engine, [[i] for i in range(6)], examples, _score, 4, records=records, chunk=4, scaling=plan
    )
    assert metrics["eval/accuracy"] == pytest.approx(2 / 6)  # problems 0 and 2
    assert metrics["eval/self_verify/accuracy"] == pytest.approx(2 / 6)  # 0 kept, 1 fixed, 2 broken
    assert metrics["eval/self_verify/revised"] == pytest.approx(3 / 6)  # 1, 2, 4
    assert metrics["eval/self_verify/fixed"] == pytest.approx(1 / 6)
    assert metrics["eval/self_verify/broken"] == pytest.approx(1 / 6)
    assert metrics["eval/self_verify/skipped"] == pytest.approx(1 / 6)
    assert sorted(p[0] for p in engine.verify_prompts) == [0, 1, 2, 3, 4]  # one extra turn each, not 5
    assert [r["self_verify"]["revised"] for r in records] == [False, True, True, False, True, False]
    assert [r["self_verify"]["correct"] for r in records] == [True, True, False, False, False, False]
    assert records[1]["self_verify"]["answer"] == "2" and "skipped" in records[5]["self_verify"]
    assert records[3]["self_verify"]["reply"] == "Looks fine."


def test_best_of_in_evaluate_matches_maj_and_records_choices() -> None:
    examples = [
        Example(id=str(i), prompt=[{"role": "user", "content": str(i)}], reference=REFERENCE[i])
        for i in range(4)
    ]
    records: list[dict] = [{"id": "from an earlier call"}]  # the records of this call follow it
    plan = ScalingPlan(best_of=(1, 4))
    metrics = evaluate(
        ScriptedEngine(),
        [[i] for i in range(4)],
        examples,
        _score,
        4,
        samples=4,
        records=records,
        scaling=plan,
    )
    # even problems sample their reference every time, odd ones a wrong 0
    for key in (
        "eval/best_of_1/verifier",
        "eval/best_of_4/logprob",
        "eval/vote_4/none",
        "eval/vote_4/logprob",
    ):
        assert metrics[key] == 0.5
    assert metrics["eval/vote_4/none"] == metrics["eval/maj@4"]
    assert records[0] == {"id": "from an earlier call"}
    records = records[1:]
    assert records[0]["sampled"]["answers"] == ["1"] * 4 and records[1]["sampled"]["correct"] == [False] * 4
    assert records[0]["sampled"]["mean_logprob"] == [-0.5] * 4
    assert (
        records[2]["best_of"]["4"] == {"verifier": 0, "logprob": 0} and records[2]["vote"]["4"]["none"] == 0
    )


def test_reward_model_selection_reads_the_classifier(tmp_path) -> None:
    from reward_fixtures import tiny_classifier

    from rlvr.rewards.reward_model import load_reward_model, render, score_texts

    path = tiny_classifier(tmp_path / "rm")
    examples = [Example(id="0", prompt=[{"role": "user", "content": "0"}], reference="1")]
    texts = ["<answer>1</answer>", "<answer>2</answer> and more words", "<answer>3</answer>!"]

    class Three:
        def generate(self, prompts, params):
            return [
                [Completion(0, p, [1], [0.0], "stop", text=texts[j % 3]) for j in range(params.n)]
                for p in prompts
            ]

    records: list[dict] = []
    plan = ScalingPlan(
        best_of=(3,), select_by=("reward_model",), vote_weight=("reward_model",), reward_model=path
    )
    metrics = evaluate(Three(), [[0]], examples, _score, 4, samples=3, records=records, scaling=plan)
    _, tokenizer = load_reward_model(path, "cpu", 0)
    expected = score_texts(path, [render(tokenizer, examples[0], t) for t in texts], threads=0)
    assert records[0]["sampled"]["rm_score"] == pytest.approx(expected)
    best = max(range(3), key=expected.__getitem__)
    assert records[0]["best_of"]["3"]["reward_model"] == best
    assert metrics["eval/best_of_3/reward_model"] == float(best == 0)


# ----------------------------------------------------------------------------- config and wiring
def test_config_refuses_n_above_samples_and_a_missing_reward_model(tmp_path) -> None:
    from rlvr.config import load_config

    with pytest.raises(RlvrError, match=r"eval\.best_of.*eval\.samples=2"):
        load_config(None, [*TINY_RUN, "eval.samples=2", "eval.best_of=[1,4]"])
    with pytest.raises(RlvrError, match="eval.reward_model"):
        load_config(None, [*TINY_RUN, "eval.samples=4", "eval.best_of=[4]", "eval.select_by=reward_model"])
    with pytest.raises(RlvrError, match=r"eval\.reward_model.*config\.json"):
        load_config(None, [*TINY_RUN, f"eval.reward_model={tmp_path}"])
    cfg = load_config(None, [*TINY_RUN, "eval.samples=4", "eval.best_of=[4,1,4]", "eval.vote_weight=logprob"])
    assert cfg.eval.best_of == [1, 4] and cfg.eval.vote_weight == ["logprob"]


def test_training_run_reports_scaling_metrics_and_records(tmp_path) -> None:
    from rlvr import api
    from rlvr.log import read_jsonl

    cfg = api.load_config(
        None,
        [
            *TINY_RUN,
            f"output_dir={tmp_path}",
            "name=s",
            "train.steps=1",
            "eval.before=false",
            "data.eval_size=3",
            "eval.samples=4",
            "eval.pass_k=[1,4]",
            "eval.best_of=[1,4]",
            "eval.self_verify=true",
        ],
    )
    api.train(cfg, quiet=True)
    after = next(r for r in read_jsonl(tmp_path / "s" / "metrics.jsonl") if r["phase"] == "after")
    for n in (1, 4):
        assert {f"eval/best_of_{n}/verifier", f"eval/best_of_{n}/logprob"} <= set(after)
        assert {f"eval/vote_{n}/none", f"eval/vote_{n}/logprob"} <= set(after)
    assert {"eval/self_verify/accuracy", "eval/self_verify/revised", "eval/self_verify/fixed"} <= set(after)
    rows = read_jsonl(tmp_path / "s" / "eval_samples.jsonl")
    assert len(rows) == 3 and all({"sampled", "best_of", "vote", "self_verify"} <= set(r) for r in rows)
    assert all(len(r["sampled"]["answers"]) == 4 for r in rows)


def test_rlvr_eval_reports_scaling_metrics() -> None:
    """``rlvr eval`` (api.evaluate_model) passes the settings too."""
    from rlvr import api
    from rlvr.config import load_config

    cfg = load_config(
        None, [*TINY_RUN, "data.eval_size=2", "eval.samples=2", "eval.best_of=[2]", "eval.self_verify=true"]
    )
    metrics = api.evaluate_model(cfg, quiet=True)
    assert {"eval/best_of_2/logprob", "eval/vote_2/logprob", "eval/self_verify/revised"} <= set(metrics)
