"""Distillation stages (``stage: distill``): a teacher's token distribution as the training signal.

Three modes (``distill.mode``, docs/stages.md):

- ``on_policy`` (OPD; seeds 001:171): the collector samples from the student; the teacher scores
  every sampled token and ``coef·(log π_teacher − log π_student)`` is that token's advantage in the
  learner's ordinary policy loss (:func:`distill_advantages`, called from
  :meth:`Learner.prepare_batch`), a one-sample estimate of the reverse KL's gradient. With
  ``task_weight > 0`` the task reward's advantage is added on every token, as KDRL combines GRPO
  with a reverse KL to a teacher (seeds 000:17).
- ``self``: the teacher is the live policy itself (same weights, no gradient) given privileged
  context, the example's reference answer in its system message (``distill.hint``);
  :class:`TeacherPrompts` writes that prompt on each group and the teacher scores the same sampled
  tokens under it. The seed abstracts have no paper for this mode; it is OPD with the teacher
  replaced as above.
- ``offline``: knowledge distillation on fixed demonstrations (the chat data of the ``distill``
  section, read by :class:`rlvr.train.stages.sft.DemonstrationSource`): the full-vocabulary
  divergence of :data:`rlvr.algo.distill.DIVERGENCES` between student and teacher logits on the
  demonstrations' trained tokens (:class:`OfflineDistillation`).

The teacher (:func:`load_teacher`) is any model :func:`rlvr.models.load_model` loads, or an rlvr
run directory or checkpoint (as ``rlvr eval --model`` takes); it must share the student's tokenizer.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rlvr.algo.distill import DIVERGENCES, check_same_vocabulary, opd_token_advantages, vocab_width
from rlvr.errors import RlvrError
from rlvr.models import load_model, load_tokenizer
from rlvr.models.chat import encode_prompt
from rlvr.train.learn.batch import TrainBatch, build_batch
from rlvr.train.learn.update import _micro_slices, split_logprobs
from rlvr.trajectory import SAMPLED, Trajectory, TrajectoryGroup

if TYPE_CHECKING:
    from rlvr.collect.collector import Collection, Collector
    from rlvr.config import RunConfig
    from rlvr.data.example import Example
    from rlvr.train.learn.learner import Learner
    from rlvr.train.stages.base import Source


# ----------------------------------------------------------------------------------------- teacher
def resolve_teacher(name: str) -> str:
    """The model directory or name ``distill.teacher`` names: a run directory's newest checkpoint
    (model-only or full), a checkpoint's ``model``, a pipeline's last stage's, or the name as given."""
    from rlvr.api import resolve_run
    from rlvr.train.stages.pipeline import final_model, is_pipeline_dir, pipeline_stage_dirs

    path = Path(name).expanduser()
    if is_pipeline_dir(path):
        stages = pipeline_stage_dirs(path)
        if not stages:
            raise RlvrError(f"distill.teacher={name}: the pipeline has no stage with a checkpoint")
        return final_model(stages[-1][2])
    try:
        return resolve_run(name)[0]
    except RlvrError as err:
        raise RlvrError(f"distill.teacher={name}: {err}") from err


def check_teacher_config(cfg: RunConfig) -> None:
    """``distill.teacher`` is required by on_policy and offline, refused by self (the policy is it)."""
    d = cfg.distill
    if d.mode == "self" and d.teacher:
        raise RlvrError(
            f"distill.teacher={d.teacher} with distill.mode=self: self-distillation's teacher is the live "
            "policy with distill.hint in its prompt; remove distill.teacher, or use distill.mode=on_policy"
        )
    if d.mode != "self" and not d.teacher:
        raise RlvrError(
            f"distill.mode={d.mode} needs distill.teacher: a built-in model name, a Hugging Face directory "
            "or hub id, or an rlvr run directory (runs/NAME: its newest checkpoint) sharing the student's "
            "tokenizer"
        )


def check_teacher_tokenizer(cfg: RunConfig, student_tokenizer: Any) -> str:
    """The teacher's model directory, after checking that its tokenizer is the student's."""
    check_teacher_config(cfg)
    path = resolve_teacher(str(cfg.distill.teacher))
    try:
        teacher_tokenizer = load_tokenizer(path)
    except RlvrError as err:
        local = (
            "" if Path(path).exists() else f" (nor is {path} a directory here: a run's is output_dir/NAME)"
        )
        raise RlvrError(f"distill.teacher={cfg.distill.teacher}: {err}{local}") from err
    check_same_vocabulary(student_tokenizer, teacher_tokenizer, cfg.model.name, str(cfg.distill.teacher))
    return path


