"""The training loop: sample → score → filter → advantages → update, then log and checkpoint.

It reads top to bottom like the diagram in DESIGN.md. The method being trained enters only
through the registries in :mod:`rlvr.algo`; there is no ``if algo == ...`` here.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import torch
from rich.console import Console

from rlvr.algo import ADVANTAGE_ESTIMATORS, informative_groups, token_weights
from rlvr.config import RunConfig
from rlvr.data.from_config import build_datasets
from rlvr.data.sampler import PromptSampler
from rlvr.eval.evaluate import evaluate
from rlvr.eval.groups import group_of
from rlvr.log import JsonlWriter, eval_progress, training_progress, truncate_after_step
from rlvr.models import load_model, load_tokenizer
from rlvr.models.chat import encode_prompt
from rlvr.rewards.scoring import check_reward_examples, eval_pool, score_completions, training_pool
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.train import checkpoint as ckpt
from rlvr.train.batch import TrainBatch, build_batch
from rlvr.train.budget import over_budget
from rlvr.train.controllers import Coefficients
from rlvr.train.critic import build_critic, value_metrics
from rlvr.train.estimate import (
    check_algorithm,
    estimate_advantages,
    kl_token_rewards,
    sampled_kl,
    shape_rewards,
    takes,
)
from rlvr.train.groups import Scored, reward_metrics, sample_records
from rlvr.train.optim import build_optimizer, build_scheduler
from rlvr.train.run_dir import prepare_run_dir
from rlvr.train.update import batch_logprobs, policy_update


class Trainer:
    def __init__(
        self, cfg: RunConfig, resume: bool = False, console: Console | None = None, quiet: bool = False
    ):
        self.started = time.perf_counter()  # train.time_budget_s counts from here
        self.cfg, self.console, self.quiet = cfg, console or Console(stderr=True), quiet
        check_algorithm(cfg)  # config errors that need the registries, before any model is loaded
        self.run_dir = prepare_run_dir(cfg, resume)
        torch.manual_seed(cfg.seed)
        if cfg.model.threads:
            torch.set_num_threads(cfg.model.threads)

        self.train_examples, self.eval_examples = build_datasets(cfg.data)
        check_reward_examples(cfg.rewards, self.train_examples)
        for example in self.eval_examples:  # a bad eval.group_by path fails now, not after training
            group_of(example, cfg.eval.group_by)
        self.tokenizer = load_tokenizer(cfg.model.name)
        start = ckpt.resume_point(self.run_dir / "checkpoints") if resume else None
        model_path = str(start / "model") if start else cfg.model.name
        self.model = load_model(model_path, cfg.model.dtype, cfg.model.device)
        self.ref_model = None
        if cfg.algo.kl_coef > 0:  # no reference model at all when KL is off
            self.ref_model = load_model(cfg.model.name, cfg.model.dtype, cfg.model.device).eval()
            self.ref_model.requires_grad_(False)
        self.engine = HFEngine(
            self.model,
            self.tokenizer,
            max_batch_sequences=cfg.rollout.max_batch_sequences,
            seed=cfg.seed,
            packed_weights=cfg.rollout.packed_weights,
        )
        self.update_generator = torch.Generator().manual_seed(cfg.seed + 1)
        self.train_prompts = [encode_prompt(self.tokenizer, e.prompt) for e in self.train_examples]
        self.eval_prompts = [encode_prompt(self.tokenizer, e.prompt) for e in self.eval_examples]

        self.pool = training_pool(cfg.rewards)
        self.eval_pool = eval_pool(cfg.rewards)

        total_updates = cfg.train.steps * cfg.algo.epochs * cfg.algo.minibatches
        self.critic = build_critic(cfg, self.model, total_updates)
        self.optimizer = build_optimizer(self.model, cfg.optim)
        for group in self.critic.policy_param_groups(cfg.algo.critic.lr) if self.critic else []:
            self.optimizer.add_param_group(group)  # a value head trains with the policy
        self.scheduler = build_scheduler(self.optimizer, total_updates, cfg.optim)
        self.coefs = Coefficients.from_config(cfg.algo)  # adaptive KL / entropy coefficients
        self.sampler = PromptSampler(len(self.train_examples), cfg.seed)
        self.step, self.elapsed = 0, 0.0
        self.eval_s = self.save_s = 0.0  # last eval's and checkpoint's wall time (time budget)
        self.saved_step: int | None = None  # the step of the last checkpoint this process wrote
        if start:
            self._restore(start)
        self.metrics_log = JsonlWriter(self.run_dir / "metrics.jsonl")
        self.samples_log = JsonlWriter(self.run_dir / "samples.jsonl")
        self.eval_log = JsonlWriter(self.run_dir / "eval_samples.jsonl")

    # ----------------------------------------------------------------------------- state
    def _generators(self) -> dict[str, torch.Generator]:
        return {"engine": self.engine.generator, "update": self.update_generator}

    def _restore(self, path: Path) -> None:
        state, trainer_state = ckpt.load_state(path)
        self.optimizer.load_state_dict(trainer_state["optimizer"])
        self.scheduler.load_state_dict(trainer_state["scheduler"])
        ckpt.restore_rng(trainer_state["rng"], self._generators())
        if self.critic is not None:
            self.critic.load_state_dict(trainer_state["critic"])
        self.coefs = Coefficients(**state.get("coefficients", self.coefs.state()))
        self.step, self.elapsed = state["step"], state.get("elapsed", 0.0)
        self.sampler = PromptSampler(len(self.train_examples), self.cfg.seed, **state["sampler"])
        for name in ("metrics.jsonl", "samples.jsonl", "eval_samples.jsonl"):
            truncate_after_step(self.run_dir / name, self.step)
        self.console.print(f"resumed from {path} at step {self.step}")

    def save(self, model_only: bool = False) -> Path:
        """Checkpoint the run; ``model_only`` leaves out the optimizer, scheduler and RNG state."""
        trainer_state = None
        if not model_only:
            trainer_state = {
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "rng": ckpt.rng_state(self._generators()),
            }
            if self.critic is not None:
                trainer_state["critic"] = self.critic.state_dict()
        state = {"sampler": self.sampler.state(), "elapsed": self.elapsed, "coefficients": self.coefs.state()}
        began = time.perf_counter()
        path = ckpt.save_checkpoint(
            self.run_dir / "checkpoints",
            self.step,
            self.model,
            self.tokenizer,
            trainer_state,
            state,
            self.cfg.train.keep_checkpoints,
        )
        self.save_s = time.perf_counter() - began
        self.saved_step = self.step
        return path

    # ----------------------------------------------------------------------------- one step
    def _sample_groups(self, count: int) -> list[Scored]:
        r = self.cfg.rollout
        indices = self.sampler.take(count)
        params = SamplingParams(
            n=r.group_size,
            temperature=r.temperature,
            top_p=r.top_p,
            max_new_tokens=r.max_new_tokens,
            ignore_eos=r.ignore_eos,
        )
        groups = self.engine.generate([self.train_prompts[i] for i in indices], params)
        flat = [c for g in groups for c in g]
        examples = [self.train_examples[indices[c.prompt_index]] for c in flat]
        results = score_completions(self.pool, flat, examples, [len(g) for g in groups])
        scored = []
        for k, (index, group) in enumerate(zip(indices, groups)):
            scored.append(Scored(index, group, results[k * r.group_size : (k + 1) * r.group_size]))
        return scored

    def _rewards(self, group: Scored) -> list[float | None]:
        zero_on_error = self.cfg.rewards.on_error == "zero"
        return [r.total if r.total is not None else (0.0 if zero_on_error else None) for r in group.results]

    def collect(self) -> tuple[list[Scored], list[Scored], dict[str, float]]:
        """Sample and score groups; return (kept groups, all sampled groups, metrics)."""
        a = self.cfg.algo
        want = self.cfg.rollout.prompts_per_step
        kept: list[Scored] = []
        seen: list[Scored] = []
        rounds = 1 + (a.max_refills if a.refill else 0)
        for _ in range(rounds):
            batch = self._sample_groups(want - len(kept) if kept else want)
            seen.extend(batch)
            usable = [g for g in batch if None not in self._rewards(g)]  # errored groups are skipped
            if a.dynamic_sampling and usable:
                flat = torch.tensor([x for g in usable for x in self._rewards(g)])
                index = torch.arange(len(usable)).repeat_interleave(
                    torch.tensor([len(g.results) for g in usable])
                )
                informative = informative_groups(flat, index)
                usable = [g for g, keep in zip(usable, informative.tolist()) if keep]
            kept.extend(usable)
            if len(kept) >= want or not a.refill:
                break
        kept = kept[:want] if a.refill else kept
        stats = {"groups/sampled": float(len(seen)), "groups/kept": float(len(kept))}
        first = self.cfg.rewards.functions[0]
        return kept, seen, {**stats, **reward_metrics(seen, first.label or first.name)}

    def prepare_batch(self, groups: list[Scored]) -> tuple[TrainBatch, dict[str, float]]:
        """The update's batch for the kept groups: advantages (and a critic's targets), on the device.

        Shapers, then the in-reward KL penalty, then the estimator, each offered the context it
        names (:mod:`rlvr.train.estimate`); the values of a critic are offered as ``values``.
        """
        cfg, a = self.cfg, self.cfg.algo
        temperature, max_new = cfg.rollout.temperature, cfg.rollout.max_new_tokens
        count = sum(len(g.completions) for g in groups)
        batch = build_batch([g.completions for g in groups], [0.0] * count, self.engine.pad_id)
        on_device, mask, index = batch.to(cfg.model.device), batch.completion_mask, batch.group_index
        rewards = torch.tensor([x for g in groups for x in self._rewards(g)], dtype=torch.float32)
        context: dict = {"lengths": mask.sum(dim=1), "max_new_tokens": max_new}
        metrics: dict[str, float] = {}
        if cfg.rewards.shaping:
            rewards = shape_rewards(rewards, index, cfg.rewards.shaping, context)
            metrics["reward/shaped_mean"] = float(rewards.mean())
        if a.kl_in_reward and self.ref_model is not None:
            ref = batch_logprobs(self.ref_model, on_device, a.micro_batch_size, temperature).cpu()
            kl = sampled_kl(batch.sampling_logprobs, ref, mask)
            context["token_rewards"] = kl_token_rewards(kl, mask, self.coefs.kl)
            metrics["reward/kl"] = float((kl * token_weights(mask, a.loss_agg, max_new)).sum())
            metrics["reward/kl_penalty"] = float(-context["token_rewards"].sum(dim=1).mean())
        if takes(ADVANTAGE_ESTIMATORS.get(a.advantage), "baseline_rewards"):
            context["baseline_rewards"] = self._greedy_baseline(groups)[index]
        old_values = None
        if self.critic is not None:
            old_values = self.critic.batch_values(self.model, on_device, a.micro_batch_size, temperature)
            context["values"] = old_values = old_values.cpu()
        estimate = estimate_advantages(a.advantage, a.advantage_params, rewards, index, context)
        returns = estimate.targets.get("returns") if self.critic is not None else None
        if returns is not None:
            metrics.update(value_metrics(old_values, returns, mask))
        batch = replace(batch, advantages=estimate.advantages, returns=returns, old_values=old_values)
        return batch.to(cfg.model.device), metrics

    def _greedy_baseline(self, groups: list[Scored]) -> torch.Tensor:
        """Reward of one greedy completion per group's prompt (ReMax's baseline), [num_groups]."""
        params = SamplingParams(n=1, temperature=0.0, max_new_tokens=self.cfg.rollout.max_new_tokens)
        greedy = self.engine.generate([self.train_prompts[g.example_index] for g in groups], params)
        flat = [group[0] for group in greedy]
        examples = [self.train_examples[g.example_index] for g in groups]
        results = score_completions(self.pool, flat, examples, [1] * len(flat))
        return torch.tensor([r.total if r.total is not None else 0.0 for r in results])

    def _loss_scale(self, kept: list[Scored], seen: list[Scored]) -> float:
        """1, or with ``algo.loss_norm=sampled`` the kept share of what the loss would average over
        had every sampled group been trained on (tokens for token-mean, sequences otherwise).

        A dropped group has zero advantage everywhere, so it adds nothing to the gradient, only to
        the denominator: scaling by this share gives that gradient without computing those groups.
        """
        if self.cfg.algo.loss_norm == "kept":
            return 1.0
        by_tokens = self.cfg.algo.loss_agg == "token-mean"

        def size(groups: list[Scored]) -> int:
            return sum(len(c) if by_tokens else 1 for g in groups for c in g.completions)

        return size(kept) / max(size(seen), 1)

    def train_step(self) -> dict[str, float]:
        t0 = time.perf_counter()
        groups, seen, metrics = self.collect()
        t_collect = time.perf_counter() - t0
        if groups:
            batch, batch_metrics = self.prepare_batch(groups)
            metrics.update(batch_metrics)
            self._keep_advantages(groups, batch)
            metrics.update(self.coefs.metrics(self.cfg.algo))  # the coefficients this update uses
            metrics["update/loss_scale"] = self._loss_scale(groups, seen)
            metrics.update(
                policy_update(
                    self.model,
                    self.optimizer,
                    self.scheduler,
                    batch,
                    self.cfg.algo,
                    self.cfg.optim.grad_clip,
                    self.cfg.rollout.temperature,
                    self.cfg.rollout.max_new_tokens,
                    self.ref_model,
                    self.update_generator,
                    critic=self.critic,
                    kl_coef=self.coefs.kl,
                    loss_context=self.coefs.loss_context(),
                    loss_scale=metrics["update/loss_scale"],
                )
            )
            self.engine.sync_weights(self.model)
            self.coefs.update(self.cfg.algo, metrics, len(batch))
        else:
            metrics["update/skipped"] = 1.0
        dt = time.perf_counter() - t0
        self.step += 1
        self.elapsed += dt
        tokens = metrics["completion/mean_length"] * metrics["groups/sampled"] * self.cfg.rollout.group_size
        metrics.update(
            {
                "time/step_s": dt,
                "time/collect_s": t_collect,
                "time/update_s": dt - t_collect,
                "throughput/tokens_per_s": tokens / dt,
            }
        )
        for label, counts in self.pool.take_stats().items():  # errors by kind, per reward
            metrics.update(
                {f"reward_errors/{label}/{k}": float(v) for k, v in counts.items() if k != "calls"}
            )
        for record in sample_records(seen, self.train_examples, self.step, self.cfg.train.log_samples):
            self.samples_log.write(record)
        return metrics

    @staticmethod
    def _keep_advantages(groups: list[Scored], batch: TrainBatch) -> None:
        """Each completion's advantage for samples.jsonl (token-level ones: the mean over its tokens)."""
        advantages, mask = batch.advantages.cpu(), batch.completion_mask.cpu()
        if advantages.dim() == 2:
            advantages = (advantages * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
        offset = 0
        for g in groups:
            g.advantages = advantages[offset : offset + len(g.completions)].tolist()
            offset += len(g.completions)

    # ----------------------------------------------------------------------------- loop
    def run_eval(self, label: str) -> dict[str, float]:
        if not self.eval_examples:
            return {}
        max_new = self.cfg.eval.max_new_tokens or self.cfg.rollout.max_new_tokens
        records: list[dict] = []
        began = time.perf_counter()
        with eval_progress(self.console, disable=self.quiet) as progress:
            task = progress.add_task(f"eval ({label})", total=len(self.eval_examples))
            metrics = evaluate(
                self.engine,
                self.eval_prompts,
                self.eval_examples,
                lambda completions, examples: score_completions(self.eval_pool, completions, examples),
                max_new,
                self.cfg.eval.samples,
                self.cfg.eval.pass_k,
                self.cfg.eval.temperature,
                chunk=self.cfg.rollout.max_batch_sequences,
                on_progress=lambda n: progress.advance(task, n),
                group_by=self.cfg.eval.group_by,
                records=records,
            )
        self.eval_s = time.perf_counter() - began
        for record in records:
            self.eval_log.write({"step": self.step, "phase": label, **record})
        self.metrics_log.write({"step": self.step, "phase": label, **metrics})
        return metrics

    def fit(self) -> dict[str, dict[str, float]]:
        cfg = self.cfg
        results: dict[str, dict[str, float]] = {}
        if self.step == 0 and cfg.eval.before:
            results["before"] = self.run_eval("before")
        deadline = (
            time.perf_counter() + cfg.train.time_limit_s - self.elapsed if cfg.train.time_limit_s else None
        )
        with training_progress(self.console, disable=self.quiet) as progress:
            task = progress.add_task(
                "train", total=cfg.train.steps, completed=self.step, reward=0.0, acc=0.0, tps=0.0
            )
            while self.step < cfg.train.steps:
                metrics = self.train_step()
                self.metrics_log.write({"step": self.step, "phase": "train", **metrics})
                progress.update(
                    task,
                    completed=self.step,
                    reward=metrics["reward/mean"],
                    acc=metrics["train/accuracy"],
                    tps=metrics["throughput/tokens_per_s"],
                )
                if cfg.train.save_every and self.step % cfg.train.save_every == 0:
                    self.save()
                if cfg.eval.every and self.step % cfg.eval.every == 0 and self.step < cfg.train.steps:
                    self.run_eval("periodic")
                if deadline and time.perf_counter() > deadline:
                    self.console.print(f"time limit reached after step {self.step}")
                    break
                if cfg.train.time_budget_s and over_budget(
                    time.perf_counter() - self.started,
                    cfg.train.time_budget_s,
                    metrics.get("time/step_s", 0.0),
                    self.eval_s,
                    self.save_s,
                ):
                    self.console.print(
                        f"time budget: stopping after step {self.step} so that the final eval and "
                        f"checkpoint fit in train.time_budget_s={cfg.train.time_budget_s:g}"
                    )
                    break
        if cfg.train.final_checkpoint != "none" and self.saved_step != self.step:  # else save_every did
            self.save(model_only=cfg.train.final_checkpoint == "model")
        results["after"] = self.run_eval("after")
        return results

    def close(self) -> None:
        self.pool.close()
        self.eval_pool.close()
        self.metrics_log.close()
        self.samples_log.close()
        self.eval_log.close()
