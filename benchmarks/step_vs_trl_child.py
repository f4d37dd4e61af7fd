"""One framework's side of ``step_vs_trl.py``: run W + N GRPO steps in this process and print JSON.

    python benchmarks/step_vs_trl_child.py {rlvr,trl} SPEC.json

The parent writes SPEC.json (model directory, prompts in the order rlvr will draw them and their token
ids, P, G, T, steps, threads, optimizer settings) and starts one child per framework, so each child's
``ru_maxrss`` is that framework's own peak memory. The child prints one line
``STEP_VS_TRL_RESULT {json}`` with per-step timings, what it generated (prompt ids, completion
lengths) and rewards, so the parent can check that both sides did the same work.

This module is also imported by rlvr's reward worker processes (the reward is named by the import path
``step_vs_trl_child:parity_reward``), so its top level imports nothing heavy.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import time

RESULT_MARKER = "STEP_VS_TRL_RESULT "
REWARD_PATH = "step_vs_trl_child:parity_reward"


# ------------------------------------------------------------------------------------------ rewards
# The same trivial reward on both sides: parity of the completion's text length. It costs next to
# nothing, and within a group of G sampled completions it is almost never constant, so both
# frameworks compute advantages that are non-zero and train on them.


def parity_reward(completion: str, example) -> float:
    """rlvr's form: ``(completion text, example) -> float``."""
    return float(len(completion) % 2)


_TRL_REWARDS: list[float] = []  # every value the TRL reward returned, in call order (for the report)


def trl_parity_reward(prompts, completions, **kwargs) -> list[float]:
    """TRL's form: a batch of completions (chat messages for conversational prompts) -> list of floats."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    values = [float(len(t) % 2) for t in texts]
    _TRL_REWARDS.extend(values)
    return values


# ------------------------------------------------------------------------------------------ helpers
def peak_rss_mib() -> float:
    """Peak resident memory of this process so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def informative_groups(rewards: list[float], group_size: int) -> tuple[int, int]:
    """(groups whose rewards are not all equal, groups): a group of equal rewards has zero advantages."""
    groups = [rewards[i : i + group_size] for i in range(0, len(rewards), group_size)]
    return sum(len(set(g)) > 1 for g in groups), len(groups)


def rlvr_overrides(spec: dict, output_dir: str) -> list[str]:
    """``key=value`` overrides that make rlvr do exactly the benchmark's work (see docs/performance.md)."""
    p, g, t = spec["prompts_per_step"], spec["group_size"], spec["max_new_tokens"]
    return [
        f"model.name={spec['model_dir']}",
        f"model.precision={'bf16-mixed' if spec.get('precision') == 'bf16' else 'fp32'}",
        "model.device=cpu",
        f"model.threads={spec['threads']}",
        f"output_dir={output_dir}",
        "name=step_vs_trl",
        f"seed={spec['seed']}",
        "data.source=reasoning_gym",
        "data.task=chain_sum",
        f"data.train_size={spec['train_size']}",
        "data.eval_size=0",
        "data.few_shot=[]",
        f"data.seed={spec['seed']}",
        f"rollout.prompts_per_step={p}",
        f"rollout.group_size={g}",
        f"rollout.max_new_tokens={t}",
        "rollout.ignore_eos=true",
        "rollout.temperature=1.0",
        "rollout.top_p=1.0",
        f"rollout.max_batch_sequences={max(64, p * g)}",
        f"rewards.functions=[{{name: '{REWARD_PATH}', weight: 1.0}}]",
        "rewards.workers=1",
        "algo.dynamic_sampling=false",
        "algo.refill=false",
        "algo.kl_coef=0.0",
        "algo.epochs=1",
        "algo.minibatches=1",
        f"algo.micro_batch_size={p * g}",  # the whole batch in one forward/backward, like TRL below
        f"optim.lr={spec['lr']}",
        "optim.warmup_steps=0",
        "optim.schedule=constant",
        "optim.weight_decay=0.0",
        "optim.betas=[0.9, 0.99]",
        "optim.eps=1e-8",
        "optim.grad_clip=1.0",
        f"train.steps={spec['warmup'] + spec['steps']}",
        "train.time_limit_s=null",
        "eval.every=0",
        *spec.get("rlvr_set", []),  # extra overrides, for side-by-side runs of rlvr settings
    ]


