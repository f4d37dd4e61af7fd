"""The DPO stage (rlvr.train.stages.preference): pairs from a file and from scored groups, the
objective's reference cache and accumulation, and a run through ``rlvr.api.train`` on tiny-random."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from tiny import TINY_RUN

from rlvr import api
from rlvr.collect.collector import Collection
from rlvr.config import load_config
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl
from rlvr.models import load_model, load_tokenizer
from rlvr.train.learn.batch import build_batch
from rlvr.train.learn.learner import Learner
from rlvr.train.learn.logprobs import completion_logprobs
from rlvr.train.stages.preference import FilePairs, OnPolicyPairs, PreferenceObjective
from rlvr.trajectory import GIVEN, SAMPLED, Segment, Trajectory, TrajectoryGroup

ROWS = [
    {"prompt": "What is 2+2?", "chosen": "4", "rejected": "5"},
    {
        "prompt": [{"role": "user", "content": "Say hi"}],
        "chosen": [{"role": "assistant", "content": "Hi there!"}],
        "rejected": [{"role": "assistant", "content": "No."}],
    },
    {"prompt": "Capital of France?", "chosen": "Paris", "rejected": "London, I think"},
    {
        "prompt": [
            {"role": "user", "content": "Count to two."},
            {"role": "assistant", "content": "1, 2"},
            {"role": "user", "content": "Now to three."},
        ],
        "chosen": [{"role": "assistant", "content": "1, 2, 3"}],
        "rejected": [{"role": "assistant", "content": "3, 2, 1"}],
    },
]


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("tiny-random")


def write_rows(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def config(tmp_path: Path, *extra: str, rows: list = ROWS):
    pairs = write_rows(tmp_path / "pairs.jsonl", rows)
    return load_config(
        None,
        [*TINY_RUN, "stage=dpo", "dpo.pairs=file", f"dpo.path={pairs}", f"output_dir={tmp_path}", *extra],
    )


def learner_for(cfg) -> Learner:
    tokenizer = load_tokenizer(cfg.model.name)
    return Learner(cfg, load_model(cfg.model.name), tokenizer.pad_token_id)


# ------------------------------------------------------------------------------ file pairs
def test_file_pairs_hold_chosen_and_rejected_with_the_assistant_tokens_given(tmp_path, tokenizer) -> None:
    pairs = FilePairs(config(tmp_path), tokenizer).pairs
    assert len(pairs) == len(ROWS) and all(len(g) == 2 for g in pairs)
    for row, group in zip(ROWS, pairs):
        chosen, rejected = group.trajectories
        prompt = (
            [{"role": "user", "content": row["prompt"]}] if isinstance(row["prompt"], str) else row["prompt"]
        )
        text = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
        assert chosen.prompt_ids == rejected.prompt_ids == tokenizer(text)["input_ids"]
        for t, key in ((chosen, "chosen"), (rejected, "rejected")):
            reply = row[key] if isinstance(row[key], str) else row[key][0]["content"]
            given = [tid for s in t.segments if s.kind == GIVEN for tid in s.token_ids]
            assert tokenizer.decode(given) == reply + "<|im_end|>"  # the end of turn is trained
            assert t.segments[0].kind == GIVEN and t.num_sampled == 0
        assert (chosen.reward, rejected.reward) == (1.0, 0.0)
    # a multi-turn prompt: its assistant turn is prompt, not trained
    assert "1, 2<|im_end|>" in tokenizer.decode(pairs[3].trajectories[0].prompt_ids)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"prompt": "q", "chosen": "a"}, "pairs.jsonl line 2: column 'rejected' is missing"),
        (
            {"prompt": "q", "chosen": "same", "rejected": "same"},
            "pairs.jsonl line 2: columns 'chosen' and 'rejected' hold the same",
        ),
        (
            {"prompt": "q", "chosen": [{"role": "assistant", "content": "a"}], "rejected": "a"},
            "pairs.jsonl line 2: columns 'chosen' and 'rejected' hold the same",
        ),
        (
            {
                "prompt": "q",
                "chosen": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "a"}],
                "rejected": "b",
            },
            "pairs.jsonl line 2: column 'chosen' must start with the assistant's reply",
        ),
        (
            {"prompt": "q", "chosen": "a", "rejected": [{"role": "assistant"}]},
            "pairs.jsonl line 2: message 1 in column 'rejected'",
        ),
    ],
)
def test_a_malformed_row_is_an_error_naming_file_row_and_key(tmp_path, tokenizer, row, message) -> None:
    with pytest.raises(RlvrError, match=message):
        FilePairs(config(tmp_path, rows=[ROWS[0], row]), tokenizer)


def test_renamed_columns_and_a_missing_path(tmp_path, tokenizer) -> None:
    rows = [{"q": r["prompt"], "good": r["chosen"], "bad": r["rejected"]} for r in ROWS]
    cfg = config(tmp_path, "dpo.prompt_key=q", "dpo.chosen_key=good", "dpo.rejected_key=bad", rows=rows)
    assert len(FilePairs(cfg, tokenizer).pairs) == len(ROWS)
    with pytest.raises(RlvrError, match="dpo.pairs=file needs dpo.path"):
        FilePairs(load_config(None, ["model.name=tiny-random", "stage=dpo", "dpo.pairs=file"]), tokenizer)


def test_file_pairs_shuffle_per_epoch_and_resume_exactly(tmp_path, tokenizer) -> None:
    cfg = config(tmp_path, "rollout.prompts_per_step=3")
    source = FilePairs(cfg, tokenizer)
    steps = [[g.example_index for g in source.collect().kept] for _ in range(4)]
    flat = [i for s in steps for i in s]
    assert sorted(flat[:4]) == sorted(flat[4:8]) == [0, 1, 2, 3]  # every pair once an epoch
    assert flat[:4] != flat[4:8]  # a fresh order (seed 0: the two first epochs differ)
    first = FilePairs(cfg, tokenizer)
    first.collect()
    resumed = FilePairs(cfg, tokenizer)
    resumed.load_state(json.loads(json.dumps(first.state())))
    assert [[g.example_index for g in resumed.collect().kept] for _ in range(3)] == steps[1:]
    metrics = source.collect().metrics
    assert metrics["dpo/pairs"] == metrics["groups/sampled"] == 3 and metrics["completion/tokens"] > 0


# ------------------------------------------------------------------------------ on-policy pairs
def sampled(reward: float | None, tokens: list[int], errors: dict | None = None) -> Trajectory:
    return Trajectory(
        [1, 2], [Segment(SAMPLED, tokens, [-0.5] * len(tokens))], "stop", reward=reward, errors=errors or {}
    )


class StubCollector:
    def __init__(self, groups: list[TrajectoryGroup]) -> None:
        self.groups, self.asked = groups, []

    def collect(self, count: int | None = None, greedy_baseline: bool = False) -> Collection:
        self.asked.append(count)
        return Collection([], self.groups, {"groups/sampled": float(len(self.groups)), "reward/mean": 0.5})


def test_on_policy_pairs_best_with_worst_skipping_ties_and_errors() -> None:
    best, worst, middle = sampled(0.9, [5]), sampled(0.1, [6]), sampled(0.5, [7])
    errored_low = sampled(0.0, [8], {"r": "boom"})  # on_error=zero: scored 0, never paired
    errored_high = sampled(None, [9], {"r": "boom"})  # skip_group: no reward
    groups = [
        TrajectoryGroup(0, [middle, errored_low, best, worst, errored_high]),
        TrajectoryGroup(1, [sampled(0.3, [1]), sampled(0.3, [2])]),  # a tie
        TrajectoryGroup(2, [sampled(1.0, [3]), sampled(0.0, [4], {"r": "boom"})]),  # one scored
    ]
    cfg = load_config(None, ["model.name=tiny-random", "stage=dpo", "rollout.prompts_per_step=3"])
    collector = StubCollector(groups)
    collection = OnPolicyPairs(cfg, collector).collect()
    assert collector.asked == [3]
    assert [[t.reward for t in g.trajectories] for g in collection.kept] == [[0.9, 0.1]]
    assert collection.kept[0].trajectories == [best, worst] and collection.kept[0].example_index == 0
    assert collection.seen == groups
    m = collection.metrics
    assert (m["dpo/pairs"], m["dpo/ties_skipped"], m["dpo/errors_skipped"], m["groups/kept"]) == (1, 1, 1, 1)
    assert m["reward/mean"] == 0.5 and m["groups/sampled"] == 3  # the collector's own metrics


# ------------------------------------------------------------------------------ the objective
@torch.no_grad()
def margins(learner: Learner, pairs: list[TrajectoryGroup]) -> torch.Tensor:
    """Summed log-prob of chosen minus rejected under the policy, per pair."""
    batch = build_batch([g.trajectories for g in pairs], [0.0] * 2 * len(pairs), learner.pad_id)
    sums = (completion_logprobs(learner.model, batch)[0] * batch.completion_mask).sum(1)
    return sums[0::2] - sums[1::2]


def test_reference_log_probs_of_a_file_pair_are_computed_once(tmp_path) -> None:
    cfg = config(tmp_path, "rollout.prompts_per_step=4", "optim.warmup_steps=0")
    learner = learner_for(cfg)
    objective = learner.objective
    assert isinstance(objective, PreferenceObjective) and objective.ref_model is not None
    calls = []
    objective.ref_model.register_forward_pre_hook(lambda module, args: calls.append(1))
    source = FilePairs(cfg, load_tokenizer(cfg.model.name))
    first = learner.update(source.collect().kept)
    after_first = len(calls)
    second = learner.update(source.collect().kept)  # the second epoch: the same four pairs
    assert after_first > 0 and len(calls) == after_first  # no reference forward on the second epoch
    assert (first["dpo/ref_computed"], first["dpo/ref_cache_hits"]) == (4, 0)
    assert (second["dpo/ref_computed"], second["dpo/ref_cache_hits"]) == (0, 4)
    # sampled pairs are new every step: computed each time, never cached
    pair = TrajectoryGroup(0, [sampled(1.0, [5, 6]), sampled(0.0, [7])])
    for _ in range(2):
        assert learner.update([pair])["dpo/ref_computed"] == 1


def test_one_step_lowers_the_loss_on_the_same_pairs(tmp_path) -> None:
    cfg = config(
        tmp_path, "optim.lr=1e-3", "optim.warmup_steps=0", f"dpo.eval_path={tmp_path / 'pairs.jsonl'}"
    )
    learner = learner_for(cfg)
    margin_before = margins(learner, learner.objective.eval_pairs)
    before = learner.objective.evaluate(learner)
    assert before["dpo/eval_loss"] == pytest.approx(math.log(2), abs=1e-5)  # policy == reference
    metrics = learner.update(learner.objective.eval_pairs)
    assert metrics["dpo/loss"] == pytest.approx(math.log(2), abs=1e-5)
    after = learner.objective.evaluate(learner)
    assert after["dpo/eval_loss"] < before["dpo/eval_loss"] - 1e-3
    assert after["dpo/eval_accuracy"] == 1.0
    # measured apart from the objective: the chosen completions gained on the rejected ones
    assert (margins(learner, learner.objective.eval_pairs) > margin_before).all()


def test_micro_batches_accumulate_to_the_one_batch_update(tmp_path) -> None:
    results = []
    for micro in (2, 8):  # one pair a micro-batch, then all three pairs in one
        cfg = config(
            tmp_path, f"algo.micro_batch_size={micro}", "optim.warmup_steps=0", "optim.grad_clip=1e6"
        )
        learner = learner_for(cfg)
        pairs = FilePairs(cfg, load_tokenizer(cfg.model.name)).pairs[:3]
        metrics = learner.update(pairs)
        params = {n: p.detach().clone() for n, p in learner.model.named_parameters()}
        grads = {n: p.grad.clone() for n, p in learner.model.named_parameters()}
        results.append((metrics, params, grads))
    (base, params, grads), *others = results
    for metrics, other_params, other_grads in others:
        assert metrics["update/grad_norm"] == pytest.approx(base["update/grad_norm"], rel=1e-5)
        assert metrics["dpo/loss"] == pytest.approx(base["dpo/loss"], abs=1e-6)
        for name in params:
            torch.testing.assert_close(other_grads[name], grads[name], rtol=1e-4, atol=1e-7)
            torch.testing.assert_close(other_params[name], params[name], rtol=0, atol=1e-7)


def test_sft_weight_adds_the_token_mean_nll_of_chosen(tmp_path) -> None:
    cfg = config(tmp_path, "dpo.sft_weight=0.5")
    learner = learner_for(cfg)
    pairs = FilePairs(cfg, load_tokenizer(cfg.model.name)).pairs
    metrics = learner.update(pairs)
    chosen = [t for g in pairs for t in g.trajectories[:1]]
    tokens = sum(len(t) for t in chosen)
    expected_nll = -metrics["dpo/logps/chosen"] * len(chosen) / tokens
    assert metrics["dpo/sft_loss"] == pytest.approx(expected_nll, rel=1e-4)
    assert metrics["update/loss"] == pytest.approx(metrics["dpo/loss"] + 0.5 * expected_nll, rel=1e-4)


def test_simpo_loads_no_reference_model(tmp_path, monkeypatch) -> None:
    loads = []
    monkeypatch.setattr(Learner, "load_reference", lambda self: loads.append(1))
    cfg = config(tmp_path, "dpo.loss=simpo", "dpo.beta=2.0")
    learner = learner_for(cfg)
    assert learner.objective.ref_model is None and learner.ref_model is None and not loads
    metrics = learner.update(FilePairs(cfg, load_tokenizer(cfg.model.name)).pairs)
    assert math.isfinite(metrics["dpo/loss"]) and "dpo/ref_computed" not in metrics
    with pytest.raises(RlvrError, match="dpo.loss_params"):
        learner_for(config(tmp_path, "dpo.loss_params={nope: 1}"))


# ------------------------------------------------------------------------------ a run
def test_dpo_through_api_train_starts_at_log_two(tmp_path) -> None:
    cfg = config(tmp_path, "name=dpo", "train.steps=2", "eval.before=false", "rollout.prompts_per_step=2")
    api.train(cfg, quiet=True)
    rows = [r for r in read_jsonl(tmp_path / "dpo" / "metrics.jsonl") if r["phase"] == "train"]
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["dpo/loss"] == pytest.approx(math.log(2), abs=1e-5)  # policy == reference: −log σ(0)
    assert rows[0]["dpo/rewards/margin"] == pytest.approx(0.0, abs=1e-5)
    assert rows[1]["dpo/ref_cache_hits"] == 0 and rows[0]["dpo/pairs"] == 2
    assert 0 < rows[0]["update/lr"] < rows[1]["update/lr"]  # the scheduler steps (warm-up)
    assert all(math.isfinite(r["update/grad_norm"]) and r["completion/tokens"] > 0 for r in rows)
