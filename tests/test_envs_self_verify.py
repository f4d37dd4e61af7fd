"""The self-verification environment (rlvr.envs.self_verify): the verdict reward against the truth
about the first answer, the final answer, the outcome counters, and a run through the trainer."""

from __future__ import annotations

import random

import pytest
from tiny import TINY_RUN

from rlvr import api
from rlvr.data.code_functions import all_problems
from rlvr.data.example import Example
from rlvr.envs import make_env
from rlvr.envs.self_verify import VERIFY_CODE_PROMPT, VERIFY_PROMPT, last_answer, verdict
from rlvr.log import read_jsonl
from rlvr.rewards import sandbox

EXAMPLE = Example(id="q", prompt=[{"role": "user", "content": "12 + 5 = ?"}], reference="17")


def play(first: str, second: str, **params) -> tuple[list[float], dict[str, float], list]:
    env = make_env("self_verify", params)
    opening = env.reset(EXAMPLE, random.Random(0))
    assert opening == EXAMPLE.prompt
    one = env.step(first)
    assert not one.done and one.messages == [{"role": "user", "content": VERIFY_PROMPT}]
    two = env.step(second)
    assert two.done and not two.messages
    return [one.reward, two.reward], env.outcome(), opening


def test_the_verdict_is_rewarded_when_it_agrees_with_the_truth_about_the_first_answer() -> None:
    right, wrong = "<answer>17</answer>", "<answer>18</answer>"
    cases = {  # (first, second): (turn rewards, first_correct, final_correct, agrees, revised, fixed, broken)
        (right, "<verdict>correct</verdict> <answer>17</answer>"): ([0.0, 0.5], 1, 1, 1, 0, 0, 0),
        (right, "<verdict>incorrect</verdict> <answer>16</answer>"): ([0.0, 0.0], 1, 0, 0, 1, 0, 1),
        (wrong, "<verdict>incorrect</verdict> <answer>17.0</answer>"): ([0.0, 0.5], 0, 1, 1, 1, 1, 0),
        (wrong, "<verdict>correct</verdict> <answer>18</answer>"): ([0.0, 0.0], 0, 0, 0, 0, 0, 0),
        (wrong, "<verdict>incorrect</verdict>"): ([0.0, 0.5], 0, 0, 1, 0, 0, 0),  # no new answer: keeps 18
        (right, "It looks fine."): ([0.0, 0.0], 1, 1, 0, 0, 0, 0),  # no verdict: no verdict reward
    }
    for (first, second), (rewards, fc, final, agrees, revised, fixed, broken) in cases.items():
        got, outcome, _ = play(first, second)
        assert got == rewards, (first, second)
        assert outcome["first_correct"] == fc and outcome["final_correct"] == final, (first, second)
        assert outcome["verdict_agrees"] == agrees and outcome["revised"] == revised, (first, second)
        assert outcome["fixed"] == fixed and outcome["broken"] == broken, (first, second)
    rewards, _, _ = play(
        right, "<verdict>correct</verdict><answer>17</answer>", first_weight=1.0, verdict_weight=2.0
    )
    assert rewards == [1.0, 2.0]


def test_answers_and_verdicts_are_read_from_the_last_tag_and_bounded() -> None:
    assert last_answer("<answer>1</answer> then <answer> 2 </answer>", 200) == " 2 "
    assert last_answer("<answer>" + "9" * 300 + "</answer>", 200) is None
    assert verdict("<verdict>incorrect</verdict> ... <VERDICT> Correct </VERDICT>") is True
    assert verdict("<verdict>maybe</verdict>") is None
    _, outcome, _ = play("<answer>" + "1" * 5000 + "</answer>", "<verdict>incorrect</verdict>")
    assert outcome["first_correct"] == 0 and outcome["verdict_agrees"] == 1
    env = make_env("self_verify")
    with pytest.raises(ValueError, match="no reference answer"):
        env.reset(Example(id="x", prompt=[{"role": "user", "content": "hi"}]), random.Random(0))


