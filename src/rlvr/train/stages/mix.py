"""SFT and RL in one update (``mix.demos``; the stage stays ``rl``): a demonstration inside each RL
group (LUFFY) or a cross-entropy term beside the RL loss (CHORD).

A demonstration is the example's worked solution (``metadata[mix.demo_field]``) or, without one,
its reference answer written the way the task's answer format asks (:func:`demonstration_text`),
tokenized as the assistant's reply to the very prompt the policy samples from, through the chat
template's end-of-turn token (:class:`Demonstrations`).

- LUFFY (Yan et al., 2025, "Learning to Reason under Off-Policy Guidance"; no seed abstract of its
  own, the closest being seeds/001_57615f5d8ed0b229.txt:441, ExPO, on why raw expert traces often
  fail to help RL): :class:`DemonstrationMembers` wraps the collector and replaces the last
  sampled member of each group with the demonstration, scored by the same rewards, so the group's
  advantages include it; its tokens are ``given`` and the ``luffy`` policy loss
  (:mod:`rlvr.algo.demo_mix`) trains them with a shaped ratio.
- CHORD (seeds/003_892821d26cd353de.txt:355): :func:`chord_step` gives the learner's update a
  weight ``1 − μ`` for the RL loss and an extra loss ``μ·Σ w_t·CE_t / tokens`` (``w = p·(1 − p)``)
  on demonstrations of the step's examples, both in the same optimizer step, with μ warmed up then
  decayed (:func:`rlvr.algo.demo_mix.chord_mu`).
"""

from __future__ import annotations

import inspect
import logging
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from rlvr.algo import POLICY_LOSSES, chord_mu, chord_token_weights, informative_groups, sft_token_loss
from rlvr.collect.collector import Collection
from rlvr.data.chat_data import ChatExample
from rlvr.data.demonstrations import to_demonstration
from rlvr.data.example import Example
from rlvr.data.prompts import ANSWER_TAG_INSTRUCTION, BOXED_INSTRUCTION, resolve_answer_format
from rlvr.errors import RlvrError
from rlvr.eval.evaluate import CORRECT_AT
from rlvr.models.chat import context_length, encode_prompt
from rlvr.rewards.scoring import score_completions
from rlvr.train.learn.batch import TrainBatch, build_batch
from rlvr.train.learn.logprobs import completion_logprobs
from rlvr.trajectory import GIVEN, Segment, Trajectory, TrajectoryGroup

if TYPE_CHECKING:
    from rlvr.collect.collector import Collector
    from rlvr.config import RunConfig
    from rlvr.train.learn.learner import Learner

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------ demonstrations
def demonstration_text(example: Example, cfg: RunConfig) -> str:
    """The reply an expert would give to ``example``: its ``metadata[mix.demo_field]`` (a worked
    solution) when the row has one, else its reference answer in the task's answer format
    (``<answer>17</answer>`` for ``answer_tag``, ``\\boxed{17}`` for ``boxed``, bare for ``none``),
    which is exactly what the task's verifier accepts from a completion."""
    key = cfg.mix.demo_field
    solution = example.metadata.get(key)
    if solution is not None:
        if not isinstance(solution, str) or not solution.strip():
            raise RlvrError(
                f"{example.where}: metadata.{key} (mix.demo_field) must be a non-empty string, "
                f"not {type(solution).__name__} {str(solution)[:40]!r}"
            )
        return solution
    if example.reference is None:
        raise RlvrError(
            f"{example.where}: no demonstration: the row has neither metadata.{key} (mix.demo_field) "
            "nor a reference answer"
        )
    reference = example.reference.strip()
    instruction = resolve_answer_format(cfg.data.answer_format)
    if instruction is None:
        return reference
    if instruction == ANSWER_TAG_INSTRUCTION:
        return f"<answer>{reference}</answer>"
    if instruction == BOXED_INSTRUCTION:
        return f"\\boxed{{{reference}}}"
    raise RlvrError(
        f"data.answer_format is an instruction of your own ({instruction[:60]!r}), so rlvr cannot write "
        f"the reference answer of {example.where} the way it asks; give every training row a worked "
        f"solution in metadata.{key} (a '{key}' column; mix.demo_field names it)"
    )


