"""Reward-model rewards: a tiny random Llama classifier, scored per completion and per group."""

from __future__ import annotations

import pytest
import torch
from reward_fixtures import tiny_classifier

from rlvr.data.example import Example
from rlvr.errors import RlvrError
from rlvr.rewards import RewardPool, RewardSpec, get_reward
from rlvr.rewards.reward_model import load_reward_model, render, score_texts


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    return tiny_classifier(tmp_path_factory.mktemp("rm"))


def example() -> Example:
    return Example(id="r", prompt=[{"role": "user", "content": "Name a colour."}])


def test_scores_match_a_direct_forward_pass(classifier):
    model, tokenizer = load_reward_model(classifier)
    text = render(tokenizer, example(), "Blue.")
    assert "Name a colour." in text and "Blue." in text
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)
    with torch.inference_mode():
        direct = model(**ids).logits[0, 0].item()
    assert get_reward("reward_model")("Blue.", example(), path=classifier) == pytest.approx(direct, abs=1e-5)


def test_batched_scores_equal_one_by_one_scores(classifier):
    _, tokenizer = load_reward_model(classifier)
    texts = [
        render(tokenizer, example(), c) for c in ["Red", "A long answer: deep ultramarine blue.", "Green!"]
    ]
    batched = score_texts(classifier, texts, batch_size=3)
    single = [score_texts(classifier, [t])[0] for t in texts]
    assert batched == pytest.approx(single, abs=1e-4)
    assert len(set(round(s, 6) for s in single)) == 3  # different texts, different scores


def test_per_completion_and_group_rewards_agree_in_the_pool(classifier):
    completions = ["Red", "Blue, obviously.", "Green", "Yellow!"]
    specs = [
        RewardSpec(name="reward_model", params={"path": classifier}),
        RewardSpec(name="reward_model_group", params={"path": classifier, "batch_size": 4}),
    ]
    with RewardPool(specs, workers=1, timeout_s=30) as pool:
        results = pool.score(completions, [example()] * 4, group_sizes=[4])
    for result in results:
        assert result.ok
        assert result.components["reward_model"] == pytest.approx(
            result.components["reward_model_group"], abs=1e-4
        )


def test_bad_paths_fail_when_the_spec_is_built(classifier, tmp_path):
    with pytest.raises(RlvrError, match="config.json"):
        RewardSpec(name="reward_model", params={"path": str(tmp_path)})
    with pytest.raises(RlvrError, match="does not exist"):
        RewardSpec(name="reward_model_group", params={"path": str(tmp_path / "missing")})
    with pytest.raises(ValueError, match="label"):
        score_texts(classifier, ["x"], label=3)
