"""Every registered reward works from ``rlvr train`` and ``rlvr eval`` (tiny-random, one step).

A reward that is registered but cannot run in the trainer (``self_certainty`` once needed logprobs
no trainer passed) or in evaluation (a group reward scored without groups) is a promise the library
does not keep. Here every name in the reward registry is a component of a real one-step training
run, and every reward that needs something only the trainer or evaluator can supply (token counts,
logprobs, self-certainty, the group) is also the scorer of a real ``evaluate_model`` run. A newly
registered reward fails :func:`test_every_registered_reward_is_exercised` until it is added here.
Every recipe runs with its own rewards in ``tests/test_recipes.py``.

External resources use the test fixtures: the judge talks to a real local OpenAI-compatible server
(``rlvr.rewards.judge_server``) whose model is scripted (``reward_fixtures.ScriptedJudge``); the
reward model is a tiny random classifier; ``code`` needs bubblewrap and is skipped (saying so)
where the machine lacks it.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from reward_fixtures import start_scripted_judge, tiny_classifier
from tiny import TINY_RUN

from rlvr import api
from rlvr.config import load_config
from rlvr.log import read_jsonl
from rlvr.rewards import list_rewards
from rlvr.rewards.registry import get_reward, is_group_reward
from rlvr.rewards.spec import POOL_KWARGS

HAS_BWRAP = shutil.which("bwrap") is not None
BASE = [item for item in TINY_RUN if not item.startswith("rewards.functions=")] + [
    "train.steps=1",
    "eval.before=false",
    "data.train_size=16",
    "data.eval_size=2",
    "rollout.max_batch_sequences=8",
]

ROWS = [  # one row carries what choice, code and ifeval each read
    {
        "question": f"Pick the letter, write add(a, b), lowercase, at most 50 words ({i}).",
        "answer": "B",
        "tests": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
        "entry_point": "add",
        "constraints": [{"type": "max_words", "n": 50}, {"type": "lowercase"}],
        "rubric": f"Rubric {i}: the letter B.",
    }
    for i in range(6)
]


@pytest.fixture(scope="module")
def judge():
    server, url, scripted = start_scripted_judge("Score: 7")
    yield url, scripted
    server.shutdown()


@pytest.fixture(scope="module")
def classifier(tmp_path_factory) -> str:
    return tiny_classifier(tmp_path_factory.mktemp("rm"))


def builtin_rewards() -> list[str]:
    """The rewards rlvr registers itself (test fixtures register a few more)."""
    return [n for n in list_rewards() if get_reward(n).__module__.startswith("rlvr.")]


def judge_item(url: str, rubric: str) -> dict[str, Any]:
    return {"name": "judge", "params": {"url": url, "rubric": rubric, "retries": 0, "timeout_s": 5}}


def generated_rewards(url: str, classifier: str) -> list[dict[str, Any]]:
    """Components of the run on reasoning-gym chain_sum (numeric references, the rg entry)."""
    return [
        {"name": "reasoning_gym", "params": {"extract": "auto"}},
        {"name": "math"},
        {"name": "exact_match"},
        {"name": "numeric_closeness"},
        {"name": "format"},
        {"name": "think_format"},
        {"name": "repetition_penalty"},
        {"name": "cosine_length"},  # max_tokens follows rollout.max_new_tokens
        {"name": "length_penalty"},
        {"name": "overlong", "params": {"buffer": 2}},
        {"name": "confidence"},
        {"name": "self_certainty"},
        {"name": "majority_vote"},
        {"name": "verifier", "params": {"default": "math"}},
        judge_item(url, "Task {metadata[rg_entry][metadata][source_dataset]}: {question} / {answer}. Score:"),
        {"name": "reward_model", "params": {"path": classifier}},
        {"name": "reward_model_group", "params": {"path": classifier}},
    ]


def table_rewards(url: str) -> list[dict[str, Any]]:
    """Components of the run on a JSONL file whose rows carry choice, code and ifeval metadata."""
    items = [{"name": "choice"}, {"name": "ifeval"}, judge_item(url, "{metadata[rubric]} {answer}")]
    if HAS_BWRAP:
        items.append({"name": "code"})
    return items


def run_config(tmp_path: Path, name: str, rewards: list[dict[str, Any]], *extra: str):
    if name == "table":
        data = tmp_path / "rows.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
        extra = (f"data.path={data}", *extra)
    return load_config(
        None,
        [*BASE, f"rewards.functions={json.dumps(rewards)}", f"output_dir={tmp_path}", f"name={name}", *extra],
    )


# rewards that need an environment's episodes, run through the collector by their own tests
ELSEWHERE = {
    "environment": "tests/test_envs_games_wiring.py",
    "process_reward_model": "tests/test_credit_steps.py",  # per-step rewards need step_returns or gae
    "generative_process_reward": "tests/test_credit_steps.py",  # per-step rewards need step_returns or gae
    # cross-role rewards read what a role game puts in the metadata: run through the trainer there
    "generated_tests": "tests/test_roles.py",
    "test_discrimination": "tests/test_roles.py",
    "verdict_agreement": "tests/test_roles.py",
}


def test_every_registered_reward_is_exercised() -> None:
    covered = {item["name"] for item in generated_rewards("u", "p") + table_rewards("u")} | set(ELSEWHERE)
    missing = sorted(set(builtin_rewards()) - covered)
    if missing == ["code"] and not HAS_BWRAP:
        pytest.skip("code: bubblewrap (bwrap) is not installed, and the reward refuses to run without it")
    assert not missing, f"registered rewards no test runs through the trainer: {missing} (add them here)"


@pytest.mark.parametrize("run", ["generated", "table"])
def test_every_reward_scores_a_training_step(run: str, tmp_path: Path, judge, classifier: str) -> None:
    url, scripted = judge
    rewards = generated_rewards(url, classifier) if run == "generated" else table_rewards(url)
    cfg = run_config(tmp_path, run, rewards)
    api.train(cfg, quiet=True)
    metrics = [r for r in read_jsonl(tmp_path / run / "metrics.jsonl") if r["phase"] == "train"]
    assert len(metrics) == 1
    (step,) = metrics
    errors = {k: v for k, v in step.items() if k.startswith("reward_errors/") and v}
    assert step["reward/errors"] == 0, errors
    for item in rewards:
        assert f"reward/{item['name']}" in step, item["name"]
    samples = list(read_jsonl(tmp_path / run / "samples.jsonl"))
    assert len(samples) == cfg.rollout.prompts_per_step * cfg.rollout.group_size
    for sample in samples:
        assert not sample["errors"] and set(sample["rewards"]) == {i["name"] for i in rewards}
        assert all(math.isfinite(v) for v in sample["rewards"].values())
    if run == "generated":
        # the engine's per-token self-certainty reached the reward: positive, not one constant
        certainty = [s["rewards"]["self_certainty"] for s in samples]
        assert min(certainty) > 0 and len(set(certainty)) > 1
        assert any("Task chain_sum:" in p for p in scripted.prompts)  # the rubric read the metadata
    else:
        assert any(re.match(r"Rubric \d: the letter B\. ", p) for p in scripted.prompts)


def needs_the_caller(name: str) -> bool:
    """A reward that reads something only the trainer/evaluator supplies: a group, token counts,
    finish reasons, logprobs or self-certainty (``verifier`` passes them all on)."""
    import inspect

    fn = get_reward(name)
    return is_group_reward(fn) or bool(set(inspect.signature(fn).parameters) & set(POOL_KWARGS))


@pytest.mark.parametrize("name", [n for n in builtin_rewards() if needs_the_caller(n) and n not in ELSEWHERE])
def test_rewards_that_need_the_caller_score_an_evaluation(name: str, tmp_path: Path, classifier: str) -> None:
    (item,) = [i for i in generated_rewards("u", classifier) if i["name"] == name]
    cfg = run_config(tmp_path, "eval", [item], "eval.samples=2", "eval.pass_k=[1,2]")
    metrics = api.evaluate_model(cfg, quiet=True)
    assert metrics["eval/reward_errors"] == 0
    assert math.isfinite(metrics["eval/mean@2"]) and 0 <= metrics["eval/maj@2"] <= 1


def test_self_certainty_with_an_environment_is_refused_at_start(tmp_path: Path) -> None:
    """Episodes carry no per-token self-certainty: one error before training, not one per call."""
    from env_fixtures import TwoTurns  # noqa: F401  (registers fixture_two_turns)

    from rlvr.errors import RlvrError

    items = ["env.name=fixture_two_turns", "rewards.functions=[{name: self_certainty}]"]
    cfg = load_config(None, [*BASE, *items, f"output_dir={tmp_path}", "name=env"])
    with pytest.raises(RlvrError, match="self_certainty scores single-turn completions"):
        api.train(cfg, quiet=True)
    assert not (tmp_path / "env" / "metrics.jsonl").exists()
