"""The orchestrator: builds collector, learner and weight sync from a config, and runs the loop.

One synchronous step (a queue of depth 0) reads top to bottom like docs/design.md's diagram::

    collection = collector.collect()          # sample + score groups; drop uninformative ones
    metrics    = learner.update(kept groups)  # advantages + policy update; version += 1
    sync.push(learner.weights(), version)     # the engine samples from the new weights

then logs (metrics.jsonl, samples.jsonl, trajectories.jsonl), evaluates and checkpoints. The
collector, learner and sync meet only here and only through their public methods; an
asynchronous loop (collection running ahead by at most ``max_staleness`` versions) or a learner
replicated over ranks is another :meth:`Orchestrator.step` beside this one, not a branch inside it.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import torch
from rich.console import Console

from rlvr.collect import Collector
from rlvr.config import RunConfig
from rlvr.data.from_config import load_datasets
from rlvr.errors import Stopped
from rlvr.eval.groups import group_of
from rlvr.log import JsonlWriter, note_issues, training_progress, truncate_after_step
from rlvr.log.progress import StepLines, eval_line, is_live
from rlvr.models import load_model, load_tokenizer
from rlvr.models.lora import ADAPTER_DIR, apply_lora, trainable_parameters
from rlvr.rewards.scoring import check_reward_examples
from rlvr.roles.policies import RolePolicies, check_own_policies
from rlvr.rollout import RolloutEngine
from rlvr.train.learn.controllers import Coefficients
from rlvr.train.learn.estimate import check_algorithm
from rlvr.train.learn.learner import Learner
from rlvr.train.loop import checkpoint as ckpt
from rlvr.train.loop.async_collect import AsyncCollector, Batch
from rlvr.train.loop.budget import over_budget, stop_message
from rlvr.train.loop.engine_sync import engine_and_sync, eval_weights, master_engine
from rlvr.train.loop.header import run_header
from rlvr.train.loop.health import ErrorEcho, HackWatch, reward_calls
from rlvr.train.loop.run_dir import prepare_run_dir
from rlvr.train.loop.sinks import with_sinks
from rlvr.train.loop.skips import SkipMonitor, kept_in_seen, skip_metrics, trajectory_rows
from rlvr.train.scale.distributed import Discard, check_distributed, rank_device, start_ranks
from rlvr.train.scale.fsdp import (
    full_optimizer_state,
    gathered_model,
    load_full_optimizer_state,
    shard_policy,
    unsharded_frame,
)
from rlvr.train.scale.shard import distribute_learner
from rlvr.train.stages import build_source
from rlvr.vision.image_log import ImageLog
from rlvr.vision.tower import apply_vision_tower

LOGS = ("metrics.jsonl", "samples.jsonl", "eval_samples.jsonl", "prompt_history.jsonl", "trajectories.jsonl")


class Orchestrator:
    """A training run: the synchronous collect → update → sync loop, with logs and checkpoints."""

    def __init__(
        self, cfg: RunConfig, resume: bool = False, console: Console | None = None, quiet: bool = False
    ):
        self.started = time.perf_counter()  # train.time_budget_s counts from here
        self.cfg, self.console, self.quiet = cfg, console or Console(stderr=True), quiet
        check_algorithm(cfg)  # config errors that need the registries, before any model is loaded
        # Under torchrun (rlvr.train.scale.distributed) every rank runs this loop; rank 0 alone writes the
        # run directory and prints. One process: Solo, whose collectives do nothing.
        self.ranks = start_ranks(cfg.model.device)
        if self.ranks.active:
            check_distributed(cfg, self.ranks.world)
            cfg.model.device = rank_device(cfg.model.device, self.ranks)
            if not self.ranks.is_main:
                self.console, self.quiet = Console(stderr=True, quiet=True), True
        check_own_policies(cfg, self.ranks.active)  # roles.settings.<role>.policy=own: what it refuses
        self.run_dir = self.ranks.on_main(lambda: prepare_run_dir(cfg, resume))
        torch.manual_seed(cfg.seed)
        if cfg.model.threads:
            torch.set_num_threads(cfg.model.threads)

        data = load_datasets(cfg.data)
        train_examples, eval_examples = data.train, data.held_out
        self.console.print(run_header(cfg, data), highlight=False)
        check_reward_examples(cfg.rewards, train_examples)
        for example in eval_examples:  # a bad eval.group_by path fails now, not after training
            group_of(example, cfg.eval.group_by)
        self.tokenizer = load_tokenizer(cfg.model.name)
        start = ckpt.resume_point(self.run_dir / "checkpoints") if resume else None
        if cfg.model.lora.r:  # adapters on the base model: fresh, or the checkpoint's on a resume
            base = load_model(cfg.model.name, cfg.model.dtype, cfg.model.device)
            policy = apply_lora(base, cfg.model.lora, start / ADAPTER_DIR if start else None)
            trained, total = trainable_parameters(policy)
            if not quiet:
                self.console.print(f"LoRA r={cfg.model.lora.r}: training {trained:,} of {total:,} parameters")
        else:
            policy = load_model(
                str(start / "model") if start else cfg.model.name, cfg.model.dtype, cfg.model.device
            )
        apply_vision_tower(policy, cfg.model.vision_tower, cfg.model.text_side)
        self.pipeline: AsyncCollector | None = None
        self.fsdp = self.ranks.active and cfg.train.distributed == "fsdp2"
        engine, self.sync = engine_and_sync(cfg, policy, self.tokenizer, self.run_dir, self.fsdp)
        self.eval_weights = eval_weights(cfg, self.fsdp)  # sampler | master | both
        self._master_engine: RolloutEngine | None = None  # built at the first evaluation that needs it
        # FSDP2: checkpoints gather the master weights from the shards into a plain module, never
        # from what the engine samples (a bf16 copy, or a vLLM server)
        self.frame = unsharded_frame(policy) if self.fsdp else None
        if self.fsdp:
            shard_policy(policy)
        self.learner = Learner(cfg, policy, engine.pad_id)
        # a role game's roles with a policy of their own: model, engine, learner each (rlvr.roles.policies)
        self.role_policies = RolePolicies(cfg, self.tokenizer, start)
        self.collect_ranks = self.ranks  # the collector's collectives (async under torchrun: its own group)
        # the images of logged samples, as PNG files beside the logs (rlvr.vision.image_log)
        self.image_log = (
            ImageLog(self.run_dir, [*train_examples, *eval_examples]) if self.ranks.is_main else None
        )
        self.collector = Collector(
            cfg,
            engine,
            self.tokenizer,
            train_examples,
            eval_examples,
            self.role_policies.engines,
            self.image_log,
        )
        # what the stage trains on (rlvr.train.stages): the collector itself for RL
        self.source = build_source(cfg, self.collector, self.tokenizer)
        if self.ranks.active:  # each rank samples its own slice of the prompts, trains its groups
            self.ranks.seed_sampling(cfg.seed, engine.generator)
            distribute_learner(self.learner, self.ranks, cfg.train.distributed)
            # asynchronous collection: the background thread's collectives (the gathers of groups)
            # run on a process group of their own, never paired with the learner's (Ranks.subgroup)
            if cfg.train.max_staleness is not None:
                self.collect_ranks = self.ranks.subgroup()
            self.collector.spread = self.collect_ranks.spread
        self.step, self.elapsed = 0, 0.0
        self.steps_run = self.updates = 0  # by this process (a resumed run: since the resume)
        self.error_echo = ErrorEcho(self.console)  # the first reward error of each kind, with its text
        self.hack_watch = HackWatch(self.console)  # a step whose episodes farm a process reward
        self.pipeline_step = 0  # the step whose batch the background collector was last allowed
        self.carried: list[Batch] = []  # a checkpoint's sampled, untrained batches (async resume)
        self.save_s = 0.0  # the last checkpoint's wall time (time budget)
        self.saved_step: int | None = None  # the step of the last checkpoint this process wrote
        self.last_checkpoint: Path | None = start  # what a --resume would continue from
        self._terminate = False  # set by SIGTERM: checkpoint after the current step and stop
        if start:
            self._restore(start)
        logged = LOGS if cfg.train.log_trajectories else LOGS[:-1]
        writer = JsonlWriter if self.ranks.is_main else Discard
        self.logs = {name: writer(self.run_dir / name) for name in logged}
        # TensorBoard / wandb (log.*) receive metrics.jsonl's rows as they are written
        if self.ranks.is_main:
            resumed_at = self.step if start else None
            self.logs["metrics.jsonl"] = with_sinks(self.logs["metrics.jsonl"], cfg, self.run_dir, resumed_at)

    # ----------------------------------------------------------------------------- state
    def _generators(self) -> dict[str, torch.Generator]:
        return {
            "engine": self.collector.generator,
            "update": self.learner.generator,
            **self.role_policies.generators(),
        }

    def _restore(self, path: Path) -> None:
        state, trainer_state = ckpt.load_state(path)
        if self.fsdp:  # the whole optimizer state, keyed by parameter name, into this rank's shards
            load_full_optimizer_state(self.learner.model, self.learner.optimizer, trainer_state["optimizer"])
            trainer_state = {**trainer_state, "optimizer": self.learner.optimizer.state_dict()}
        self.learner.load_state_dict(trainer_state)
        if self.role_policies:
            self.role_policies.load_state_dict(trainer_state.get("roles", {}))
        rng, exact = self.ranks.rng_of(trainer_state)  # under torchrun: this rank's own
        ckpt.restore_rng(rng, self._generators())
        if not exact:  # saved by another number of ranks: each rank starts a fresh sampling stream
            self.ranks.seed_sampling(self.cfg.seed + state["step"], self.collector.generator)
        self.learner.coefs = Coefficients(**state.get("coefficients", self.learner.coefs.state()))
        self.step, self.elapsed = state["step"], state.get("elapsed", 0.0)
        self.learner.version = state.get("policy_version", self.step)
        self.sync.push(self.learner.weights(), self.learner.version)
        self.collector.load_state(state)
        if self.source is not self.collector:
            self.source.load_state(state["source"])
        self.carried = [Batch(**b) for b in trainer_state.get("async_pending", [])]
        if self.carried and self.cfg.train.max_staleness is None:
            self.console.print(
                f"the checkpoint holds {len(self.carried)} sampled, untrained batch(es) of an asynchronous "
                "run; train.max_staleness=null does not train them (their prompts are skipped)"
            )
        for name in LOGS if self.ranks.is_main else ():
            truncate_after_step(self.run_dir / name, self.step)
        self.console.print(f"resumed from {path} at step {self.step}")

    def save(self, model_only: bool = False) -> Path:
        """Checkpoint the run; ``model_only`` leaves out the optimizer, scheduler and RNG state."""
        trainer_state = None
        if not model_only:  # every rank's RNG state (one process: its own)
            rng = self.ranks.gather(ckpt.rng_state(self._generators()))
            trainer_state = {**self.learner.state_dict(), "rng": rng[0]}
            if self.role_policies:
                trainer_state["roles"] = self.role_policies.state_dict()
            if self.ranks.active:
                trainer_state["rank_rng"] = rng
            if self.fsdp:  # gathered from the shards (a collective)
                trainer_state["optimizer"] = full_optimizer_state(self.learner.model, self.learner.optimizer)
            if self.pipeline is not None:  # sampled, not trained yet (the thread is idle between steps)
                trainer_state["async_pending"] = [vars(b) for b in self.pipeline.pending()]
        state = {
            **self.collector.state(),
            **({"source": self.source.state()} if self.source is not self.collector else {}),
            "elapsed": self.elapsed,
            "coefficients": self.learner.coefs.state(),
            "policy_version": self.learner.version,
        }
        began = time.perf_counter()
        model = self.learner.weights()
        if self.frame is not None:  # FSDP2: the master weights from the shards (a collective; rank 0's)
            model = gathered_model(self.learner.model, self.frame)
        try:
            path = self.ranks.on_main(
                lambda: ckpt.save_checkpoint(
                    self.run_dir / "checkpoints",
                    self.step,
                    model,
                    self.tokenizer,
                    trainer_state,
                    state,
                    self.cfg.train.keep_checkpoints,
                    self.role_policies.models(),
                )
            )
        except ckpt.CheckpointError as err:  # the step's metrics line says its checkpoint is missing
            failed = {"step": self.step, "phase": "checkpoint_failed", "error": str(err)}
            self.logs["metrics.jsonl"].write(failed)
            raise
        self.save_s = time.perf_counter() - began
        self.saved_step = self.step
        if not model_only:  # what a --resume would continue from
            self.last_checkpoint = path
        return path

    # ----------------------------------------------------------------------------- one step
    def train_step(self) -> dict[str, float]:
        """Collect, update, sync; write the step's samples and trajectories; return its metrics."""
        t0 = time.perf_counter()
        if self.pipeline is not None:  # sampled in the background; wait for it if it is not ready
            batch = self.pipeline.next(self.learner.version)
            collection = batch.collection
            t_collect = time.perf_counter() - t0
            metrics = {
                **collection.metrics,
                "async/staleness": float(self.learner.version - batch.version),
                "async/stale_dropped": float(self.pipeline.stale_dropped),
                "time/collect_busy_s": batch.collect_s,
            }
        else:
            collection = self.source.collect(greedy_baseline=self.learner.needs_greedy_baseline)
            t_collect = time.perf_counter() - t0
            metrics = dict(collection.metrics)
        self.error_echo.observe(collection.seen)
        self.hack_watch.observe(self.step + 1, metrics)
        metrics.update(skip_metrics(collection.seen, kept_in_seen(collection)))  # groups/skipped/<reason>
        kept, seen, roles_updated = collection.kept, collection.seen, False
        if self.role_policies:  # each own-policy role trains on its groups; the rest are the run policy's
            kept, seen, role_metrics, roles_updated = self.role_policies.update(kept, seen)
            metrics.update(role_metrics)
        if kept:
            metrics.update(self.learner.update(kept, seen))
        if self.pipeline is not None:  # no collection runs while the weights change (async_collect.py)
            waited = time.perf_counter()
            self.pipeline.wait_idle()
            metrics["async/wait_s"] = time.perf_counter() - waited
        if kept:
            pushed = time.perf_counter()
            self.sync.push(self.learner.weights(), self.learner.version)
            metrics["time/sync_s"] = time.perf_counter() - pushed
        elif not roles_updated:
            metrics["update/skipped"] = 1.0
        dt = time.perf_counter() - t0
        self.step += 1
        self.elapsed += dt
        tokens = metrics.get("completion/tokens")  # a source that knows them (demonstrations, pairs)
        if tokens is None:
            group = self.cfg.rollout.group_size
            tokens = metrics["completion/mean_length"] * metrics["groups/sampled"] * group
        metrics.update(
            {
                "time/step_s": dt,
                "time/collect_s": t_collect,
                "time/update_s": dt - t_collect,
                "throughput/tokens_per_s": tokens / dt,
            }
        )
        # counters of this rank's reward workers and environments, summed over the ranks
        metrics.update(self.ranks.sum_metrics(self.collector.reward_error_metrics()))
        metrics.update(self.ranks.sum_metrics(self.collector.episode_metrics()))  # multi-turn only
        # a source of demonstrations writes its own rows (its groups are not the collector's examples)
        records = getattr(self.source, "sample_records", self.collector.sample_records)
        for record in records(collection.seen, self.step, self.cfg.train.log_samples):
            self.logs["samples.jsonl"].write(record)
        for row in self.collector.history.take_rows():  # what each rolled-out prompt scored
            self.logs["prompt_history.jsonl"].write({**row, "step": self.step})
        if self.cfg.train.log_trajectories:
            for record in trajectory_rows(collection, self.step):
                self.logs["trajectories.jsonl"].write(record)
        return metrics

    # ----------------------------------------------------------------------------- loop
    def run_eval(self, label: str) -> dict[str, float]:
        # under torchrun rank 0 evaluates (not split over the ranks yet); every rank gets its metrics
        metrics, records = {}, []
        live = is_live(self.console)
        if self.ranks.is_main:
            metrics, records = self._evaluate(label, self.quiet or not live)
            if self.learner.objective is not None:  # the stage's own held-out metrics (e.g. SFT loss)
                metrics.update(self.learner.objective.evaluate(self.learner))
        metrics = self.ranks.from_main(metrics)
        if not metrics:
            return {}
        for record in records:
            row = {"step": self.step, "phase": label, **record}
            self.logs["eval_samples.jsonl"].write(self.image_log.annotate(row) if self.image_log else row)
        self.logs["metrics.jsonl"].write({"step": self.step, "phase": label, **metrics})
        if not self.quiet and (label == "periodic" or not live):  # a batch job's log shows every eval
            self.console.print(eval_line(label, self.step, metrics), highlight=False)
        return metrics

    def _evaluate(self, label: str, quiet: bool) -> tuple[dict[str, float], list[dict]]:
        """The held-out evaluation of the weights ``eval.weights`` names: the sampler's as ``eval/*``,
        the master weights' as ``eval/*`` alone or ``eval_master/*`` beside them."""
        self.collector.eval_s = 0.0  # the budget's estimate of the final eval: every part of this one
        metrics: dict[str, float] = {}
        records: list[dict] = []
        if self.eval_weights != "master":
            metrics, records = self.collector.evaluate(label, self.console, quiet)
        if self.eval_weights == "sampler":
            return metrics, records
        if self._master_engine is None:
            self._master_engine = master_engine(self.cfg, self.learner.weights(), self.tokenizer)
        # sampled evaluations draw from a seed of this step's, so that a resumed run draws the same
        self._master_engine.generator.manual_seed(self.cfg.seed * 1_000_003 + self.step)
        master, master_records = self.collector.evaluate(
            f"{label}, master weights", self.console, quiet, engine=self._master_engine
        )
        if self.eval_weights == "master":
            return master, master_records
        metrics.update({f"eval_master/{k.removeprefix('eval/')}": v for k, v in master.items()})
        return metrics, records

    def fit(self) -> dict[str, dict[str, float]]:
        """Train to ``train.steps`` (or a time limit), evaluating before and after. SIGTERM stops the
        run after the current step with a checkpoint (:class:`~rlvr.errors.Stopped`, exit 143)."""
        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        try:
            return self._fit()
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)

    def _on_sigterm(self, signum: int, frame: object) -> None:
        self._terminate = True
        self.console.print("SIGTERM: stopping after this step, with a checkpoint")

    def _fit(self) -> dict[str, dict[str, float]]:
        cfg = self.cfg
        results: dict[str, dict[str, float]] = {}
        if self.step == 0 and cfg.eval.before:
            results["before"] = self.run_eval("before")
        deadline = (
            time.perf_counter() + cfg.train.time_limit_s - self.elapsed if cfg.train.time_limit_s else None
        )
        # no terminal (a batch job, a file): a line per step (log.every_steps) instead of the bar
        live = is_live(self.console)
        lines = (
            None
            if self.quiet or live
            else StepLines(self.console, cfg.train.steps, cfg.log.every_steps, deadline)
        )
        with training_progress(self.console, disable=self.quiet or not live) as progress:
            task = progress.add_task(
                "train", total=cfg.train.steps, completed=self.step, reward=0.0, acc=0.0, tps=0.0
            )
            if cfg.train.max_staleness is not None and self.step < cfg.train.steps:
                self.pipeline = AsyncCollector(
                    self.collector,
                    cfg.train.max_staleness,
                    self.learner.needs_greedy_baseline,
                    total=cfg.train.steps - self.step,
                    pending=self.carried,
                )
                self.pipeline_step = self.step
            skips = SkipMonitor(
                self.console, cfg.train.steps - self.step, max_new_tokens=cfg.rollout.max_new_tokens
            )
            while self.step < cfg.train.steps:
                if self.pipeline is not None and self.step > self.pipeline_step:
                    self.pipeline.trained()  # the last update is published, saved, evaluated: sample on
                self.pipeline_step = self.step
                metrics = self.train_step()
                self.logs["metrics.jsonl"].write({"step": self.step, "phase": "train", **metrics})
                skips.observe(self.step, metrics)  # says why a step made no update; warns early
                progress.update(
                    task,
                    completed=self.step,
                    reward=metrics.get("reward/mean", 0.0),
                    acc=metrics.get("train/accuracy", 0.0),
                    tps=metrics["throughput/tokens_per_s"],
                )
                note_issues(progress, task, metrics)  # reward errors and skipped groups, when any
                if lines is not None:
                    lines.step(self.step, metrics)
                self.steps_run += 1
                self.updates += 0 if metrics.get("update/skipped") else 1
                if cfg.train.save_every and self.step % cfg.train.save_every == 0:
                    self.save()
                if self.ranks.any(self._terminate):  # SIGTERM (a scheduler's stop): keep this step, exit
                    if self.saved_step != self.step:
                        self.save()
                    self._stop_pipeline()
                    raise Stopped(
                        f"terminated at step {self.step}; checkpoint {self.last_checkpoint} "
                        "(rlvr train ... --resume continues from it)",
                        exit_code=143,
                    )
                if cfg.eval.every and self.step % cfg.eval.every == 0 and self.step < cfg.train.steps:
                    self.run_eval("periodic")
                time_up = bool(deadline and time.perf_counter() > deadline)
                budget_up = bool(
                    cfg.train.time_budget_s
                    and over_budget(
                        time.perf_counter() - self.started,
                        cfg.train.time_budget_s,
                        metrics.get("time/step_s", 0.0),
                        self.collector.final_eval_s,
                        self.save_s,
                    )
                )
                time_up, budget_up = self.ranks.from_main((time_up, budget_up))  # rank 0's clock decides
                if time_up or budget_up:
                    self.console.print(stop_message(cfg, self.step, time_up), highlight=False)
                    break
        if cfg.train.final_checkpoint != "none" and self.saved_step != self.step:  # else save_every did
            # auto: a run that reached train.steps is not resumed (the model alone); one stopped
            # early by a time limit is, with more time (everything resume needs)
            finished = self.step >= cfg.train.steps
            final = cfg.train.final_checkpoint
            self.save(model_only=final == "model" or (final == "auto" and finished))
        self._stop_pipeline()  # after the checkpoint, which keeps its sampled, untrained batches
        results["after"] = self.run_eval("after")
        # what rlvr.train.loop.health.run_failure judges (the CLI exits 3 on a run that did not train)
        calls = self.ranks.sum_metrics(reward_calls(self.collector.pool))
        results["run"] = {"steps": float(self.steps_run), "updates": float(self.updates), **calls}
        return results

    def _stop_pipeline(self) -> None:
        if self.pipeline is not None:
            self.pipeline.close()
            self.pipeline = None

    def close(self) -> None:
        self._stop_pipeline()
        self.collector.close()
        for log in self.logs.values():
            log.close()
        if self.collect_ranks is not self.ranks:
            self.collect_ranks.close()
        self.ranks.close()
