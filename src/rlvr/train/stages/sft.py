"""Supervised fine-tuning: demonstrations from chat data, cross-entropy on their trained tokens.

SFT is the first stage of the SFT → RL pipelines many of rlvr's papers use (seeds/001:395,
seeds/001:499 on what it does to a later RL stage). Its two parts (:mod:`.base`):

- :class:`DemonstrationSource` reads ``sft.path`` (``distill.path`` for offline distillation) with
  :mod:`rlvr.data.chat_data`, turns every row into a trajectory whose assistant tokens are *given*
  (:mod:`rlvr.data.demonstrations`) at start-up, so a bad row or a drifting chat template fails
  before the first step, naming the row; each step then takes the next ``sft.batch_size`` of them
  from a seeded shuffle, epoch after epoch (:class:`rlvr.data.sampler.PromptSampler`, whose
  epoch and position are checkpointed, so ``--resume`` continues with the same examples);
- :class:`CrossEntropy` minimises minus the mean logprob of the trained tokens, the mean taken over
  every trained token of the step (not per micro-batch, not per example: a long demonstration
  weighs by its tokens, and the update is the same whatever ``algo.micro_batch_size`` is). With
  ``sft.packing`` the demonstrations are packed into rows (:mod:`rlvr.data.packing`); without, they
  are padded as the RL batch is and scored by :func:`~rlvr.train.learn.logprobs.completion_logprobs`
  at temperature 1. RFT (:mod:`.rft`) trains with it too, ``rft.epochs`` passes a round.

Each pass over a step's groups is one optimizer step and one scheduler step; the schedule is sized
``train.steps`` × passes (1, or ``rft.epochs``), whatever ``algo.epochs`` / ``algo.minibatches``
(RL's) say.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from rich.console import Console

from rlvr.data.chat_data import ChatColumns, ChatExample, load_chat_dataset, load_chat_file
from rlvr.data.demonstrations import to_demonstration
from rlvr.data.packing import PackedRow, pack, packed_token_logprobs, trajectory_example
from rlvr.data.sampler import PromptSampler
from rlvr.errors import RlvrError
from rlvr.train.learn.batch import TrainBatch
from rlvr.trajectory import Trajectory, TrajectoryGroup

if TYPE_CHECKING:
    from rlvr.collect.collector import Collection
    from rlvr.config import RunConfig
    from rlvr.config.stages import ChatDataConfig
    from rlvr.train.learn.learner import Learner

_SHOWN_FAILURES = 3


def data_section(cfg: RunConfig) -> tuple[str, ChatDataConfig]:
    """``("sft", cfg.sft)``, or ``("distill", cfg.distill)`` for offline distillation: where the
    chat data is named. Tokenization settings (``train_on``, ``max_length``) are always ``sft``'s."""
    return ("sft", cfg.sft) if cfg.stage != "distill" else ("distill", cfg.distill)


def read_chat(section: ChatDataConfig, key: str, held_out: bool = False) -> list[ChatExample] | None:
    """The conversations of ``section.path`` (``held_out``: ``eval_path``, or ``path``'s
    ``eval_split``); ``None`` for held-out data that is not configured."""
    columns = ChatColumns(section.messages_key, section.prompt_key, section.completion_key, section.tools_key)
    if held_out:
        if section.eval_path is None and section.eval_split is None:
            return None
        path = section.eval_path or section.path
        split = section.eval_split or section.split
    else:
        path, split = section.path, section.split
    if not path:
        raise RlvrError(
            f"stage={key} needs {key}.path: a chat-data file (.jsonl, .parquet, ...) or a Hugging Face "
            "dataset id, with a 'messages' column or 'prompt' and 'completion' columns"
        )
    from rlvr.data.file_source import SUPPORTED_EXTENSIONS

    local = Path(path).is_file() or Path(path).suffix.lower() in SUPPORTED_EXTENSIONS
    examples = load_chat_file(path, columns) if local else load_chat_dataset(path, split, columns)
    return examples if held_out or section.limit is None else examples[: section.limit]


