"""Distillation stages on tiny-random: the teacher, OPD and self-distillation advantages through a real
:meth:`Learner.prepare_batch`, offline KD's divergence and gradient, and a 2-step ``api.train`` run.

The teacher is a second tiny Llama with the same tokenizer and different (sharper) weights, saved
to a temporary directory, so teacher and student disagree visibly. Mutations checked by hand (each
fails a test here): the teacher's log-probs replaced by 0 in ``distill_advantages``; the context
mask dropped; the hint left out of the teacher prompt; the student and teacher logits swapped in
``OfflineDistillation``; a run directory resolved to its oldest checkpoint.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from tiny import TINY_RUN

from rlvr import api
from rlvr.algo.distill import DIVERGENCES
from rlvr.collect.collector import Collection
from rlvr.config import RunConfig, load_config
from rlvr.data.example import Example
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl
from rlvr.models import load_model, load_tokenizer, resolve_model_path
from rlvr.models.chat import encode_prompt
from rlvr.train.learn.batch import build_batch
from rlvr.train.learn.estimate import estimate_advantages
from rlvr.train.learn.learner import Learner
from rlvr.train.learn.logprobs import completion_logprobs_simple
from rlvr.train.loop.checkpoint import save_checkpoint
from rlvr.train.stages.distill import TeacherPrompts, distill_source, load_teacher, resolve_teacher
from rlvr.trajectory import CONTEXT, GIVEN, SAMPLED, Segment, Trajectory, TrajectoryGroup

TINY = [*TINY_RUN, "stage=distill", "algo.dynamic_sampling=false", "rollout.temperature=0.7"]
QUESTIONS = ["What is 3 + 4?", "What is 10 - 2?"]


def _teacher_model(seed: int) -> torch.nn.Module:
    """A tiny Llama like tiny-random, with other and larger weights (a sharper distribution)."""
    from transformers import AutoConfig, LlamaForCausalLM

    config = AutoConfig.from_pretrained(resolve_model_path("tiny-random"))
    config.initializer_range = 0.5
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("teacher")
    _teacher_model(1).save_pretrained(out)
    load_tokenizer("tiny-random").save_pretrained(out)
    return str(out)


def _cfg(tmp_path: Path, *extra: str) -> RunConfig:
    return load_config(None, [*TINY, f"output_dir={tmp_path}", "name=run", *extra])


def _learner(cfg: RunConfig) -> Learner:
    return Learner(cfg, load_model(cfg.model.name), load_tokenizer(cfg.model.name).pad_token_id)


def _groups(tokenizer, prompts: list[list[int]] | None = None) -> list[TrajectoryGroup]:
    """Two groups of two trajectories: random sampled tokens (one with a context segment between
    two sampled ones), arbitrary sampling logprobs, varied rewards."""
    gen = torch.Generator().manual_seed(0)
    groups = []
    for i, question in enumerate(QUESTIONS):
        prompt = prompts[i] if prompts else encode_prompt(tokenizer, [{"role": "user", "content": question}])
        trajectories = []
        for j in range(2):

            def sampled(n: int) -> Segment:
                ids = torch.randint(100, 5000, (n,), generator=gen).tolist()
                return Segment(SAMPLED, ids, (-torch.rand(n, generator=gen) * 5).tolist())

            segments = [sampled(5 + j)]
            if j == 1:
                segments += [Segment(CONTEXT, [200, 201, 202]), sampled(3)]
            t = Trajectory(list(prompt), segments, "stop", example_index=i, reward=float(i + j))
            trajectories.append(t)
        groups.append(TrajectoryGroup(i, trajectories))
    return groups


def _logprobs(model, groups, pad_id, temperature, prompts=None):
    """Reference log-probs [B, T] of every response token: one full sequence per completion."""
    rows = [g.trajectories for g in groups]
    if prompts is not None:
        rows = [[Trajectory(p, t.segments, "stop") for t in g] for g, p in zip(rows, prompts)]
    batch = build_batch(rows, [0.0] * sum(len(g) for g in rows), pad_id)
    with torch.no_grad():
        return completion_logprobs_simple(model, batch, temperature)[0], batch


def test_opd_advantage_is_teacher_minus_sampling_logprob_on_sampled_tokens(tmp_path, teacher_dir) -> None:
    cfg = _cfg(tmp_path, f"distill.teacher={teacher_dir}", "distill.coef=0.5")
    learner = _learner(cfg)
    tokenizer = load_tokenizer("tiny-random")
    groups = _groups(tokenizer)
    batch, metrics = learner.prepare_batch(groups)
    teacher_lp, plain = _logprobs(load_model(teacher_dir), groups, learner.pad_id, 0.7)
    sampled = torch.tensor([[1.0] * 6 + [0.0] * 3 + [1.0] * 3] * 2)[[0, 1, 0, 1]]
    sampled[0::2, 5:] = 0.0  # the first trajectory of each group: 5 sampled tokens only
    expected = 0.5 * (teacher_lp - plain.sampling_logprobs) * sampled
    assert batch.advantages.shape == expected.shape
    torch.testing.assert_close(batch.advantages.cpu(), expected, atol=1e-5, rtol=1e-5)
    assert (expected[sampled > 0].abs() > 1e-3).all()  # the teacher really disagrees
    log_ratio = ((plain.sampling_logprobs - teacher_lp) * sampled).sum() / sampled.sum()
    assert metrics["distill/reverse_kl"] == pytest.approx(float(log_ratio), rel=1e-5)
    mean_teacher = (teacher_lp * sampled).sum() / sampled.sum()
    assert metrics["distill/teacher_logprob"] == pytest.approx(float(mean_teacher), rel=1e-5)
    # the policy loss trains on exactly these per-token advantages (and the logs keep their means)
    update = learner.update(groups)
    assert math.isfinite(update["update/loss"])
    assert groups[0].trajectories[0].token_advantages == pytest.approx(expected[0, :5].tolist(), abs=1e-5)


def test_task_weight_adds_the_task_advantage_on_trained_tokens(tmp_path, teacher_dir) -> None:
    tokenizer = load_tokenizer("tiny-random")
    plain = _learner(_cfg(tmp_path, f"distill.teacher={teacher_dir}")).prepare_batch(_groups(tokenizer))[0]
    cfg = _cfg(tmp_path, f"distill.teacher={teacher_dir}", "distill.task_weight=2.0")
    mixed = _learner(cfg).prepare_batch(_groups(tokenizer))[0]
    rewards, index = torch.tensor([0.0, 1.0, 1.0, 2.0]), torch.tensor([0, 0, 1, 1])
    grpo = estimate_advantages("grpo", {}, rewards, index, {}).advantages
    assert (grpo.abs() > 0.5).all()
    expected = plain.advantages + 2.0 * grpo[:, None] * plain.completion_mask
    torch.testing.assert_close(mixed.advantages, expected, atol=1e-4, rtol=1e-4)


def test_a_teacher_with_another_vocabulary_is_refused_naming_both(tmp_path) -> None:
    tokenizer = load_tokenizer("tiny-random")
    tokenizer.add_tokens(["<distill-extra>"])
    other = tmp_path / "other"
    _teacher_model(2).save_pretrained(other)
    tokenizer.save_pretrained(other)
    cfg = _cfg(tmp_path, f"distill.teacher={other}")
    with pytest.raises(RlvrError, match=rf"student 'tiny-random'.*teacher '{other}'"):
        load_teacher(cfg, load_tokenizer("tiny-random"))


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["distill.mode=on_policy"], "needs distill.teacher"),
        (
            ["distill.mode=self", "distill.teacher=tiny-random"],
            "distill.teacher=tiny-random with distill.mode=self",
        ),
        (["distill.teacher=tiny-random", "algo.dynamic_sampling=true"], "algo.dynamic_sampling=false"),
        (["distill.teacher=/nonexistent/teacher"], "distill.teacher=/nonexistent/teacher"),
    ],
)
def test_distill_config_errors_before_sampling(tmp_path, extra: list[str], needle: str) -> None:
    cfg = _cfg(tmp_path, *extra)
    with pytest.raises(RlvrError, match=needle):
        distill_source(cfg, SimpleNamespace(), load_tokenizer("tiny-random"))


def test_a_run_directory_resolves_to_its_newest_checkpoint(tmp_path, teacher_dir) -> None:
    run, tokenizer = tmp_path / "teacher-run", load_tokenizer("tiny-random")
    save_checkpoint(run / "checkpoints", 1, load_model("tiny-random"), tokenizer, None, {}, None)
    newest = load_model(teacher_dir)
    save_checkpoint(run / "checkpoints", 2, newest, tokenizer, None, {}, None)
    assert resolve_teacher(str(run)) == str(run / "checkpoints" / "step-000002" / "model")
    teacher = load_teacher(_cfg(tmp_path, f"distill.teacher={run}"), tokenizer)
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())
    for a, b in zip(teacher.state_dict().values(), newest.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b)


def test_self_distillation_scores_the_same_tokens_under_the_hinted_prompt(tmp_path) -> None:
    tokenizer = load_tokenizer("tiny-random")
    cfg = _cfg(tmp_path, "distill.mode=self", "distill.hint=Psst, the answer is {answer}.")
    examples = [
        Example(f"e{i}", [{"role": "system", "content": "Be brief."}, {"role": "user", "content": q}], ref)
        for i, (q, ref) in enumerate(zip(QUESTIONS, ["7", "8"]))
    ]
    prompts = [encode_prompt(tokenizer, e.prompt) for e in examples]
    groups = _groups(tokenizer, prompts)
    collector = SimpleNamespace(
        train_examples=examples,
        train_prompts=prompts,
        collect=lambda count=None, greedy_baseline=False: Collection(groups, groups, {}),
    )
    source = distill_source(cfg, collector, tokenizer)
    assert isinstance(source, TeacherPrompts)
    source.collect()
    texts = [tokenizer.decode(g.teacher_prompt_ids) for g in groups]
    assert all("Be brief.\n\nPsst, the answer is" in t for t in texts)
    assert "answer is 7." in texts[0] and "answer is 8." in texts[1] and "What is 3 + 4?" in texts[0]
    learner = _learner(cfg)
    batch, metrics = learner.prepare_batch(groups)
    student_lp, plain = _logprobs(learner.model, groups, learner.pad_id, 0.7)
    teacher_lp, _ = _logprobs(
        learner.model, groups, learner.pad_id, 0.7, [g.teacher_prompt_ids for g in groups]
    )
    assert torch.equal(batch.completion_ids.cpu(), plain.completion_ids)  # the sampled tokens are unchanged
    assert torch.equal(batch.prompt_ids.cpu(), plain.prompt_ids)  # the student trains on its own prompt
    expected = (teacher_lp - plain.sampling_logprobs) * plain.completion_mask
    torch.testing.assert_close(batch.advantages.cpu(), expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(teacher_lp, student_lp, atol=1e-4)  # the hint changes the teacher's view
    assert "distill/reverse_kl" in metrics


def _demonstrations(tokenizer) -> list[TrajectoryGroup]:
    gen = torch.Generator().manual_seed(3)
    groups = []
    for i, question in enumerate(QUESTIONS):
        prompt = encode_prompt(tokenizer, [{"role": "user", "content": question}])
        ids = torch.randint(100, 5000, (7 + 3 * i,), generator=gen).tolist()
        segments = [Segment(GIVEN, ids[:4]), Segment(CONTEXT, ids[4:6]), Segment(GIVEN, ids[6:])]
        groups.append(TrajectoryGroup(i, [Trajectory(prompt, segments, "stop", example_index=i)]))
    return groups


def test_offline_kd_against_itself_has_zero_loss_and_zero_gradient(tmp_path) -> None:
    cfg = _cfg(tmp_path, "distill.mode=offline", "distill.teacher=tiny-random", "optim.grad_clip=1e9")
    learner = _learner(cfg)
    before = [p.detach().clone() for p in learner.model.parameters()]
    metrics = learner.update(_demonstrations(load_tokenizer("tiny-random")))
    assert metrics["distill/loss"] == pytest.approx(0.0, abs=1e-7)
    assert metrics["update/grad_norm"] == pytest.approx(0.0, abs=1e-6)
    assert learner.version == 1 and metrics["update/lr"] > 0
    assert not any(p.requires_grad for p in learner.objective.teacher.parameters())
    for a, b in zip(before, learner.model.parameters()):  # Adam with a zero gradient moves nothing
        torch.testing.assert_close(a, b.detach())


@pytest.mark.parametrize("divergence", ["forward_kl", "reverse_kl", "jsd"])
def test_offline_kd_loss_is_the_named_divergence_of_student_from_teacher(
    tmp_path, teacher_dir, divergence
) -> None:
    cfg = _cfg(
        tmp_path, "distill.mode=offline", f"distill.teacher={teacher_dir}", f"distill.divergence={divergence}"
    )
    learner = _learner(cfg)
    tokenizer, teacher = load_tokenizer("tiny-random"), load_model(teacher_dir)
    groups = _demonstrations(tokenizer)
    values, tokens = [], 0
    with torch.no_grad():  # every demonstration alone, unpadded: logits predicting its response tokens
        for g in groups:
            t = g.trajectories[0]
            ids = torch.tensor([t.prompt_ids + t.response_ids])
            at = slice(len(t.prompt_ids) - 1, ids.shape[1] - 1)
            s_logits, t_logits = learner.model(ids).logits[:, at], teacher(ids).logits[:, at]
            mask = torch.tensor(t.loss_mask)
            values.append((DIVERGENCES.get(divergence)(s_logits, t_logits)[0] * mask).sum())
            tokens += int(mask.sum())
    expected = float(sum(values)) / tokens
    metrics = learner.update(groups)
    assert metrics["distill/loss"] == pytest.approx(expected, rel=1e-4)
    assert metrics["update/grad_norm"] > 0
    if divergence != "jsd":  # the other direction is far off: a swapped pair of arguments fails here
        other = "reverse_kl" if divergence == "forward_kl" else "forward_kl"
        with torch.no_grad():
            t = groups[0].trajectories[0]
            ids = torch.tensor([t.prompt_ids + t.response_ids])
            at = slice(len(t.prompt_ids) - 1, ids.shape[1] - 1)
            a = DIVERGENCES.get(divergence)(learner.model(ids).logits[:, at], teacher(ids).logits[:, at])
            b = DIVERGENCES.get(other)(learner.model(ids).logits[:, at], teacher(ids).logits[:, at])
        assert (a - b).abs().mean() > 0.1 * a.abs().mean()


@pytest.mark.parametrize("mode", ["on_policy", "self"])
def test_distillation_trains_two_steps_end_to_end(tmp_path, teacher_dir, mode) -> None:
    teacher = [f"distill.teacher={teacher_dir}"] if mode == "on_policy" else []
    cfg = _cfg(
        tmp_path, f"distill.mode={mode}", *teacher, "train.steps=2", "eval.before=false", "data.eval_size=0"
    )
    api.train(cfg, quiet=True)
    rows = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if r["phase"] == "train"]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert math.isfinite(row["distill/reverse_kl"]) and math.isfinite(row["update/loss"])
    if mode == "on_policy":
        assert all(abs(r["distill/reverse_kl"]) > 1e-3 for r in rows)


def test_offline_kd_trains_on_chat_data_end_to_end(tmp_path, teacher_dir) -> None:
    chats = tmp_path / "chats.jsonl"
    rows = [
        {"prompt": "3 + 4 =", "completion": "3 + 4 = 7"},
        {"prompt": "Say hi.", "completion": "Hi there!"},
    ]
    chats.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = _cfg(
        tmp_path,
        "distill.mode=offline",
        f"distill.teacher={teacher_dir}",
        f"distill.path={chats}",
        f"distill.eval_path={chats}",
        "sft.batch_size=2",
        "train.steps=2",
        "optim.lr=1e-3",
        "optim.warmup_steps=0",
        "data.eval_size=0",
    )
    api.train(cfg, quiet=True)
    log = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    losses = [r["distill/loss"] for r in log if r["phase"] == "train"]
    assert len(losses) == 2 and 0 < losses[1] < losses[0]
    evals = {r["phase"]: r["distill/eval_loss"] for r in log if r["phase"] in ("before", "after")}
    assert evals["before"] == pytest.approx(losses[0], rel=1e-4)  # the same data, before the first step
    assert evals["after"] < evals["before"]