def load_teacher(cfg: RunConfig, student_tokenizer: Any) -> torch.nn.Module:
    """The frozen teacher of ``distill.teacher`` in eval mode on the student's device and dtype; an
    :class:`RlvrError` naming both models when their tokenizers differ (before loading weights)."""
    path = check_teacher_tokenizer(cfg, student_tokenizer)
    model = load_model(path, cfg.model.dtype, cfg.model.device).eval()
    return model.requires_grad_(False)


def teacher_of(learner: Learner) -> torch.nn.Module:
    """The learner's teacher, loaded once (when the learner is built) and kept on it."""
    teacher = getattr(learner, "distill_teacher", None)
    if teacher is None:
        teacher = load_teacher(learner.cfg, load_tokenizer(learner.cfg.model.name))
        learner.distill_teacher = teacher
    return teacher


# ----------------------------------------------------------------------------------------- sources
def distill_source(cfg: RunConfig, collector: Collector, tokenizer: Any) -> Source:
    """The source of ``on_policy`` (the collector) and ``self`` (:class:`TeacherPrompts`) runs, after
    the checks that can fail before any sampling: the teacher's presence and tokenizer, and that
    no group is dropped for equal task rewards (every sampled token carries a distillation signal)."""
    if cfg.algo.dynamic_sampling:
        raise RlvrError(
            f"stage=distill with distill.mode={cfg.distill.mode} trains on every sampled token, but "
            "algo.dynamic_sampling=true drops each group whose task rewards are all equal (most groups of "
            "a weak student): set algo.dynamic_sampling=false"
        )
    if cfg.distill.mode == "self":
        check_teacher_config(cfg)
        if cfg.train.max_staleness is not None:  # the background collector bypasses this source
            raise RlvrError(
                "distill.mode=self with train.max_staleness: the teacher prompts are written by the "
                "synchronous source; leave train.max_staleness out"
            )
        return TeacherPrompts(cfg, collector, tokenizer)
    check_teacher_tokenizer(cfg, tokenizer)
    return collector


def with_hint(example: Example, hint: str) -> list[dict[str, Any]]:
    """``example.prompt`` with ``hint`` (formatted with its reference answer) added to the system message."""
    if example.reference is None:
        raise RlvrError(
            f"{example.where}: distill.mode=self formats distill.hint with the example's reference answer, "
            "and this example has none"
        )
    try:
        text = hint.format(answer=example.reference)
    except (KeyError, IndexError, ValueError) as err:
        raise RlvrError(f"distill.hint: {{answer}} is its only placeholder ({err!r} in {hint!r})") from err
    messages = [dict(m) for m in example.prompt]
    if messages and messages[0].get("role") == "system":
        messages[0]["content"] = f"{messages[0]['content']}\n\n{text}"
    else:
        messages.insert(0, {"role": "system", "content": text})
    return messages


class TeacherPrompts:
    """The collector's groups, each with ``teacher_prompt_ids``: the example's prompt with the hint."""

    def __init__(self, cfg: RunConfig, collector: Collector, tokenizer: Any) -> None:
        self.cfg, self.collector, self.tokenizer = cfg, collector, tokenizer
        self.prompts: dict[int, list[int]] = {}  # example index -> teacher prompt (examples never change)

    def teacher_prompt(self, group: TrajectoryGroup) -> list[int]:
        index = group.example_index
        if index not in self.prompts:
            example = self.collector.train_examples[index]
            if any(t.prompt_ids != self.collector.train_prompts[index] for t in group.trajectories):
                raise RlvrError(
                    f"{example.where}: distill.mode=self needs single-turn prompts encoded from the "
                    "example (an environment's episode starts from its own prompt)"
                )
            self.prompts[index] = encode_prompt(self.tokenizer, with_hint(example, self.cfg.distill.hint))
        return self.prompts[index]

    def collect(self, count: int | None = None, greedy_baseline: bool = False) -> Collection:
        collection = self.collector.collect(count, greedy_baseline)
        for group in collection.kept:
            group.teacher_prompt_ids = self.teacher_prompt(group)
        return collection

    def state(self) -> dict[str, Any]:
        return {}  # the collector's own state is checkpointed beside it

    def load_state(self, state: dict[str, Any]) -> None:
        pass


