"""Playing a role game for the collector: prompts → engine → each role's reward pool → groups.

:class:`RolePlayer` is what :class:`rlvr.collect.collector.Collector` uses when ``roles.game`` is
set. For the examples of one step it runs the game's phases: every role of a phase is sampled
(one engine call per role, its own group size and token limit), then scored in the game's role
order, each role by its own pool with the other roles' outputs in the scored example's metadata
(:meth:`rlvr.roles.base.RoleGame.scoring_info`). The result is one
:class:`~rlvr.trajectory.TrajectoryGroup` per role prompt, tagged with its role, its prompt text
and its loss weight (``roles.settings.<role>.weight``, which the learner multiplies into the
role's advantages). Advantages stay within a group, so within a role and a prompt.

By default all roles are the one policy (shared weights): a role is its prompt. A role with a
policy of its own (``roles.settings.<role>.policy: own``, :mod:`rlvr.roles.policies`) is sampled
with its own engine, given as ``engines``. The learners compute log-probs at
``rollout.temperature`` for every row, so the roles sample at that temperature.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch

from rlvr.config import RunConfig
from rlvr.config.rewards import RewardItem
from rlvr.config.roles import RoleSettings
from rlvr.data import Example
from rlvr.data.prompts import demonstration_turns, insert_demonstrations
from rlvr.errors import RlvrError
from rlvr.models.chat import encode_prompts
from rlvr.rewards import RewardPool
from rlvr.rewards.scoring import score_completions, training_pool
from rlvr.roles import GAMES
from rlvr.roles.base import Played, RoleGame, RoleGroup, fill
from rlvr.rollout import RolloutEngine, SamplingParams
from rlvr.trajectory import Trajectory, TrajectoryGroup


def make_game(cfg: RunConfig, correctness: str) -> RoleGame:
    """The configured game, or an error naming ``roles.game`` / ``roles.params``."""
    try:
        factory = GAMES.get(cfg.roles.game or "")
    except RlvrError as err:
        raise RlvrError(f"roles.game: {err}") from err
    params: dict[str, Any] = {"correctness": correctness, **cfg.roles.params}
    try:
        game = factory(**params)
    except (TypeError, ValueError) as err:
        raise RlvrError(f"roles.params: {err}") from err
    game.check()
    return game


class RolePlayer:
    """Plays ``roles.game`` for the collector (module docstring)."""

    def __init__(
        self,
        cfg: RunConfig,
        engine: RolloutEngine,
        tokenizer: Any,
        primary_pool: RewardPool | None,
        context: int | None,
        context_from: str,
        correctness: str,
        set_reward: Callable[[Trajectory, Any], None],
        engines: dict[str, RolloutEngine] | None = None,
    ) -> None:
        self.cfg, self.engine, self.tokenizer = cfg, engine, tokenizer
        self.engines = dict(engines or {})  # roles with a policy of their own: its engine
        self.context, self.context_from, self.set_reward = context, context_from, set_reward
        self.game = game = make_game(cfg, correctness)
        unknown = sorted(set(cfg.roles.settings) - set(game.roles))
        if unknown:
            raise RlvrError(
                f"roles.settings.{unknown[0]}: the game '{cfg.roles.game}' has no role {unknown[0]!r} "
                f"(its roles: {', '.join(game.roles)})"
            )
        self.settings = {role: cfg.roles.settings.get(role, RoleSettings()) for role in game.roles}
        primary = game.roles[0]
        first = self.settings[primary]
        if first.rewards is not None or first.prompt is not None or first.few_shot:
            raise RlvrError(
                f"roles.settings.{primary}: the primary role answers the example's prompt and is scored by "
                "rewards.functions; set those (and data.few_shot) instead of its prompt, few_shot or rewards"
            )
        if first.policy == "own":
            raise RlvrError(
                f"roles.settings.{primary}.policy: the primary role '{primary}' is the run's policy "
                "(model.name); give another role a policy of its own"
            )
        if primary_pool is None:
            raise RlvrError(
                f"rewards.functions: the primary role '{primary}' of '{cfg.roles.game}' needs a reward"
            )
        self.pools: dict[str, RewardPool] = {primary: primary_pool}
        for role in game.roles[1:]:
            s = self.settings[role]
            key = f"roles.settings.{role}.prompt"
            template = s.prompt or game.prompt_templates.get(role)
            if template is not None:
                try:
                    fill(template, dict.fromkeys(game.template_fields.get(role, ()), ""), key)
                except ValueError as err:
                    raise RlvrError(str(err)) from err
            items = s.rewards if s.rewards is not None else game.default_rewards(role)
            functions = [RewardItem(**item) if isinstance(item, dict) else item for item in items]
            try:
                self.pools[role] = training_pool(cfg.rewards.model_copy(update={"functions": functions}))
            except (RlvrError, ValueError) as err:
                raise RlvrError(f"roles.settings.{role}.rewards: {err}") from err
        self.metrics: dict[str, float] = {}

    @property
    def primary(self) -> str:
        return self.game.roles[0]

    def engine_of(self, role: str) -> RolloutEngine:
        """The engine ``role`` samples with: its own policy's, or the run's."""
        return self.engines.get(role, self.engine)

    def generators(self) -> list[torch.Generator]:
        """The sampling RNG of every engine the game samples with (the run's first)."""
        return [self.engine.generator, *(e.generator for e in self.engines.values())]

    def _params(self, role: str) -> SamplingParams:
        r, s = self.cfg.rollout, self.settings[role]
        return SamplingParams(
            n=s.group_size or r.group_size,
            temperature=r.temperature,
            top_p=r.top_p,
            max_new_tokens=s.max_new_tokens or r.max_new_tokens,
            ignore_eos=r.ignore_eos,
        )

    def play(
        self, indices: list[int], examples: Sequence[Example], encoded: Sequence[list[int]]
    ) -> list[TrajectoryGroup]:
        """Every role's groups for ``examples[i]``, ``i`` in ``indices`` (``encoded[i]``: the example's
        own prompt, encoded): the primary role's groups first, in the order of ``indices``."""
        played: dict[int, Played] = {i: {} for i in indices}
        for phase in self.game.phases:
            for role in phase:
                self._sample(role, indices, examples, encoded, played)
            for role in (r for r in self.game.roles if r in phase):
                self._score(role, indices, examples, played)
        return [self._group(g) for role in self.game.roles for i in indices for g in played[i].get(role, [])]

    def _sample(
        self,
        role: str,
        indices: list[int],
        examples: Sequence[Example],
        encoded: Sequence[list[int]],
        played: dict[int, Played],
    ) -> None:
        template = self.settings[role].prompt or self.game.prompt_templates.get(role)
        entries = []
        for i in indices:
            try:
                prompts = self.game.prompts(role, examples[i], played[i], template)
            except ValueError as err:
                raise RlvrError(f"roles ({self.cfg.roles.game}, role {role}): {err}") from err
            entries.extend((i, p) for p in prompts)
        if not entries:
            return
        params = self._params(role)
        if role == self.primary:
            ids = [list(encoded[i]) for i, _ in entries]
        else:
            shots = demonstration_turns(self.settings[role].few_shot, None)
            role_examples = [
                replace(examples[i], prompt=insert_demonstrations(p.messages, shots)) for i, p in entries
            ]
            ids = encode_prompts(
                self.tokenizer,
                role_examples,
                self.context,
                params.max_new_tokens,
                self.context_from,
                f"roles.settings.{role}.max_new_tokens",
            )
        engine = self.engine_of(role)
        version = engine.policy_version
        for (i, prompt), completions in zip(entries, engine.generate(ids, params)):
            trajectories = [Trajectory.from_completion(c, i, examples[i].id, version) for c in completions]
            played[i].setdefault(role, []).append(RoleGroup(role, i, prompt, trajectories))

    def _score(
        self, role: str, indices: list[int], examples: Sequence[Example], played: dict[int, Played]
    ) -> None:
        groups = [g for i in indices for g in played[i].get(role, [])]
        if not groups:
            return
        scored = []
        for g in groups:
            example = examples[g.example_index]
            info = self.game.scoring_info(role, g, example, played[g.example_index])
            scored.append(replace(example, prompt=g.prompt.messages, metadata={**example.metadata, **info}))
        flat = [t for g in groups for t in g.trajectories]
        per_row = [e for e, g in zip(scored, groups) for _ in g.trajectories]
        results = score_completions(self.pools[role], flat, per_row, [len(g.trajectories) for g in groups])
        for t, result in zip(flat, results):
            self.set_reward(t, result)

    def _group(self, g: RoleGroup) -> TrajectoryGroup:
        prompt = next((m["content"] for m in reversed(g.prompt.messages) if m.get("role") == "user"), "")
        return TrajectoryGroup(
            g.example_index,
            g.trajectories,
            role=g.role,
            role_prompt=None if g.role == self.primary else prompt,
            loss_weight=self.settings[g.role].weight,
        )

    def close(self) -> None:
        for role, pool in self.pools.items():
            if role != self.primary:  # the collector closes its own
                pool.close()


def role_metrics(groups: Sequence[TrajectoryGroup], prefix: str) -> dict[str, float]:
    """Per role: the mean reward and the mean of each reward component over its scored samples,
    the share of samples without a verdict, and the mean completion length."""
    metrics: dict[str, float] = {}
    roles = dict.fromkeys(g.role for g in groups if g.role is not None)
    for role in roles:
        rows = [t for g in groups if g.role == role for t in g.trajectories]
        scored = [t for t in rows if not t.errors and t.reward is not None]
        base = f"{prefix}{role}/"
        metrics[base + "samples"] = float(len(rows))
        metrics[base + "reward"] = sum(t.reward for t in scored) / max(len(scored), 1)
        metrics[base + "unscored"] = (len(rows) - len(scored)) / max(len(rows), 1)
        metrics[base + "mean_length"] = sum(len(t) for t in rows) / max(len(rows), 1)
        for name in dict.fromkeys(k for t in scored for k in t.rewards):
            values = [t.rewards[name] for t in scored if name in t.rewards]
            metrics[base + name] = sum(values) / max(len(values), 1)
    return metrics


def check_roles(cfg: RunConfig, episodes: bool) -> None:
    """Refuse what a role game does not combine with yet, naming the keys."""
    import inspect

    from rlvr.algo import ADVANTAGE_ESTIMATORS

    game = cfg.roles.game
    if cfg.stage != "rl":
        raise RlvrError(f"roles.game={game}: role games train with RL (stage: rl), not stage: {cfg.stage}")
    if episodes:
        raise RlvrError(
            f"roles.game={game}: the examples play in an environment (env.name / metadata.env); "
            "a role game plays single-turn prompts"
        )
    if cfg.data.replay.kind != "none":
        raise RlvrError(
            f"roles.game={game} with data.replay: a replayed sample has no role yet; unset data.replay"
        )
    estimator = inspect.signature(ADVANTAGE_ESTIMATORS.get(cfg.algo.advantage)).parameters
    for needs in ("mc_values", "baseline_rewards"):
        if needs in estimator:
            raise RlvrError(
                f"roles.game={game} with algo.advantage={cfg.algo.advantage}: its {needs} are measured on "
                "the examples' own prompts only; use a group estimator (grpo, rloo, ...)"
            )