def expert_demonstrations(cfg: RunConfig, held_out: bool = False) -> list[ChatExample]:
    """``sft.player``'s games: data.*'s training (``held_out``: held-out) examples played by their
    environment's expert, the won ones (:mod:`rlvr.data.env_demos`)."""
    from rlvr.data.env_demos import expert_games
    from rlvr.data.from_config import load_datasets

    if cfg.sft.path or cfg.sft.eval_path:
        raise RlvrError(
            f"sft.player={cfg.sft.player} plays its demonstrations: leave sft.path and sft.eval_path out "
            f"(they are {cfg.sft.path!r} and {cfg.sft.eval_path!r}), or set sft.player=null to train on them"
        )
    data = load_datasets(cfg.data)
    examples = data.held_out if held_out else data.train
    if not held_out and cfg.sft.limit is not None:
        examples = examples[: cfg.sft.limit]
    games = expert_games(cfg, examples, "held-out" if held_out else "training")
    Console(stderr=True).print(
        f"sft.player={cfg.sft.player}: {games.played:,} {'held-out' if held_out else 'training'} games of "
        f"data.task={cfg.data.task} played by the environment's expert, {games.lost:,} lost (left out)",
        highlight=False,
    )
    return games.examples


def load_demonstrations(cfg: RunConfig, tokenizer: Any, held_out: bool = False) -> list[Trajectory] | None:
    """Every conversation of the stage's chat data as a demonstration (``held_out``: the held-out
    set, ``None`` when there is none). All rows are converted before any is used; the failures are
    raised together (the first few, and how many), each naming its row."""
    key, section = data_section(cfg)
    examples = expert_demonstrations(cfg, held_out) if key == "sft" and cfg.sft.player else None
    examples = examples if examples is not None else read_chat(section, key, held_out)
    if examples is None:
        return None
    trajectories, failures = [], []
    for example in examples:
        try:
            trajectories.append(
                to_demonstration(tokenizer, example, cfg.sft.train_on, cfg.sft.max_length, "sft.max_length")
            )
        except RlvrError as error:
            failures.append(str(error))
    if failures:
        listed = "\n".join(f"- {f}" for f in failures[:_SHOWN_FAILURES])
        more = f"\n(and {len(failures) - _SHOWN_FAILURES} more)" if len(failures) > _SHOWN_FAILURES else ""
        which = "held-out " if held_out else ""
        raise RlvrError(
            f"{len(failures)} of {len(examples)} {which}demonstrations are refused:\n{listed}{more}"
        )
    return trajectories