def demonstration_tokens(tokenizer: Any, example: Example, text: str, prompt_ids: Sequence[int]) -> list[int]:
    """The tokens of ``text`` as the assistant's reply after ``prompt_ids`` (the prompt the policy
    samples from), through the template's end-of-turn token: what a policy would have to sample
    to give this reply. The chat template's checks (drift, end of turn) are
    :func:`rlvr.data.demonstrations.to_demonstration`'s; a prompt that renders differently there
    than for sampling is refused, so the demonstration never continues a prompt the policy never saw."""
    if not getattr(tokenizer, "chat_template", None):  # a base model: the reply, then EOS
        if tokenizer.eos_token_id is None:
            raise RlvrError("mix.demos: the tokenizer has neither a chat template nor an EOS token")
        return [*tokenizer(text, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
    messages = [*example.prompt, {"role": "assistant", "content": text}]
    demo = to_demonstration(tokenizer, ChatExample(messages, None, example.where, 0), "last_assistant")
    if demo.prompt_ids != list(prompt_ids):
        raise RlvrError(
            f"{example.where}: with its demonstration appended, the prompt tokenizes differently "
            f"({len(demo.prompt_ids)} tokens) than the prompt the policy samples from ({len(prompt_ids)} "
            "tokens); the chat template renders the conversation differently once it has a reply"
        )
    return [token for s in demo.segments if s.kind == GIVEN for token in s.token_ids]


class Demonstrations:
    """Each training example's demonstration as a one-segment ``given`` trajectory after the
    example's prompt (``prompts[i]``, the collector's; encoded here when not given). Token ids are
    cached per example; every call returns a fresh trajectory (the learner writes advantages into
    it). A demonstration may be longer than ``rollout.max_new_tokens`` (an expert's trace often
    is); one that does not fit ``context`` tokens after its prompt is refused, naming the row."""

    def __init__(
        self,
        cfg: RunConfig,
        tokenizer: Any,
        examples: Sequence[Example],
        prompts: Sequence[list[int]] | None = None,
        context: int | None = None,
    ) -> None:
        self.cfg, self.tokenizer, self.examples = cfg, tokenizer, examples
        self.prompts, self.context = prompts, context
        self._cache: dict[int, tuple[str, list[int], list[int]]] = {}

    def prompt(self, index: int) -> list[int]:
        if self.prompts is not None:
            return list(self.prompts[index])
        return self._cached(index)[1]

    def _cached(self, index: int) -> tuple[str, list[int], list[int]]:
        if index not in self._cache:
            example = self.examples[index]
            prompt = (
                list(self.prompts[index])
                if self.prompts is not None
                else encode_prompt(self.tokenizer, example.prompt)
            )
            text = demonstration_text(example, self.cfg)
            ids = demonstration_tokens(self.tokenizer, example, text, prompt)
            if self.context is not None and len(prompt) + len(ids) > self.context:
                raise RlvrError(
                    f"{example.where}: its demonstration is {len(ids):,} tokens; after the prompt's "
                    f"{len(prompt):,} that is more than the model's context of {self.context:,} tokens; "
                    "shorten the demonstration or drop the row"
                )
            self._cache[index] = (text, prompt, ids)
        return self._cache[index]

    def trajectory(self, index: int) -> Trajectory:
        text, prompt, ids = self._cached(index)
        return Trajectory(
            prompt_ids=list(prompt),
            segments=[Segment(GIVEN, list(ids))],
            finish_reason="stop",
            text=text,
            example_index=index,
            example_id=self.examples[index].id,
        )


# ------------------------------------------------------------------------------ LUFFY
def check_luffy(cfg: RunConfig, collector: Collector) -> None:
    """Refuse settings under which a demonstration in a group would be trained wrongly or not at all."""
    a, loss = cfg.algo, POLICY_LOSSES.get(cfg.algo.loss)
    problems = []
    if cfg.stage != "rl":
        problems.append(f"it trains RL groups, so it needs stage=rl, not {cfg.stage}")
    if "given_mask" not in inspect.signature(loss).parameters:
        problems.append(
            f"algo.loss={a.loss!r} cannot tell demonstration tokens from sampled ones (it takes no "
            "given_mask); use algo.loss=luffy"
        )
    if cfg.rollout.group_size < 2:
        problems.append("rollout.group_size must be at least 2 (one member becomes the demonstration)")
    if not cfg.rewards.functions:
        problems.append("rewards.functions is empty: nothing would score the demonstration")
    if cfg.train.max_staleness is not None:
        problems.append("train.max_staleness: asynchronous collection bypasses the demonstration source")
    if a.kl_in_reward and a.kl_coef > 0:
        problems.append("algo.kl_in_reward reads sampling logprobs, which demonstration tokens lack")
    if any(collector.env_of(e) for e in collector.train_examples):
        problems.append("environment episodes have no single demonstration reply")
    if problems:
        raise RlvrError("mix.demos=luffy: " + "; ".join(problems))


class DemonstrationMembers:
    """LUFFY's source: the collector's groups, each with its last sampled member replaced by the
    example's demonstration (a ``given`` trajectory), scored by the collector's reward pool as a
    sample would be (alone: a group reward sees it as a group of one).

    A demonstration the correctness reward does not accept is kept (LUFFY assumes correct expert
    traces; the task's verifier may still disagree with a worked solution's format), logged once as
    a warning, and counted in ``mix/demo_rejected``. Which groups are kept is decided *after* the
    replacement, by the collector's own rules (no reward error; with ``algo.dynamic_sampling`` not
    all rewards equal; with ``algo.refill`` at most the wanted number, in sampling order): a group
    the policy failed everywhere has signal once a correct demonstration joins it (counted in
    ``mix/groups_rescued``), and one the policy solved everywhere but in its last sample may lose
    it. A greedy baseline (ReMax) is scored for the groups kept then. The collector's reward and
    accuracy metrics describe the policy's own samples, before the replacement; ``seen`` holds the
    replaced groups, so the logs show the demonstrations that were trained on."""

    def __init__(self, cfg: RunConfig, collector: Collector, tokenizer: Any) -> None:
        check_luffy(cfg, collector)
        self.cfg, self.collector = cfg, collector
        self.demos = Demonstrations(
            cfg,
            tokenizer,
            collector.train_examples,
            collector.train_prompts,
            context_length(getattr(collector.engine, "model", None)),
        )
        self.demos.trajectory(0)  # a template or answer-format problem fails at start-up
        self._warned = False

    def state(self) -> dict[str, Any]:
        return {}  # the prompt order is the collector's, saved with it

    def load_state(self, state: dict[str, Any]) -> None:
        pass

    def collect(self, count: int | None = None, greedy_baseline: bool = False) -> Collection:
        c, a = self.collector, self.cfg.algo
        collection = c.collect(count)
        before = {id(g) for g in collection.kept}
        usable = [g for g in collection.seen if None not in g.rewards]
        demos = self._scored([g.example_index for g in usable])
        for group, demo in zip(usable, demos):
            demo.policy_version = group.trajectories[-1].policy_version
            group.trajectories[-1] = demo
        kept = [g for g in usable if None not in g.rewards]  # the demonstration's reward errored
        if a.dynamic_sampling and kept:
            flat = torch.tensor([x for g in kept for x in g.rewards])
            index = torch.arange(len(kept)).repeat_interleave(torch.tensor([len(g) for g in kept]))
            kept = [g for g, keep in zip(kept, informative_groups(flat, index).tolist()) if keep]
        if a.refill:
            kept = kept[: count or self.cfg.rollout.prompts_per_step]
        if greedy_baseline and kept:
            errored = c._add_greedy_baselines(kept)
            if errored and self.cfg.rewards.on_error != "zero":
                kept = [g for g in kept if id(g) not in errored]
        rejected = [d for d in demos if d.errors or d.rewards.get(c.correctness, 0.0) < CORRECT_AT]
        if rejected and not self._warned:
            self._warned = True
            first = rejected[0]
            log.warning(
                "mix.demos=luffy: the reward '%s' does not accept the demonstration of %s (%r scored "
                "%s); such demonstrations are still trained on and counted in mix/demo_rejected",
                c.correctness,
                c.train_examples[first.example_index].where,
                first.text[:80],
                first.errors or first.rewards,
            )
        scored = [d.reward for d in demos if d.reward is not None]
        metrics = {
            **collection.metrics,
            "groups/kept": float(len(kept)),
            "mix/demos": float(len(kept)),
            **({"mix/demo_reward": sum(scored) / len(scored)} if scored else {}),
            "mix/demo_rejected": float(len(rejected)),
            "mix/groups_rescued": float(sum(id(g) not in before for g in kept)),
        }
        return Collection(kept, collection.seen, metrics)

    def _scored(self, indices: list[int]) -> list[Trajectory]:
        """The demonstrations of ``indices``, each scored alone by the collector's training pool."""
        c = self.collector
        demos = [self.demos.trajectory(i) for i in indices]
        if demos:
            examples = [c.train_examples[i] for i in indices]
            for demo, result in zip(demos, score_completions(c.pool, demos, examples, [1] * len(demos))):
                c._set_reward(demo, result)
        return demos


# ------------------------------------------------------------------------------ CHORD
class ChordSft:
    """CHORD's SFT term: demonstrations of ``sft_batch_size`` training examples per update — the
    step's own examples first (in group order), then, when the step has fewer, training examples
    drawn at random with a generator seeded by ``seed`` and the learner's version (the same draw
    on a resume). ``examples`` must be the collector's training examples in its order; each step
    checks that its groups' prompts are these examples' prompts."""

    def __init__(
        self,
        cfg: RunConfig,
        tokenizer: Any,
        examples: Sequence[Example],
        pad_id: int,
        context: int | None = None,
    ) -> None:
        if cfg.stage != "rl":
            raise RlvrError(f"mix.demos=chord adds SFT to the RL update: it needs stage=rl, not {cfg.stage}")
        self.cfg, self.pad_id = cfg, pad_id
        self.demos = Demonstrations(cfg, tokenizer, examples, context=context)
        self.demos.trajectory(0)  # a template or answer-format problem fails now

    @classmethod
    def from_config(cls, cfg: RunConfig, pad_id: int, model: torch.nn.Module) -> ChordSft:
        """Built from the run's config: the tokenizer, and the training examples as the orchestrator
        reads them (the learner is given neither); ``model``'s context bounds a demonstration."""
        from rlvr.data.from_config import load_datasets
        from rlvr.models import load_tokenizer

        examples = load_datasets(cfg.data).train
        return cls(cfg, load_tokenizer(cfg.model.name), examples, pad_id, context_length(model))

    def mu(self, version: int) -> float:
        """μ of the update after ``version`` updates: step ``version + 1`` of ``train.steps``. A
        run shorter than ``mix.warmup_steps`` ends during the warm-up (μ never reaches its peak)."""
        m, steps = self.cfg.mix, self.cfg.train.steps
        step, total = min(version + 1, steps), max(steps, m.warmup_steps)
        return chord_mu(step, total, m.mu_peak, m.warmup_steps, m.mu_end)

    def indices(self, groups: list[TrajectoryGroup], version: int) -> list[int]:
        """Which examples' demonstrations the update trains on (see the class docstring)."""
        size, total = self.cfg.mix.sft_batch_size, len(self.demos.examples)
        for g in groups:
            if g.trajectories and g.trajectories[0].prompt_ids != self.demos.prompt(g.example_index):
                raise RlvrError(
                    f"mix.demos=chord: the group of example {g.example_index} was sampled from another "
                    "prompt than that example's in the learner's copy of the training data"
                )
        chosen = list(dict.fromkeys(g.example_index for g in groups))[:size]
        if len(chosen) < size:
            generator = torch.Generator().manual_seed(self.cfg.seed + 1_000_003 * (version + 1))
            taken = set(chosen)
            for i in torch.randperm(total, generator=generator).tolist():
                if len(chosen) == min(size, total):
                    break
                if i not in taken:
                    chosen.append(i)
        return chosen

    def batch(self, indices: list[int]) -> TrainBatch:
        demos = [[self.demos.trajectory(i)] for i in indices]
        return build_batch(demos, [0.0] * len(demos), self.pad_id).to(self.cfg.model.device)


def chord_loss(model: torch.nn.Module, batch: TrainBatch, mu: float) -> tuple[torch.Tensor, dict[str, float]]:
    """``μ·Σ w_t·CE_t / tokens`` over ``batch``'s demonstration tokens, ``w = p·(1 − p)``
    (temperature 1: the model's own distribution), and its stats: ``mix/sft_loss`` (the weighted
    cross-entropy before μ) and ``mix/sft_ce`` (the plain cross-entropy per token)."""
    logprobs = completion_logprobs(model, batch, 1.0)[0]
    mask = batch.completion_mask
    tokens = mask.sum().clamp(min=1)
    ce = sft_token_loss(logprobs, mask)
    sft = (chord_token_weights(logprobs) * ce).sum() / tokens
    return mu * sft, {"mix/sft_loss": float(sft.detach()), "mix/sft_ce": float(ce.detach().sum() / tokens)}


_CHORD_TERMS: weakref.WeakKeyDictionary[Any, ChordSft] = weakref.WeakKeyDictionary()


def chord_step(
    learner: Learner, groups: list[TrajectoryGroup]
) -> tuple[float, Callable[[], tuple[torch.Tensor, dict[str, float]]], dict[str, float]]:
    """``(main_weight, aux_loss, metrics)`` for the learner's RL update of ``groups``: ``1 − μ``,
    the SFT term (:func:`chord_loss` on this step's demonstrations, through the module the update
    trains) and ``mix/mu``. The term is built on the learner's first CHORD update."""
    if learner.shard is not None:
        raise RlvrError("mix.demos=chord does not run under torchrun yet (one process only)")
    term = _CHORD_TERMS.get(learner)
    if term is None:
        term = _CHORD_TERMS[learner] = ChordSft.from_config(learner.cfg, learner.pad_id, learner.model)
    mu = term.mu(learner.version)
    indices = term.indices(groups, learner.version)
    batch = term.batch(indices)
    metrics = {"mix/mu": mu, "mix/sft_demos": float(len(indices))}
    return 1.0 - mu, lambda: chord_loss(learner.train_model, batch, mu), metrics