def test_a_self_verify_run_logs_both_turns_and_the_outcomes(tmp_path) -> None:
    cfg = api.load_config(
        "self_verify",
        [*TINY_RUN, "train.steps=2", f"output_dir={tmp_path}", "name=sv", "eval.before=false"],
    )
    api.train(cfg, quiet=True)
    rows = read_jsonl(tmp_path / "sv" / "samples.jsonl")
    assert rows and all(len(r["turn_rewards"]) == 2 for r in rows if not r.get("errors"))
    assert all(VERIFY_PROMPT in str(r["conversation"]) for r in rows if not r.get("errors"))
    metrics = [r for r in read_jsonl(tmp_path / "sv" / "metrics.jsonl") if r["phase"] == "train"]
    assert all("reward/env/verdict_agrees" in r for r in metrics), sorted(metrics[0])


def test_the_recipes_episode_budget_leaves_the_second_turn_its_tokens() -> None:
    """env.max_tokens counts the whole response ledger (both turns, the check request, the turn
    markers); at 96 the bundled model's second turn got one token and no verdict was ever given."""
    from rlvr.models.loading import load_tokenizer

    cfg = api.load_config("self_verify")
    tokenizer = load_tokenizer(cfg.model.name)
    request = len(tokenizer(VERIFY_PROMPT)["input_ids"])
    markers = 16  # the end of turn 1, the user turn's and the assistant turn's markers
    assert cfg.env.max_tokens >= 2 * cfg.rollout.max_new_tokens + request + markers


@pytest.mark.skipif(sandbox.backend_name() != "bwrap", reason="model-written code runs only under bubblewrap")
def test_check_code_judges_each_turns_program_by_the_hidden_tests_in_the_sandbox() -> None:
    """recipes/self_verify_code.yaml: the verdict is rewarded against the hidden tests' verdict on the
    first program; a corrected second program counts as fixed."""
    task = all_problems()[0]
    right = f"```python\n{task.reference}```"
    wrong = "```python\n" + task.reference.replace("return", "return 1 + ") + "```"
    cases = {  # (first, second): (turn-2 reward, first_correct, final_correct, agrees, fixed, broken)
        (right, "<verdict>correct</verdict>"): (0.5, 1, 1, 1, 0, 0),
        (wrong, "<verdict>correct</verdict>"): (0.0, 0, 0, 0, 0, 0),
        (wrong, "<verdict>incorrect</verdict>\n" + right): (0.5, 0, 1, 1, 1, 0),
        (right, "<verdict>incorrect</verdict>\n" + wrong): (0.0, 1, 0, 0, 0, 1),
    }
    for (first, second), (reward, fc, final, agrees, fixed, broken) in cases.items():
        env = make_env("self_verify", {"check": "code"})
        env.reset(task, random.Random(0))
        one = env.step(first)
        assert one.messages == [{"role": "user", "content": VERIFY_CODE_PROMPT}]
        assert env.step(second).reward == reward, (first, second)
        outcome = env.outcome()
        assert (outcome["first_correct"], outcome["final_correct"]) == (fc, final), (first, second)
        assert (outcome["verdict_agrees"], outcome["fixed"], outcome["broken"]) == (agrees, fixed, broken)
    env = make_env("self_verify", {"check": "code"})
    with pytest.raises(ValueError, match="metadata.tests"):
        env.reset(EXAMPLE, random.Random(0))


def test_the_code_recipes_episode_budget_leaves_the_second_turn_its_tokens() -> None:
    from rlvr.models.loading import load_tokenizer

    cfg = api.load_config("self_verify_code")
    request = len(load_tokenizer(cfg.model.name)(VERIFY_CODE_PROMPT)["input_ids"])
    assert cfg.env.params["check"] == "code"
    assert cfg.env.max_tokens >= 2 * cfg.rollout.max_new_tokens + request + 16