class DemonstrationSource:
    """A :class:`~rlvr.train.stages.base.Source` of demonstrations: ``sft.batch_size`` a step, each
    its own group, in a seeded shuffle over epochs."""

    def __init__(self, cfg: RunConfig, tokenizer: Any) -> None:
        self.cfg, self.tokenizer = cfg, tokenizer
        self.key, section = data_section(cfg)
        self.demonstrations = load_demonstrations(cfg, tokenizer) or []
        self.sampler = PromptSampler(len(self.demonstrations), cfg.seed)
        trained = sum(t.num_trained for t in self.demonstrations)
        per_epoch = -(-len(self.demonstrations) // cfg.sft.batch_size)
        expert = self.key == "sft" and cfg.sft.player
        where = f"games played by the {cfg.sft.player} player" if expert else section.path
        Console(stderr=True).print(
            f"{cfg.stage}: {len(self.demonstrations):,} demonstrations from {where} "
            f"({trained:,} trained tokens, sft.train_on={cfg.sft.train_on}); {cfg.sft.batch_size} a step, "
            f"{per_epoch} steps an epoch",
            highlight=False,
        )

    def collect(self, count: int | None = None, greedy_baseline: bool = False) -> Collection:
        """The next ``count`` (default ``sft.batch_size``) demonstrations, each as its own group."""
        from rlvr.collect.collector import Collection

        picked = [self.demonstrations[i] for i in self.sampler.take(count or self.cfg.sft.batch_size)]
        groups = [TrajectoryGroup(t.example_index, [t]) for t in picked]
        tokens = float(sum(t.num_trained for t in picked))
        metrics = {
            "groups/sampled": float(len(groups)),
            "groups/kept": float(len(groups)),
            "completion/tokens": tokens,
            "completion/mean_length": tokens / max(len(groups), 1),
            "sft/epoch": self.sampler.epoch + self.sampler.position / self.sampler.size,
        }
        return Collection(groups, groups, metrics)

    def sample_records(
        self, groups: list[TrajectoryGroup], step: int, limit: int
    ) -> Iterator[dict[str, Any]]:
        """samples.jsonl rows of the first ``limit`` demonstrations (-1: all): the prompt and the
        rest of the conversation as the model reads them, and where the row came from."""

        def decode(ids: list[int]) -> str:
            return self.tokenizer.decode(ids, skip_special_tokens=False)

        for n, t in enumerate(t for g in groups for t in g.trajectories):
            if 0 <= limit <= n:
                return
            yield {
                "step": step,
                "example_id": t.example_id,
                "prompt": decode(t.prompt_ids),
                "completion": decode(t.response_ids),
                "finish_reason": t.finish_reason,
                "tokens": len(t),
                "reward": None,
                "rewards": {},
                "errors": {},
                "advantage": None,
            }

    def state(self) -> dict[str, Any]:
        return {**self.sampler.state(), "seed": self.cfg.seed, "size": len(self.demonstrations)}

    def load_state(self, state: dict[str, Any]) -> None:
        size = state.get("size", len(self.demonstrations))
        if size != len(self.demonstrations):
            raise RlvrError(
                f"--resume: {data_section(self.cfg)[1].path} now has {len(self.demonstrations):,} "
                f"demonstrations, the checkpoint was taken with {size:,}: the data order cannot continue "
                "(start a new run, or restore the file)"
            )
        self.sampler = PromptSampler(
            len(self.demonstrations), state.get("seed", self.cfg.seed), state["epoch"], state["position"]
        )


# ------------------------------------------------------------------------------------ objective
Micro = list[PackedRow] | TrainBatch


class CrossEntropy:
    """The SFT objective (:class:`~rlvr.train.stages.base.Objective`); RFT's too."""

    def __init__(self, cfg: RunConfig, learner: Learner) -> None:
        from rlvr.models import load_tokenizer
        from rlvr.train.learn.optim import build_scheduler

        if cfg.train.max_staleness is not None:
            raise RlvrError(
                f"train.max_staleness (asynchronous collection) is for RL; stage={cfg.stage} collects in "
                "step with its updates: leave train.max_staleness out"
            )
        self.cfg = cfg
        self.passes = cfg.rft.epochs if cfg.stage == "rft" else 1
        # one scheduler step per optimizer step: train.steps × passes, not RL's epochs × minibatches
        learner.scheduler = build_scheduler(learner.optimizer, cfg.train.steps * self.passes, cfg.optim)
        self.held_out: list[Trajectory] | None = None
        if cfg.stage == "sft":
            self.held_out = load_demonstrations(cfg, load_tokenizer(cfg.model.name), held_out=True)
            section = cfg.sft
            where = section.eval_path or f"{section.path} [{section.eval_split}]"
            if section.player:
                where = f"held-out games played by the {section.player} player"
            Console(stderr=True).print(
                f"sft: held-out loss (sft/eval_loss) on {len(self.held_out):,} demonstrations of {where}"
                if self.held_out
                else "sft: no held-out demonstrations (sft.eval_path not set): no sft/eval_loss",
                highlight=False,
            )

    # ----------------------------------------------------------------------------- forward
    def _micro_batches(self, learner: Learner, groups: Sequence[TrajectoryGroup]) -> list[Micro]:
        """The step's trajectories in micro-batches of ``algo.micro_batch_size``: packed rows, or
        padded completions (a group's prompt once, as in RL)."""
        from rlvr.train.learn.batch import build_batch
        from rlvr.train.learn.update import _micro_slices

        micro = self.cfg.algo.micro_batch_size
        if self.cfg.sft.packing:
            examples = [trajectory_example(t) for g in groups for t in g.trajectories]
            length = max(self.cfg.sft.max_length, *(len(ids) for ids, _ in examples))  # RFT's may be longer
            rows = pack(examples, length)
            return [rows[s] for s in _micro_slices(len(rows), micro)]
        count = sum(len(g) for g in groups)
        batch = build_batch([g.trajectories for g in groups], [0.0] * count, learner.pad_id)
        batch = batch.to(self.cfg.model.device)
        return [batch.select(s) for s in _micro_slices(len(batch), micro)]

    @staticmethod
    def _logprobs(model: torch.nn.Module, micro: Micro) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logprobs, mask)`` of a micro-batch's tokens at temperature 1."""
        if isinstance(micro, list):
            return packed_token_logprobs(model, micro)
        from rlvr.train.learn.logprobs import completion_logprobs

        return completion_logprobs(model, micro, 1.0)[0], micro.completion_mask

    # ----------------------------------------------------------------------------- update
    def update(self, learner: Learner, groups: list[TrajectoryGroup]) -> dict[str, float]:
        """``passes`` optimizer steps, each over every trajectory of ``groups``; the loss is the
        token mean over all of them, accumulated over the micro-batches."""
        if learner.shard is not None:
            raise RlvrError(f"stage={self.cfg.stage} does not run under torchrun yet: train in one process")
        total = sum(t.num_trained for g in groups for t in g.trajectories)
        metrics: dict[str, float] = {"sft/tokens": float(total)}
        if not total:
            return metrics
        model, optimizer, scaler = learner.train_model, learner.optimizer, learner.scaler
        params = [p for group in optimizer.param_groups for p in group["params"]]
        micros = self._micro_batches(learner, groups)
        losses, norms, lrs = [], [], []
        for _ in range(self.passes):
            optimizer.zero_grad(set_to_none=True)
            loss_sum = 0.0
            for micro in micros:
                with learner.precision.autocast():
                    logprobs, mask = self._logprobs(model, micro)
                loss = -(logprobs.float() * mask).sum() / total  # this micro-batch's share of the mean
                (scaler.scale(loss) if scaler is not None else loss).backward()
                loss_sum += float(loss.detach())
            if scaler is not None:
                scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
            norms.append(float(torch.nn.utils.clip_grad_norm_(params, self.cfg.optim.grad_clip)))
            lrs.append(learner.scheduler.get_last_lr()[0])
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            learner.scheduler.step()
            losses.append(loss_sum)
        metrics.update(
            {
                "sft/loss": sum(losses) / len(losses),
                "update/loss": sum(losses) / len(losses),
                "update/grad_norm": sum(norms) / len(norms),
                "update/lr": sum(lrs) / len(lrs),
            }
        )
        if self.passes > 1:
            metrics["sft/loss_first_pass"], metrics["sft/loss_last_pass"] = losses[0], losses[-1]
        every = self.cfg.sft.eval_every if self.cfg.stage == "sft" else 0
        if every and (learner.version + 1) % every == 0:  # the version this update makes
            metrics.update(self.evaluate(learner))
        return metrics

    @torch.no_grad()
    def loss(self, learner: Learner, trajectories: Sequence[Trajectory]) -> float:
        """The token-mean cross-entropy of ``trajectories`` under the current policy, without gradient."""
        total = sum(t.num_trained for t in trajectories)
        groups = [TrajectoryGroup(t.example_index, [t]) for t in trajectories]
        summed = 0.0
        for micro in self._micro_batches(learner, groups):
            with learner.precision.autocast():
                logprobs, mask = self._logprobs(learner.model, micro)
            summed -= float((logprobs.float() * mask).sum())
        return summed / max(total, 1)

    def evaluate(self, learner: Learner) -> dict[str, float]:
        """``sft/eval_loss`` on the held-out demonstrations; ``{}`` without them."""
        if not self.held_out:
            return {}
        return {"sft/eval_loss": self.loss(learner, self.held_out)}