# ----------------------------------------------------------------------------------------- on-policy
def teacher_prompts(batch: TrainBatch, groups: list[TrajectoryGroup], pad_id: int) -> TrainBatch:
    """``batch`` with each group's ``teacher_prompt_ids`` as its prompt, left-padded as in build_batch."""
    missing = [g.example_index for g in groups if g.teacher_prompt_ids is None]
    if missing:
        raise RlvrError(
            f"distill.mode=self: the groups of examples {missing[:5]} carry no teacher prompt (they did not "
            "come through TeacherPrompts: train.max_staleness and trajectory files are not supported)"
        )
    prompts = [[Trajectory(list(g.teacher_prompt_ids or []), [], "stop")] for g in groups]
    padded, device = build_batch(prompts, [0.0] * len(groups), pad_id), batch.prompt_ids.device
    return replace(batch, prompt_ids=padded.prompt_ids.to(device), prompt_mask=padded.prompt_mask.to(device))


def sampled_mask(groups: list[TrajectoryGroup], width: int) -> torch.Tensor:
    """[B, width] 1.0 on the tokens the policy sampled (not on given or context ones)."""
    rows = [t for g in groups for t in g.trajectories]
    mask = torch.zeros(len(rows), width)
    for row, t in enumerate(rows):
        flags = [1.0 if s.kind == SAMPLED else 0.0 for s in t.segments for _ in s.token_ids]
        mask[row, : len(flags)] = torch.tensor(flags)
    return mask


def distill_advantages(
    learner: Learner,
    groups: list[TrajectoryGroup],
    batch: TrainBatch,
    task_advantages: torch.Tensor,
    metrics: dict[str, float],
) -> torch.Tensor:
    """[B, T] advantages ``coef·(teacher_lp − sampling_lp)`` on sampled tokens, plus ``task_weight`` ×
    the task's advantage ([B] or [B, T]) on trained tokens; adds the ``distill/*`` metrics.

    The teacher scores the sampled tokens at the rollout temperature (the one they were sampled
    at): ``distill.teacher`` for on_policy, the live policy under the teacher prompt for self."""
    cfg, d = learner.cfg, learner.cfg.distill
    if d.mode == "self":
        model, scored = learner.train_model, teacher_prompts(batch, groups, learner.pad_id)
    else:
        model, scored = teacher_of(learner), batch
    micro, temperature = cfg.algo.micro_batch_size, cfg.rollout.temperature
    teacher = split_logprobs(
        model, scored, micro, temperature, learner.precision.autocast, learner.shard
    ).cpu()
    student = batch.sampling_logprobs.cpu()
    sampled = sampled_mask(groups, student.shape[1])
    advantages = opd_token_advantages(student, teacher, sampled, d.coef)
    if d.task_weight > 0:
        task = task_advantages[:, None] if task_advantages.dim() == 1 else task_advantages
        advantages = advantages + d.task_weight * task.cpu().float() * batch.completion_mask.cpu()
    tokens = sampled.sum().clamp(min=1)
    metrics["distill/reverse_kl"] = float(((student - teacher) * sampled).sum() / tokens)
    metrics["distill/teacher_logprob"] = float((teacher * sampled).sum() / tokens)
    metrics["distill/student_logprob"] = float((student * sampled).sum() / tokens)
    return advantages


# ----------------------------------------------------------------------------------------- offline KD
def completion_logits(model: torch.nn.Module, batch: TrainBatch) -> torch.Tensor:
    """Logits [B, T, V] at the positions predicting each of ``batch.completion_ids`` (prompt and
    completion run as one sequence each). Memory is B·T·V: callers pass micro-batches."""
    index = batch.group_index
    prompt_mask = batch.prompt_mask[index]
    mask = torch.cat([prompt_mask, batch.completion_attention], dim=1)
    out = model(
        input_ids=torch.cat([batch.prompt_ids[index], batch.completion_ids], dim=1),
        attention_mask=mask,
        position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
        use_cache=False,
        logits_to_keep=batch.completion_width + 1,
    )
    return out.logits[:, :-1]