# ------------------------------------------------------------------------------------------ rlvr
def run_rlvr(spec: dict, workdir: str) -> dict:
    import torch

    torch.set_num_threads(spec["threads"])
    from rlvr.config import load_config
    from rlvr.train.loop.orchestrator import Orchestrator

    cfg = load_config(None, rlvr_overrides(spec, workdir))
    t0 = time.perf_counter()
    trainer = Orchestrator(cfg, quiet=True)
    setup_s = time.perf_counter() - t0
    rss_after_setup = peak_rss_mib()

    # Instance-level wrappers (src/ is untouched): time pure generation and record what was generated.
    gen = {"seconds": [], "prompt_ids": [], "completion_lengths": [], "finish_reasons": []}
    generate = trainer.collector.engine.generate

    def timed_generate(prompts, params):
        start = time.perf_counter()
        groups = generate(prompts, params)
        gen["seconds"].append(time.perf_counter() - start)
        gen["prompt_ids"].append([list(p) for p in prompts])
        gen["completion_lengths"].append([len(c.token_ids) for grp in groups for c in grp])
        gen["finish_reasons"].append(sorted({c.finish_reason for grp in groups for c in grp}))
        return groups

    trainer.collector.engine.generate = timed_generate
    rewards: list[list[float | None]] = []
    score = trainer.collector.pool.score

    def recorded_score(*args, **kwargs):
        results = score(*args, **kwargs)
        rewards.append([r.total for r in results])
        return results

    trainer.collector.pool.score = recorded_score

    steps = []
    try:
        for _ in range(spec["warmup"] + spec["steps"]):
            start = time.perf_counter()
            metrics = trainer.train_step()
            wall = time.perf_counter() - start
            steps.append(
                {
                    "step_s": wall,
                    "collect_s": metrics["time/collect_s"],
                    "rlvr_step_s": metrics["time/step_s"],
                    "update_s": metrics["time/update_s"],
                    "skipped": metrics.get("update/skipped", 0.0),
                }
            )
    finally:
        trainer.close()
    for step, seconds in zip(steps, gen["seconds"]):
        step["generate_s"] = seconds

    model = trainer.learner.model
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    flat = [x for step_rewards in rewards for x in step_rewards]
    return {
        "framework": "rlvr",
        "setup_s": setup_s,
        "steps": steps,
        "prompt_ids": gen["prompt_ids"],
        "completion_lengths": gen["completion_lengths"],
        "finish_reasons": gen["finish_reasons"],
        "informative_groups": informative_groups(flat, spec["group_size"]),
        "reward_errors": sum(x is None for x in flat),
        "params": {
            "total": sum(p.numel() for p in model.parameters()),  # tied weights are counted once
            "embedding": embed.numel(),
            "lm_head": head.numel(),
            "tied": head.data_ptr() == embed.data_ptr(),
        },
        "dtype": str(next(model.parameters()).dtype),
        "threads": torch.get_num_threads(),
        "rss_after_setup_mib": rss_after_setup,
        "peak_rss_mib": peak_rss_mib(),
    }


