"""Reward-model training (``stage=rm``, ``rlvr rm``): the Bradley–Terry loss, verifier-built and
file pairs, a tiny-random run whose saved model the ``reward_model`` reward loads unchanged, and a
pipeline whose RL stage is rewarded by the reward model an earlier stage trained."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch
from tiny import TINY_RUN

from rlvr import api
from rlvr.algo.preference import bradley_terry_loss
from rlvr.config import load_config
from rlvr.data.example import Example
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl
from rlvr.models import load_tokenizer
from rlvr.rewards.reward_model import load_reward_model, reward_model_reward
from rlvr.train.stages.pipeline import stage_configs
from rlvr.train.stages.reward_model import load_classifier, pair_scores
from rlvr.train.stages.reward_pairs import RewardPair, group_pairs, read_pairs


# ------------------------------------------------------------------------------ the loss
def test_bradley_terry_loss_against_hand_values() -> None:
    chosen, rejected = torch.tensor([2.0, 0.0, -1.0]), torch.tensor([0.0, 0.0, 1.0])
    loss, stats = bradley_terry_loss(chosen, rejected)
    expected = [math.log1p(math.exp(-2.0)), math.log(2.0), math.log1p(math.exp(2.0))]
    assert loss.tolist() == pytest.approx(expected, abs=1e-6)
    assert stats["accuracy"] == pytest.approx(1 / 3)  # a tie is not ranked right
    assert stats["margin"] == pytest.approx(0.0)
    with_margin, _ = bradley_terry_loss(chosen, rejected, margin=1.0)
    assert with_margin[0].item() == pytest.approx(math.log1p(math.exp(-1.0)), abs=1e-6)
    # the gradient pushes chosen up and rejected down
    c, r = torch.zeros(1, requires_grad=True), torch.zeros(1, requires_grad=True)
    bradley_terry_loss(c, r)[0].sum().backward()
    assert c.grad.item() == pytest.approx(-0.5) and r.grad.item() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="one of each per pair"):
        bradley_terry_loss(torch.zeros(2), torch.zeros(3))


# ------------------------------------------------------------------------------ pairs
def test_group_pairs_prefers_the_higher_score_and_skips_ties_errors_and_repeats() -> None:
    example = Example(id="q", prompt=[{"role": "user", "content": "q"}])
    scored = [("a", 1.0), ("b", 0.0), ("c", 0.0), ("a", 1.0), ("d", None), ("e", float("nan"))]
    pairs, why = group_pairs(example, scored, most=10, rng=random.Random(0))
    assert why is None
    assert sorted((p.chosen, p.rejected) for p in pairs) == [("a", "b"), ("a", "c")]
    assert all(p.rewards == (1.0, 0.0) for p in pairs)
    few, _ = group_pairs(example, scored, most=1, rng=random.Random(0))
    assert len(few) == 1
    assert group_pairs(example, [("a", 0.5), ("b", 0.5)], 4, random.Random(0)) == ([], "tie")
    assert group_pairs(example, [("a", 0.5), ("a", 0.9)], 4, random.Random(0)) == ([], "tie")  # one text
    assert group_pairs(example, [("a", 1.0), ("b", None)], 4, random.Random(0)) == ([], "errors")


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_file_pairs_read_text_and_messages_and_bad_rows_name_the_row(tmp_path) -> None:
    rm = load_config(None, ["stage=rm"]).rm
    rows = [
        {"prompt": "2+2?", "chosen": "4", "rejected": "5"},
        {
            "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
            "chosen": [{"role": "assistant", "content": "Hello."}],
            "rejected": [{"role": "assistant", "content": "Go away."}],
        },
    ]
    pairs = read_pairs(rm, str(_write(tmp_path / "ok.jsonl", rows)), "train")
    assert [(p.chosen, p.rejected) for p in pairs] == [("4", "5"), ("Hello.", "Go away.")]
    assert pairs[0].example.prompt == [{"role": "user", "content": "2+2?"}]
    assert pairs[1].example.prompt[0]["role"] == "system"
    bad = {
        "line 2: column 'rejected' is missing": [rows[0], {"prompt": "x", "chosen": "y"}],
        "line 1: 'chosen' and 'rejected' hold the same": [{"prompt": "x", "chosen": "y", "rejected": "y"}],
        "line 1: column 'chosen' must be text or a list of one assistant message": [
            {"prompt": "x", "chosen": [{"role": "user", "content": "y"}], "rejected": "z"}
        ],
        r"line 1: prompt\[0\] must be a message": [{"prompt": [{"role": 1}], "chosen": "y", "rejected": "z"}],
    }
    for message, bad_rows in bad.items():
        with pytest.raises(RlvrError, match=message):
            read_pairs(rm, str(_write(tmp_path / "bad.jsonl", bad_rows)), "train")


# ------------------------------------------------------------------------------ a run
# learnable by a tiny random model: the chosen completion ends in "yes", the rejected in "no"
PAIRS = [
    {"prompt": f"Question {i}?", "chosen": f"answer {i} yes", "rejected": f"answer {i} no"} for i in range(24)
]


def _rm_config(tmp_path: Path, *extra: str):
    train = _write(tmp_path / "train_pairs.jsonl", PAIRS[:16])
    held_out = _write(tmp_path / "held_out_pairs.jsonl", PAIRS[16:])
    return load_config(
        None,
        [
            *TINY_RUN,
            "stage=rm",
            "rm.pairs=file",
            f"rm.path={train}",
            f"rm.eval_path={held_out}",
            "rm.batch_size=4",
            "rm.epochs=6",
            "optim.lr=3e-3",
            "optim.warmup_steps=0",
            f"output_dir={tmp_path}",
            *extra,
        ],
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("rm")
    cfg = _rm_config(out)
    return cfg, api.train(cfg, quiet=True)


def test_a_reward_model_run_learns_the_pairs_and_logs_before_and_after(trained) -> None:
    cfg, results = trained
    assert results["run"]["steps"] == 6 * 4 and results["run"]["updates"] == 24
    assert results["after"]["rm/eval_accuracy"] == 1.0
    assert results["after"]["rm/eval_loss"] < results["before"]["rm/eval_loss"] - 0.1
    rows = read_jsonl(Path(cfg.output_dir) / cfg.name / "metrics.jsonl")
    evals = [r for r in rows if r["phase"] == "eval"]
    assert [r["step"] for r in evals] == [0, 24] and evals[0]["rm/pairs"] == 16.0
    train = [r for r in rows if r["phase"] == "train"]
    assert train[-1]["rm/loss"] < train[0]["rm/loss"]


def test_the_saved_reward_model_loads_into_the_reward_and_scores_what_it_was_trained_on(trained) -> None:
    cfg, results = trained
    path = results["model"]
    assert Path(path).parent.parent.name == "checkpoints"
    example = Example(id="held", prompt=[{"role": "user", "content": "Question 20?"}])
    good = reward_model_reward("answer 20 yes", example, path=path)
    bad = reward_model_reward("answer 20 no", example, path=path)
    assert good > bad
    # the reward's score is the classifier's training-time score of the same text
    model, tokenizer = load_reward_model(path)
    with torch.no_grad():
        chosen, rejected = pair_scores(
            model, tokenizer, [RewardPair(example, "answer 20 yes", "answer 20 no", "")], 512, "cpu"
        )
    assert (chosen.item(), rejected.item()) == pytest.approx((good, bad), abs=1e-5)


def test_a_reward_model_run_that_fails_leaves_nothing_and_resume_is_answered(tmp_path, trained) -> None:
    with pytest.raises(RlvrError, match="rm.pairs=file needs rm.path"):
        api.train(
            load_config(None, [*TINY_RUN, "stage=rm", "rm.pairs=file", f"output_dir={tmp_path}"]), quiet=True
        )
    assert not any(tmp_path.iterdir())
    with pytest.raises(RlvrError, match="cannot play an environment's episodes"):
        api.train(load_config("self_verify", [*TINY_RUN, "stage=rm", f"output_dir={tmp_path}"]), quiet=True)
    assert not any(tmp_path.iterdir())
    cfg, _ = trained
    assert api.train(cfg, resume=True, quiet=True) == {}  # finished: nothing to do


def test_sampled_pairs_are_the_policy_s_groups_ordered_by_the_verifier(tmp_path) -> None:
    cfg = load_config(
        None,
        [
            *TINY_RUN,
            "stage=rm",
            "rm.prompts=4",
            "rm.eval_prompts=2",
            "rm.epochs=1",
            f"output_dir={tmp_path}",
            "name=s",
        ],
    )
    results = api.train(cfg, quiet=True)
    rows = read_jsonl(tmp_path / "s" / "pairs.jsonl")
    held_out = read_jsonl(tmp_path / "s" / "eval_pairs.jsonl")
    assert rows and held_out and results["after"]["rm/eval_pairs"] == len(held_out)
    for row in rows + held_out:  # the reward is 0.01 per character: chosen is the longer completion
        chosen, rejected = row["chosen"][0]["content"], row["rejected"][0]["content"]
        assert row["chosen_reward"] == pytest.approx(0.01 * len(chosen))
        assert row["rejected_reward"] == pytest.approx(0.01 * len(rejected))
        assert len(chosen) > len(rejected)
    train_ids = {r["id"] for r in rows}
    assert not train_ids & {r["id"] for r in held_out}  # held-out pairs come from held-out prompts
    assert len({r["id"] for r in rows}) <= 4 and max(sum(r["id"] == i for r in rows) for i in train_ids) <= 4


# ------------------------------------------------------------------------------ in a pipeline
def test_a_pipeline_rewards_its_rl_stage_with_the_reward_model_an_earlier_stage_trained(tmp_path) -> None:
    train = _write(tmp_path / "pairs.jsonl", PAIRS[:8])
    stages = (
        "stages=[{name: judge, stage: rm, set: {rm.pairs: file, rm.path: '"
        + str(train)
        + "', rm.epochs: 1}},"
        " {name: policy, stage: rl, set: {train.steps: 1, rewards.functions: "
        "[{name: reward_model, params: {path: 'stage:judge'}}]}}]"
    )
    cfg = api.load_config(None, [*TINY_RUN, f"output_dir={tmp_path}", "name=p", stages])
    judge, policy = stage_configs(cfg, {"judge": "/models/judge"})
    assert policy.rewards.functions[0].params["path"] == "/models/judge"
    assert (
        policy.model.name == "tiny-random"
    )  # a reward model is no policy: the RL stage starts from the base
    results = api.train(cfg, quiet=True)
    manifest = json.loads((tmp_path / "p" / "pipeline.json").read_text())
    judge_model = manifest["stages"][0]["model"]
    saved = load_config(tmp_path / "p" / "policy" / "config.yaml")
    assert saved.rewards.functions[0].params["path"] == judge_model
    assert saved.model.name == "tiny-random"
    assert results["run"]["updates"] >= 1 and results["run"]["reward_errors"] == 0
    scored = read_jsonl(tmp_path / "p" / "policy" / "samples.jsonl")
    assert scored and all(math.isfinite(r["reward"]) for r in scored)


def test_the_classifier_head_is_one_logit_on_the_base_model() -> None:
    tokenizer = load_tokenizer("tiny-random")
    model = load_classifier("tiny-random", tokenizer, "cpu")
    assert model.config.num_labels == 1 and model.config.pad_token_id == tokenizer.pad_token_id
    with pytest.raises(RlvrError, match="rm.base"):
        load_classifier(str(Path(__file__).parent / "golden"), tokenizer, "cpu")