class OfflineDistillation:
    """Full-vocabulary KD on demonstrations: the token-mean of ``distill.divergence`` between the
    student's and the teacher's next-token distributions over the step's trained tokens (one
    optimizer step a step; the schedule is sized ``train.steps``, as SFT's)."""

    def __init__(self, cfg: RunConfig, learner: Learner) -> None:
        from rlvr.train.learn.optim import build_scheduler
        from rlvr.train.stages.sft import load_demonstrations

        if cfg.train.max_staleness is not None:
            raise RlvrError(
                "train.max_staleness (asynchronous collection) is for sampling stages; distill.mode=offline "
                "reads demonstrations: leave train.max_staleness out"
            )
        self.cfg = cfg
        check_teacher_config(cfg)
        self.divergence = DIVERGENCES.get(cfg.distill.divergence)
        self.params = dict(cfg.distill.divergence_params)
        try:  # a wrong parameter fails now, naming the key, not after the first batch
            self.divergence(torch.zeros(1, 1, 2), torch.zeros(1, 1, 2), **self.params)
        except (TypeError, ValueError) as err:
            raise RlvrError(f"distill.divergence_params for {cfg.distill.divergence}: {err}") from err
        tokenizer = load_tokenizer(cfg.model.name)
        self.vocabulary = len(tokenizer)
        self.teacher = load_teacher(cfg, tokenizer)
        learner.scheduler = build_scheduler(learner.optimizer, cfg.train.steps, cfg.optim)
        self.held_out = load_demonstrations(cfg, tokenizer, held_out=True) if cfg.distill.eval_path else None

    def token_divergence(self, student: torch.nn.Module, batch: TrainBatch) -> torch.Tensor:
        """[B, T] divergence of ``student`` from the teacher at each completion position."""
        with torch.no_grad():
            teacher_logits = completion_logits(self.teacher, batch)
        student_logits = completion_logits(student, batch)
        student_logits, teacher_logits = vocab_width(student_logits, teacher_logits, self.vocabulary)
        return self.divergence(student_logits, teacher_logits, **self.params)

    def _divergence(
        self, learner: Learner, groups: list[TrajectoryGroup], train: bool
    ) -> tuple[float, float]:
        """``(token-mean divergence, trained tokens)`` of ``groups``, micro-batch by micro-batch;
        ``train``: each micro-batch's share of the mean is back-propagated as it is computed."""
        count = sum(len(g) for g in groups)
        batch = build_batch([g.trajectories for g in groups], [0.0] * count, learner.pad_id)
        batch = batch.to(self.cfg.model.device)
        total = batch.completion_mask.sum().clamp(min=1)
        summed = 0.0
        for rows in _micro_slices(len(batch), self.cfg.algo.micro_batch_size):
            micro = batch.select(rows)
            with torch.set_grad_enabled(train), learner.precision.autocast():
                per_token = self.token_divergence(learner.train_model if train else learner.model, micro)
            loss = (per_token.float() * micro.completion_mask).sum() / total
            if train:
                (learner.scaler.scale(loss) if learner.scaler is not None else loss).backward()
            summed += float(loss.detach())
        return summed, float(batch.completion_mask.sum())

    def update(self, learner: Learner, groups: list[TrajectoryGroup]) -> dict[str, float]:
        """One optimizer step on ``groups`` (micro-batches of ``algo.micro_batch_size`` rows)."""
        if learner.shard is not None:
            raise RlvrError("distill.mode=offline does not run under torchrun yet: train in one process")
        learner.optimizer.zero_grad(set_to_none=True)
        loss, tokens = self._divergence(learner, groups, train=True)
        if not tokens:
            return {"distill/tokens": 0.0}
        return {
            "distill/loss": loss,
            "update/loss": loss,
            "distill/tokens": tokens,
            **optimizer_step(learner),
        }

    def evaluate(self, learner: Learner) -> dict[str, float]:
        """``distill/eval_loss``: the divergence on ``distill.eval_path``'s demonstrations; ``{}`` without."""
        if not self.held_out:
            return {}
        groups = [TrajectoryGroup(t.example_index, [t]) for t in self.held_out]
        return {"distill/eval_loss": self._divergence(learner, groups, train=False)[0]}


def optimizer_step(learner: Learner) -> dict[str, float]:
    """Unscale (fp16), clip, step the optimizer and the schedule, as the RL update does."""
    params = [p for group in learner.optimizer.param_groups for p in group["params"]]
    if learner.scaler is not None:
        learner.scaler.unscale_(learner.optimizer)
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, learner.cfg.optim.grad_clip))
    lr = learner.scheduler.get_last_lr()[0]
    if learner.scaler is not None:
        learner.scaler.step(learner.optimizer)
        learner.scaler.update()
    else:
        learner.optimizer.step()
    learner.scheduler.step()
    return {"update/grad_norm": grad_norm, "update/lr": lr}