# ------------------------------------------------------------------------------------------ TRL
def run_trl(spec: dict, workdir: str) -> dict:
    import torch

    if spec.get("trl_keep_freed_memory"):
        from rlvr.runtime import keep_freed_memory

        if not keep_freed_memory():
            raise SystemExit("--trl-keep-freed-memory: glibc did not accept the malloc setting")
    torch.set_num_threads(spec["threads"])
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    p, g, t = spec["prompts_per_step"], spec["group_size"], spec["max_new_tokens"]
    total_steps = spec["warmup"] + spec["steps"]
    args = GRPOConfig(
        output_dir=workdir,
        use_cpu=True,
        bf16=spec.get("precision") == "bf16",  # TRL's own switch: fp32 master weights, bf16 autocast
        fp16=False,
        model_init_kwargs={"dtype": "float32"},
        report_to=[],
        logging_steps=10**6,
        save_strategy="no",
        disable_tqdm=True,
        log_completions=False,
        seed=spec["seed"],
        max_steps=total_steps,
        # One generation batch of P prompts x G completions per optimizer step, trained in one
        # forward/backward: generation_batch_size = per_device_train_batch_size * steps_per_generation.
        per_device_train_batch_size=p * g,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_generations=g,
        num_iterations=1,
        shuffle_dataset=False,  # the dataset is already in the order rlvr draws its prompts
        dataloader_num_workers=0,
        # Fixed-length completions: EOS is masked out of the logits until T tokens exist
        # (transformers' MinNewTokensLengthLogitsProcessor), and generation stops at T.
        max_completion_length=t,
        generation_kwargs={"min_new_tokens": t},
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        epsilon=0.2,
        epsilon_high=0.28,
        mask_truncated_completions=False,
        learning_rate=spec["lr"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        adam_beta1=0.9,
        adam_beta2=0.99,
        adam_epsilon=1e-8,
        max_grad_norm=1.0,
        gradient_checkpointing=spec["trl_gradient_checkpointing"],  # TRL's default is True; rlvr has none
    )
    dataset = Dataset.from_list([{"prompt": messages} for messages in spec["prompts"]])

    class StepClock(TrainerCallback):
        def __init__(self):
            self.begin, self.end, self.optimizer = [], [], []
            self._pre = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            self.begin.append(time.perf_counter())

        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            self._pre = time.perf_counter()

        def on_optimizer_step(self, args, state, control, **kwargs):
            self.optimizer.append(time.perf_counter() - self._pre)

        def on_step_end(self, args, state, control, **kwargs):
            self.end.append(time.perf_counter())

    clock = StepClock()
    t0 = time.perf_counter()
    trainer = GRPOTrainer(
        model=spec["model_dir"],
        reward_funcs=[trl_parity_reward],
        args=args,
        train_dataset=dataset,
        callbacks=[clock],
    )
    setup_s = time.perf_counter() - t0
    rss_after_setup = peak_rss_mib()

    # Instance-level wrappers: `_generate_and_score_completions` is the whole collect phase (tokenize,
    # generate, decode, reward, advantages), `_generate_single_turn` the model's generate() alone.
    gen = {"collect": [], "seconds": [], "prompt_ids": [], "completion_lengths": []}
    collect, single_turn = trainer._generate_and_score_completions, trainer._generate_single_turn

    def timed_collect(inputs):
        start = time.perf_counter()
        out = collect(inputs)
        gen["collect"].append(time.perf_counter() - start)
        return out

    def timed_single_turn(prompt_ids, *a, **kw):
        start = time.perf_counter()
        completion_ids, logprobs = single_turn(prompt_ids, *a, **kw)
        gen["seconds"].append(time.perf_counter() - start)
        gen["prompt_ids"].append([list(x) for x in prompt_ids])
        gen["completion_lengths"].append([len(c) for c in completion_ids])
        return completion_ids, logprobs

    trainer._generate_and_score_completions = timed_collect
    trainer._generate_single_turn = timed_single_turn

    trainer.train()

    # Step i's wall time runs from the end of step i-1 (its logging included) to the end of step i,
    # like rlvr's back-to-back train_step() calls; step 0 starts at its on_step_begin.
    starts = [clock.begin[0], *clock.end[:-1]]
    steps = [
        {
            "step_s": end - start,
            "collect_s": gen["collect"][i],
            "generate_s": gen["seconds"][i],
            "optimizer_s": clock.optimizer[i],
        }
        for i, (start, end) in enumerate(zip(starts, clock.end))
    ]
    model = trainer.model  # TRL's GRPOTrainer (rlvr's side reads its Orchestrator's learner)
    return {
        "framework": "trl",
        "setup_s": setup_s,
        "steps": steps,
        "prompt_ids": gen["prompt_ids"],
        "completion_lengths": gen["completion_lengths"],
        "informative_groups": informative_groups(_TRL_REWARDS, g),
        "optim": str(getattr(trainer.args.optim, "value", trainer.args.optim)),
        "gradient_checkpointing": bool(trainer.args.gradient_checkpointing),
        "dtype": str(next(model.parameters()).dtype),
        "threads": torch.get_num_threads(),
        "rss_after_setup_mib": rss_after_setup,
        "peak_rss_mib": peak_rss_mib(),
    }


def main() -> None:
    framework, spec_path = sys.argv[1], sys.argv[2]
    with open(spec_path) as handle:
        spec = json.load(handle)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    with tempfile.TemporaryDirectory(prefix=f"step_vs_trl_{framework}_") as workdir:
        result = {"rlvr": run_rlvr, "trl": run_trl}[framework](spec, workdir)
    print(RESULT_MARKER + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
