"""The collector: prompts → engine → reward pool → scored groups of trajectories. It owns no optimizer.

One :meth:`Collector.collect` call is what a training step samples: ``rollout.prompts_per_step``
prompts from a seeded, resumable order, ``rollout.group_size`` trajectories each, every one scored
in the reward pool (errors kept, never read as zeros). Groups with a reward error are dropped
(``rewards.on_error=skip_group``) or scored 0 and said so (``zero``); with
``algo.dynamic_sampling`` groups whose rewards are all equal are dropped too, and ``algo.refill``
samples more prompts to replace them. The learner sees only the kept groups; metrics and logs
see every sampled one.

The collector samples from whatever weights its engine holds; a :mod:`rlvr.train.loop.weight_sync`
moves the learner's weights there and stamps the engine with the learner's version, which every
trajectory carries. The same object evaluates held-out problems (greedy accuracy, pass@k) with a
pool of the first reward alone.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import torch
from rich.console import Console

from rlvr.algo import ADVANTAGE_ESTIMATORS
from rlvr.algo.filters import informative_groups
from rlvr.collect.episode_eval import evaluate_episodes
from rlvr.collect.exploration import RolloutExploration
from rlvr.collect.records import reward_metrics, sample_records
from rlvr.collect.steps import apply_step_rewards, step_end_positions
from rlvr.collect.tree import grow_trees
from rlvr.collect.vine import add_mc_values
from rlvr.config import RunConfig
from rlvr.data import Example
from rlvr.data.draw import build_draw
from rlvr.data.history import PromptHistory, correctness_key
from rlvr.envs import Environment, make_env
from rlvr.envs.base import env_factory
from rlvr.envs.data_params import check_env_examples, env_params, route_env
from rlvr.errors import RlvrError
from rlvr.eval.evaluate import evaluate, scaling_plan
from rlvr.log import eval_progress
from rlvr.models.chat import encode_prompts, rollout_context
from rlvr.rewards.scoring import eval_pool, score_completions, training_pool, wants_self_certainty
from rlvr.rollout import RolloutEngine, SamplingParams
from rlvr.rollout.chat_ledger import check_template
from rlvr.rollout.episodes import EpisodeLimits, EpisodeStats, run_episodes
from rlvr.trajectory import Trajectory, TrajectoryGroup


def run_here(items: list, fn: Callable[[list], list]) -> list:
    """``fn`` over all ``items`` in this process (the default :attr:`Collector.spread`)."""
    return fn(items)


@dataclass
class Collection:
    """What one collect call produced: the groups the learner gets, and every group sampled."""

    kept: list[TrajectoryGroup]
    seen: list[TrajectoryGroup]
    metrics: dict[str, float]

    def kept_flags(self) -> list[list[bool]]:
        """For each trajectory of each group of ``seen``, whether the learner gets it: its group was
        kept whole, or with its scored members only, or a stage picked it (RFT, DPO)."""
        trained = {id(t) for g in self.kept for t in g.trajectories}
        return [[id(t) in trained for t in g.trajectories] for g in self.seen]


class Collector:
    """Samples and scores groups of trajectories from ``train_examples``; evaluates on ``eval_examples``."""

    def __init__(
        self,
        cfg: RunConfig,
        engine: RolloutEngine,
        tokenizer,
        train_examples: Sequence[Example],
        eval_examples: Sequence[Example] = (),
        role_engines: dict[str, RolloutEngine] | None = None,
        image_log: Any = None,
    ) -> None:
        """``role_engines``: the engines of a role game's roles with a policy of their own;
        ``image_log``: where logged samples' images go (a :class:`rlvr.vision.image_log.ImageLog`)."""
        self.cfg, self.engine = cfg, engine
        self.train_examples, self.eval_examples = list(train_examples), list(eval_examples)
        # prompts that cannot fit the context (with the completion) are refused here, naming the row;
        # a huge one before it is tokenized
        context, context_from = rollout_context(cfg, engine)
        self.train_prompts = encode_prompts(
            tokenizer, self.train_examples, context, cfg.rollout.max_new_tokens, context_from
        )
        eval_key = "eval.max_new_tokens" if cfg.eval.max_new_tokens else "rollout.max_new_tokens"
        self.eval_prompts = encode_prompts(
            tokenizer,
            self.eval_examples,
            context,
            cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens,
            context_from,
            eval_key,
        )
        self.pool = training_pool(cfg.rewards) if cfg.rewards.functions else None
        self.eval_pool = eval_pool(cfg.rewards) if cfg.rewards.functions else None
        # the engine computes per-token self-certainty only when a reward takes it
        self.self_certainty = wants_self_certainty(self.pool)
        # VinePPO: an estimator that names mc_values gets Monte-Carlo values of its step boundaries
        estimator = ADVANTAGE_ESTIMATORS.get(cfg.algo.advantage)
        self.wants_mc_values = "mc_values" in inspect.signature(estimator).parameters
        # which prompts are rolled out (rlvr.data.draw) and what their groups scored (data/history.py)
        sel = cfg.data.selection
        self.history = PromptHistory(len(self.train_examples), self.correctness, sel.easy_at, sel.hard_at)
        self.draw = build_draw(cfg, self.train_examples, self.history)
        self.replay = None
        if cfg.data.replay.kind != "none":
            from rlvr.collect.replay import ReplayBuffer

            self.replay = ReplayBuffer(cfg.data.replay, self.correctness, cfg.seed)
        self.round = 0  # collect calls so far: the step the history records a group at
        self.tokenizer = tokenizer
        self.image_log = image_log
        env = cfg.env
        self.limits = EpisodeLimits(
            max_turns=env.max_turns,
            max_tokens=env.max_tokens,
            step_timeout_s=env.step_timeout_s,
            max_observation_tokens=env.max_observation_tokens,
            episode_timeout_s=env.episode_timeout_s,
            reuse_kv=env.reuse_kv,
        )
        self.episode_stats = EpisodeStats()
        self._env_threads: ThreadPoolExecutor | None = None
        # data rows name environments and their params: refuse import paths and unsafe params now,
        # naming the row, before any module is imported or episode is played
        check_env_examples((*self.train_examples, *self.eval_examples), env.name, env.params)
        if len({bool(self.env_of(e)) for e in self.eval_examples}) > 1:
            raise RlvrError(
                "the held-out set mixes environment episodes and single-turn problems; evaluate them "
                "as separate runs (set data.eval_size=0 here)"
            )
        if any(self.env_of(e) for e in (*self.train_examples, *self.eval_examples)):
            if any(item.name == "self_certainty" for item in cfg.rewards.functions):
                raise RlvrError(
                    "rewards.functions: self_certainty scores single-turn completions from the engine's "
                    "per-token distributions; environment episodes (env.name, metadata.env) do not carry them"
                )
            check_template(tokenizer)
            for name in {self.env_of(e) for e in (*self.train_examples, *self.eval_examples)} - {None}:
                env_factory(name)  # an unknown name fails now, naming the registered ones
        # wall time of evaluations since the orchestrator last reset it: an evaluation of the sampler's
        # weights and one of the master weights add up (the time budget's estimate of the final eval)
        self.eval_s = 0.0
        # How sampling work is split: here, all of it; under torchrun each rank samples its slice of
        # the prompts and every rank gets all groups back (rlvr.train.scale.distributed.Ranks.spread).
        self.spread: Callable[[list, Callable[[list], list]], list] = run_here
        self._eval_turns = self._train_turns = 0.0  # model turns per episode, last eval / last step
        self.exploration = RolloutExploration(cfg, self.engine)  # rlvr.collect.exploration
        self.roles = None  # a role game (roles.game): several roles of the policy per example
        if cfg.roles.game:
            from rlvr.roles.play import RolePlayer, check_roles

            check_roles(cfg, any(self.env_of(e) for e in (*self.train_examples, *self.eval_examples)))
            self.roles = RolePlayer(
                cfg,
                engine,
                tokenizer,
                self.pool,
                context,
                context_from,
                self.correctness,
                self._set_reward,
                role_engines,
            )

    # ----------------------------------------------------------------------------- state
    @property
    def generator(self) -> torch.Generator:
        """The sampling RNG (checkpointed by the orchestrator)."""
        return self.engine.generator

    def state(self) -> dict[str, Any]:
        """The draw's, the prompt history's and the replay buffer's state (JSON-safe)."""
        state = {"sampler": self.draw.state(), "history": self.history.state(), "round": self.round}
        if self.exploration.state() is not None:
            state["exploration"] = self.exploration.state()
        if self.replay is not None:
            state["replay"] = self.replay.state()
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        self.draw.load_state(state["sampler"])
        self.history.load_state(state.get("history", {}))
        self.round = state.get("round", 0)
        self.exploration.load_state(state.get("exploration"))
        if self.replay is not None and "replay" in state:
            self.replay.load_state(state["replay"])

    # ----------------------------------------------------------------------------- sampling
    def _params(self) -> SamplingParams:
        r = self.cfg.rollout
        return SamplingParams(
            n=r.group_size,
            temperature=r.temperature,
            top_p=r.top_p,
            max_new_tokens=r.max_new_tokens,
            ignore_eos=r.ignore_eos,
            self_certainty=self.self_certainty,
            intent_temperature=r.ifg.temperature,
            intent_end=r.ifg.end,
            intent_max_tokens=r.ifg.max_tokens,
        )

    def env_of(self, example: Example) -> str | None:
        """The environment an example plays out in (its ``metadata.env``, else ``env.name``), or None.
        A row may name only a registered environment or the config's (:mod:`rlvr.envs.data_params`)."""
        return route_env(example, self.cfg.env.name)

    def sample_groups(self, indices: list[int]) -> list[TrajectoryGroup]:
        """``rollout.group_size`` scored trajectories for each training example in ``indices``:
        one completion each, or one multi-turn episode each for examples routed to an environment.
        With a role game, every role's groups: the primary role's first, one per index."""
        if self.roles is not None:
            return self.roles.play(indices, self.train_examples, self.train_prompts)
        routed = [bool(self.env_of(self.train_examples[i])) for i in indices]
        single = iter(
            self._single_turn_groups([i for i, r in zip(indices, routed) if not r]) if not all(routed) else []
        )
        multi = iter(self._episode_groups([i for i, r in zip(indices, routed) if r]) if any(routed) else [])
        return [next(multi) if r else next(single) for r in routed]

    def _single_turn_groups(self, indices: list[int]) -> list[TrajectoryGroup]:
        completions = self.engine.generate([self.train_prompts[i] for i in indices], self._params())
        flat = [c for g in completions for c in g]
        examples = [self.train_examples[indices[c.prompt_index]] for c in flat]
        results = score_completions(self.pool, flat, examples, [len(g) for g in completions])
        version = self.engine.policy_version
        self.exploration.count_intents(flat)
        groups, at = [], 0
        for index, group in zip(indices, completions):
            trajectories = []
            for c in group:
                t = Trajectory.from_completion(c, index, self.train_examples[index].id, version)
                self._set_reward(t, results[at])
                at += 1
                trajectories.append(t)
            groups.append(TrajectoryGroup(index, trajectories))
        return groups

    def _episode_groups(self, indices: list[int]) -> list[TrajectoryGroup]:
        examples = [(i, self.train_examples[i]) for i in indices]
        groups = run_episodes(
            self.engine,
            self.tokenizer,
            examples,
            self._make_env,
            self._params(),
            self.limits,
            self._threads(),
            self.episode_stats,
        )
        flat = [t for g in groups for t in g]
        results = [None] * len(flat)
        if self.pool is not None:
            results = score_completions(
                self.pool,
                flat,
                [self.train_examples[t.example_index] for t in flat],
                [len(g) for g in groups],
            )
        version = self.engine.policy_version
        for t, result in zip(flat, results):
            t.example_id, t.policy_version = self.train_examples[t.example_index].id, version
            self._set_reward(t, result)
        return [TrajectoryGroup(i, g) for i, g in zip(indices, groups)]

    def _set_reward(self, t: Trajectory, result) -> None:
        """The trained-on total: the rewards' total plus the environment's turn rewards; None (or 0
        with ``rewards.on_error=zero``) when a reward or the environment failed."""
        env_components = dict(t.rewards)
        if result is not None:
            t.rewards = {**result.components, **env_components}
            t.errors = {**dict(result.errors), **t.errors}
            if result.steps and not t.errors:  # a reward's per-step rewards, onto their tokens
                weights = {f.label or f.name: f.weight for f in self.cfg.rewards.functions}
                apply_step_rewards(t, result.steps, weights, self.tokenizer, self.cfg.rewards.step_separator)
        prime = self.cfg.algo.prime
        if prime.coef > 0 and prime.granularity == "step" and not t.step_ends:  # PRIME sums per step
            t.step_ends = step_end_positions(t, self.tokenizer, self.cfg.rewards.step_separator)
        total = (result.total if result is not None else 0.0) if not t.errors else None
        if total is not None:
            total += sum(t.turn_rewards)
        t.reward = total if total is not None else (0.0 if self.cfg.rewards.on_error == "zero" else None)

    def collect(self, count: int | None = None, greedy_baseline: bool = False) -> Collection:
        """Sample ``count`` groups (default ``rollout.prompts_per_step``), drop the uninformative ones.

        ``greedy_baseline`` scores one greedy completion per kept group (ReMax's baseline).

        Exploration (:mod:`rlvr.collect.exploration`) wraps the step: the adaptive temperature,
        AQN's parameter noise (every sampling call of the step: refills, VinePPO's, the greedy
        baselines), IFG's counts.
        """
        self.round += 1
        with self.exploration.around(self.round) as extra:
            collection = self._collect(count, greedy_baseline)
        extra.update(self.exploration.after(collection.seen))
        collection.metrics.update(extra)
        return collection

    def _collect(self, count: int | None, greedy_baseline: bool) -> Collection:
        a = self.cfg.algo
        want = count or self.cfg.rollout.prompts_per_step
        kept: list[TrajectoryGroup] = []
        seen: list[TrajectoryGroup] = []
        rounds = 1 + (a.max_refills if a.refill else 0)
        counts = {"samples/unscored": 0.0, "groups/partial": 0.0}
        for _ in range(rounds):
            batch = self.sample_round(want - len(kept) if kept else want)
            seen.extend(batch)
            usable = self._scored_groups(batch, counts)  # unscored members never enter a baseline
            if self.replay is not None:  # past samples mixed into the new groups, then the new ones kept
                usable = self.replay.mix(usable, self.engine.policy_version)
                self.replay.add(batch)
            if a.dynamic_sampling and usable:
                flat = torch.tensor([x for g in usable for x in g.rewards])
                index = torch.arange(len(usable)).repeat_interleave(torch.tensor([len(g) for g in usable]))
                informative = informative_groups(flat, index)
                usable = [g for g, keep in zip(usable, informative.tolist()) if keep]
            kept.extend(usable)
            if len(kept) >= want or not a.refill:
                break
        kept = kept[:want] if a.refill else kept
        vine = {}
        if self.wants_mc_values and kept:  # VinePPO's values, or a tree grown from each group
            tree = bool(self.cfg.algo.advantage_params.get("tree", False))
            kept, vine = grow_trees(self, kept) if tree else (kept, add_mc_values(self, kept))
        if greedy_baseline and kept:
            errored = self._add_greedy_baselines(kept)
            if errored and self.cfg.rewards.on_error != "zero":  # no baseline, no advantage
                kept = [g for g in kept if id(g) not in errored]
        stats = {"groups/sampled": float(len(seen)), "groups/kept": float(len(kept)), **counts, **vine}
        stats.update(self.draw.metrics())
        stats.update(self.history.summary())
        if self.replay is not None:
            stats.update(self.replay.metrics())
        if self.cfg.data.sources:
            from rlvr.data.mixture import source_metrics

            stats.update(source_metrics(seen, kept, self.train_examples, self.correctness))
        stats.update(reward_metrics(self.primary_groups(seen), self.correctness))
        if self.roles is not None:
            from rlvr.roles.play import role_metrics

            stats.update(role_metrics(seen, "role/"))
        return Collection(kept, seen, stats)

    def sample_round(self, count: int) -> list[TrajectoryGroup]:
        """``count`` prompts from the draw, sampled and scored (spread over the ranks), recorded in
        the prompt history at step ``self.round`` and shown to the draw."""
        batch = self.spread(self.draw.take(count), self.sample_groups)
        primary = self.primary_groups(batch)
        self.history.record(primary, self.round, [self.train_examples[g.example_index].id for g in primary])
        self.draw.observe(primary)
        return batch

    def primary_groups(self, groups: list[TrajectoryGroup]) -> list[TrajectoryGroup]:
        """The groups that answer the examples' own prompts: all of them, or a role game's primary
        role's (what the prompt history, the draw and the reward metrics read)."""
        if self.roles is None:
            return groups
        return [g for g in groups if g.role == self.roles.primary]

    def _scored_groups(self, batch: list[TrajectoryGroup], counts: dict[str, float]) -> list[TrajectoryGroup]:
        """The groups the learner may get, with their scored members only.

        A member without a verdict (a reward error or timeout, an environment without a score) is
        left out of its group: it never enters the group's baseline as a 0. Under
        ``rewards.on_error=partial`` a group keeps training on its scored members when at least
        ``rewards.min_scored`` of them remain (a new, smaller group; the sampled one stays in the
        logs whole); one with fewer is dropped (and refilled under ``algo.refill``). Under
        ``skip_group`` any unscored member drops the group; ``zero`` already scored errors 0."""
        r = self.cfg.rewards
        least = min(r.min_scored, self.cfg.rollout.group_size)
        out = []
        for group in batch:
            scored = [t for t in group.trajectories if t.reward is not None]
            unscored = len(group.trajectories) - len(scored)
            counts["samples/unscored"] += unscored
            if not unscored:
                out.append(group)
            elif r.on_error == "partial" and len(scored) >= least:
                counts["groups/partial"] += 1
                out.append(replace(group, trajectories=scored))
        return out

    @property
    def correctness(self) -> str:
        """The reward component that says whether an answer is right: the first reward's, or the
        environment's ``env/solved`` when only the environment rewards."""
        return correctness_key(self.cfg)

    def _add_greedy_baselines(self, groups: list[TrajectoryGroup]) -> set[int]:
        """Each group's ``baseline_reward``: the reward of one greedy completion of its prompt. Returns
        the ids of groups whose baseline could not be scored (a reward error: 0 under
        ``rewards.on_error=zero``; such groups are dropped under ``skip_group``)."""
        totals = self.spread([g.example_index for g in groups], self._greedy_totals)
        errored = set()
        for group, total in zip(groups, totals):
            group.baseline_reward = total if total is not None else 0.0
            if total is None:
                errored.add(id(group))
        return errored

    def _greedy_totals(self, indices: list[int]) -> list[float | None]:
        """The reward total of one greedy completion of each training example in ``indices``."""
        params = SamplingParams(
            n=1,
            temperature=0.0,
            max_new_tokens=self.cfg.rollout.max_new_tokens,
            self_certainty=self.self_certainty,
        )
        greedy = self.engine.generate([self.train_prompts[i] for i in indices], params)
        examples = [self.train_examples[i] for i in indices]
        results = score_completions(self.pool, [c[0] for c in greedy], examples, [1] * len(indices))
        return [result.total for result in results]

    def reward_error_metrics(self) -> dict[str, float]:
        """Reward errors by kind and reward since the previous call (``reward_errors/<label>/<kind>``)."""
        metrics = {}
        for label, counts in (self.pool.take_stats() if self.pool is not None else {}).items():
            metrics.update(
                {f"reward_errors/{label}/{k}": float(v) for k, v in counts.items() if k != "calls"}
            )
        return metrics

    def sample_records(self, groups: list[TrajectoryGroup], step: int, limit: int) -> list[dict[str, Any]]:
        """samples.jsonl rows (prompt text, completion, rewards, advantage) of the first ``limit``
        (with a role game: of each role)."""

        def decode(ids: list[int]) -> str:
            return self.tokenizer.decode(ids, skip_special_tokens=False)

        tokens, group_by = self.cfg.log.tokens, self.cfg.eval.group_by
        images = self.image_log.paths if self.image_log is not None else None
        if self.roles is None:
            return list(
                sample_records(groups, self.train_examples, step, limit, decode, tokens, group_by, images)
            )
        return [  # a role game: up to ``limit`` of each role
            row
            for role in self.roles.game.roles
            for row in sample_records(
                [g for g in groups if g.role == role],
                self.train_examples,
                step,
                limit,
                decode,
                tokens,
                group_by,
                images,
            )
        ]

    # ----------------------------------------------------------------------------- evaluation
    def evaluate(
        self,
        label: str,
        console: Console | None = None,
        quiet: bool = False,
        engine: RolloutEngine | None = None,
    ) -> tuple[dict[str, float], list[dict]]:
        """Held-out metrics and one record per problem (see :func:`rlvr.eval.evaluate.evaluate`),
        generated by ``engine`` (default: the engine the run samples with; another one evaluates other
        weights, e.g. the fp32 master weights beside a bf16 sampling copy, and skips the roles' game)."""
        if not self.eval_examples:
            return {}, []
        own = engine is None
        engine = self.engine if own else engine
        e = self.cfg.eval
        records: list[dict] = []
        began = time.perf_counter()
        with eval_progress(console, disable=quiet) as progress:
            task = progress.add_task(f"eval ({label})", total=len(self.eval_examples))
            if self.env_of(self.eval_examples[0]):
                metrics, records = evaluate_episodes(
                    engine,
                    self.tokenizer,
                    self.eval_examples,
                    self._make_env,
                    self._score_eval if self.eval_pool is not None else None,
                    SamplingParams(
                        n=1,
                        temperature=0.0,
                        max_new_tokens=e.max_new_tokens or self.cfg.rollout.max_new_tokens,
                    ),
                    self.limits,
                    self._threads(),
                    chunk=self.cfg.rollout.max_batch_sequences,
                    on_progress=lambda n: progress.advance(task, n),
                    group_by=e.group_by,
                )
                self.eval_s += time.perf_counter() - began
                if own:
                    self._eval_turns = metrics.get("eval/turns", 0.0)
                return metrics, records
            metrics = evaluate(
                engine,
                self.eval_prompts,
                self.eval_examples,
                self._score_eval,
                e.max_new_tokens or self.cfg.rollout.max_new_tokens,
                e.samples,
                e.pass_k,
                e.temperature,
                chunk=self.cfg.rollout.max_batch_sequences,
                on_progress=lambda n: progress.advance(task, n),
                group_by=e.group_by,
                records=records,
                self_certainty=wants_self_certainty(self.eval_pool),
                scaling=scaling_plan(e, self.tokenizer, rollout_context(self.cfg, engine)[0]),
            )
        if own and self.roles is not None and self.cfg.roles.eval_size:
            metrics.update(self._evaluate_roles())
        self.eval_s += time.perf_counter() - began
        return metrics, records

    def _evaluate_roles(self) -> dict[str, float]:
        """Every role's rewards on the first ``roles.eval_size`` held-out examples, the game played
        as in training from a fixed sampling seed (the training RNG is left as it was)."""
        from rlvr.roles.play import role_metrics

        generators = self.roles.generators()  # the run's engine's, then own policies' (rlvr.roles.policies)
        states = [g.get_state() for g in generators]
        for k, generator in enumerate(generators):
            generator.manual_seed(self.cfg.seed + 7919 * (k + 1))
        try:
            indices = list(range(min(self.cfg.roles.eval_size, len(self.eval_examples))))
            groups = self.roles.play(indices, self.eval_examples, self.eval_prompts)
        finally:
            for generator, state in zip(generators, states):
                generator.set_state(state)
        return role_metrics(groups, "eval/role/")

    @property
    def final_eval_s(self) -> float:
        """What the next held-out evaluation is expected to take: the last one's time, scaled up
        when training episodes now take more model turns than the evaluated ones did (a policy that
        learned to call a tool doubles its turns, and the final eval's time with them)."""
        if self._eval_turns > 0 and self._train_turns > self._eval_turns:
            return self.eval_s * self._train_turns / self._eval_turns
        return self.eval_s

    def _score_eval(
        self, completions: list, examples: list[Example], group_sizes: list[int] | None = None
    ) -> list:
        return score_completions(self.eval_pool, completions, examples, group_sizes)

    def _make_env(self, example: Example) -> Environment:
        name = self.env_of(example)
        return make_env(name, env_params(example, name, self.cfg.env.name, self.cfg.env.params))

    def _threads(self) -> ThreadPoolExecutor:
        if self._env_threads is None:
            self._env_threads = ThreadPoolExecutor(self.cfg.env.threads, thread_name_prefix="rlvr-env")
        return self._env_threads

    def episode_metrics(self) -> dict[str, float]:
        """Turns, environment counters and model vs environment time since the previous call."""
        s, self.episode_stats = self.episode_stats, EpisodeStats()
        if not s.counters:
            return {}
        self._train_turns = s.counters.get("turns", 0.0) / max(s.episodes, 1)
        metrics = {f"env/{k}": v for k, v in s.counters.items()}
        return {**metrics, "time/model_s": s.model_s, "time/env_s": s.env_s}

    def close(self) -> None:
        if self.roles is not None:
            self.roles.close()
        for pool in (self.pool, self.eval_pool):
            if pool is not None:
                pool.close()
        if self._env_threads is not None:
            self._env_threads.shutdown(wait=False, cancel_futures=True)
        if hasattr(self.engine, "close"):  # an engine with a process of its own (vLLM's server)
            self.engine.close()
