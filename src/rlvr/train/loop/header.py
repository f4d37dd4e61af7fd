"""The lines a run prints before it trains: exactly what it trains on, how it prompts, what it rewards.

Defaults depend on the data source (:mod:`rlvr.config.defaults`) and file columns are recognised
without configuration (:mod:`rlvr.data.rows`), so the run states what it resolved to rather than
leaving the user to guess: the data and how its rows were read, the prompt's parts and the first
training prompt itself, every reward component with its weight and params, the method and eval.
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from rlvr.config import RunConfig
from rlvr.data.from_config import Datasets
from rlvr.data.prompts import resolve_answer_format
from rlvr.models.precision import precision_of
from rlvr.rewards.describe import describe_reward, describe_rewards
from rlvr.rewards.scoring import eval_item

WIDTH = 160  # the first prompt is cut to this many characters


def run_header(cfg: RunConfig, data: Datasets) -> str:
    """The header as one string of ``label  text`` lines, rich markup (printed by the orchestrator):
    everything but the title is escaped, so a rubric's ``{metadata[rubric]}`` prints as written."""
    lines = [
        f"{cfg.name} → {cfg.output_dir}/{cfg.name}",
        f"  model    {cfg.model.name} ({cfg.model.device})"
        + (f", LoRA r={cfg.model.lora.r}" if cfg.model.lora.r else ""),
        f"  dtypes   {precision_of(cfg).describe()}",
        f"  data     {describe_data(cfg, data)}",
        f"  prompt   {describe_prompt(cfg, data)}",
        f"  first    {first_prompt(data)}",
        f"  rewards  {describe_rewards(cfg.rewards.functions, cfg)}",
        *([f"  roles    {describe_roles(cfg)}"] if cfg.roles.game else []),
        f"  method   {describe_method(cfg)}",
        *([f"  limits   {limits}"] if (limits := describe_limits(cfg)) else []),
        f"  eval     {describe_eval(cfg, data)}",
    ]
    return "[bold]rlvr train[/bold] " + escape("\n".join(lines))


def describe_roles(cfg: RunConfig) -> str:
    """The role game: each role with its group size, token limit, loss weight and rewards."""
    from rlvr.roles.play import make_game

    game = make_game(cfg, "")
    r, parts = cfg.rollout, []
    for role in game.roles:
        s = cfg.roles.settings.get(role)
        size = (s.group_size if s else None) or r.group_size
        tokens = (s.max_new_tokens if s else None) or r.max_new_tokens
        weight = s.weight if s else 1.0
        if role == game.roles[0]:
            rewards = "the rewards above"
        else:
            items = s.rewards if s and s.rewards is not None else game.default_rewards(role)
            rewards = " + ".join(i["name"] if isinstance(i, dict) else i.name for i in items)
        own = ""
        if s is not None and s.policy == "own":
            lr = s.lr if s.lr is not None else cfg.optim.lr
            own = f", its own policy from {s.model or cfg.model.name} at lr {lr:g}"
        parts.append(f"{role} ({size} samples, ≤{tokens} tokens, loss weight {weight:g}, {rewards}{own})")
    separate = any(s.policy == "own" for s in cfg.roles.settings.values())
    return f"{cfg.roles.game}: " + "; ".join(parts) + ("" if separate else " — one policy, shared weights")


def _mapping(values: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in values.items()) + "}" if values else "{}"


def describe_data(cfg: RunConfig, data: Datasets) -> str:
    d = cfg.data
    counts = f"{len(data.train)} training, {len(data.held_out)} held-out"
    if d.sources:  # a weighted mixture (rlvr.data.mixture)
        mix = ", ".join(f"{s.name} ×{s.weight:g}" for s in d.sources)
        return f"mixture of {mix}: {counts} examples" + (f"; {data.reading}" if data.reading else "")
    if d.source == "reasoning_gym":
        config = _mapping(d.task_config) if d.task_config else "(the task's default config)"
        harder = f" (held out from {_mapping(d.eval_task_config)})" if d.eval_task_config else ""
        return f"reasoning-gym {d.task} {config}: {counts} problems{harder}"
    if d.source == "env":
        return f"environment dataset {d.task} {_mapping(d.task_config)}: {counts} problems"
    where = f"file {d.path}" if d.source == "file" else f"HF dataset {d.path} [{d.split}]"
    return f"{where}: {counts} rows; {data.reading}"


def describe_prompt(cfg: RunConfig, data: Datasets) -> str:
    """The parts of the first training prompt (the ``first`` lines show it whole): whose system
    message it has, the demonstrations, and whether the answer-format instruction was appended."""
    d = cfg.data
    first = data.train[0].prompt if data.train else []
    system = first[0]["content"] if first and first[0].get("role") == "system" else None
    if system is None:
        parts = ["system: none (the chat template's default, if it has one)"]
    elif d.system_prompt and system == d.system_prompt:
        parts = ["system: data.system_prompt"]
    else:
        parts = ["system: the environment's" if d.source == "env" else "system: the row's own"]
    if d.few_shot:
        parts.append(f"{len(d.few_shot)} demonstration{'s' if len(d.few_shot) > 1 else ''} (data.few_shot)")
    else:
        parts.append("no demonstrations")
    if d.source == "env":
        parts.append("the environment's own instructions")
    else:
        instruction = resolve_answer_format(d.answer_format)
        if instruction and data.train and data.train[0].question.endswith(instruction):
            text = f"answer-format instruction appended (data.answer_format={d.answer_format})"
        elif instruction:
            text = (
                f"no answer-format instruction (data.answer_format={d.answer_format} is not added to chats)"
            )
        else:
            text = "no answer-format instruction (data.answer_format=none): the data's own wording"
        parts.append(text)
    if cfg.env.name:
        parts.append(f"played out in environment {cfg.env.name} (up to {cfg.env.max_turns} turns)")
    return "; ".join(parts)


def first_prompt(data: Datasets) -> str:
    """The first training example's prompt as the messages the chat template is given, one
    ``role: 'content'`` line each (demonstrations included), each cut to :data:`WIDTH` characters."""
    if not data.train:
        return "(no training examples)"
    lines = []
    for message in data.train[0].prompt:
        text = f"{message.get('role')}: {message.get('content', '')!r}"
        lines.append(text if len(text) <= WIDTH else text[: WIDTH - 1] + "…")
    return "\n           ".join(lines)


def describe_stage(cfg: RunConfig) -> str | None:
    """What a non-RL stage trains on and with which objective; None for RL (describe_method)."""
    r = cfg.rollout
    sampled = f"{r.prompts_per_step} prompts × {r.group_size} samples per step"
    steps = f"{cfg.train.steps} step{'' if cfg.train.steps == 1 else 's'}"
    if cfg.stage == "sft":
        s = cfg.sft
        packed = ", packed" if s.packing else ""
        examples = f"{steps} of {s.batch_size} examples"
        source = f"{cfg.data.task} games played by the {s.player} player" if s.player else s.path
        return f"SFT: cross-entropy on {s.train_on} tokens of {source}{packed}; {examples}"
    if cfg.stage == "rft":
        f = cfg.rft
        return (
            f"rejection-sampling fine-tuning: keep {f.keep} samples with reward ≥ {f.min_reward:g}, "
            f"cross-entropy ({f.epochs} epoch(s) per round); {steps} of {sampled}"
        )
    if cfg.stage == "dpo":
        d = cfg.dpo
        pairs = f"pairs from {d.path}" if d.pairs == "file" else f"best-vs-worst pairs of {sampled}"
        return f"{d.loss} preference loss (beta {d.beta:g}) on {pairs}; {steps}"
    if cfg.stage == "distill":
        d = cfg.distill
        if d.mode == "offline":
            return f"KD ({d.divergence}) from {d.teacher} on {d.path}; {steps}"
        teacher = "the policy with the reference answer in its prompt" if d.mode == "self" else d.teacher
        task = f" + {d.task_weight:g} × task advantage" if d.task_weight else ""
        return (
            f"{d.mode} distillation from {teacher}: per-token advantage {d.coef:g} × log-ratio{task}; {steps}"
        )
    return None


def describe_method(cfg: RunConfig) -> str:
    stage = describe_stage(cfg)
    if stage is not None:
        return stage
    a, r = cfg.algo, cfg.rollout
    text = f"{a.advantage} advantages, {a.loss} loss"
    if cfg.mix.demos != "none":
        text += f", demonstrations in the update ({cfg.mix.demos})"
    if a.kl_coef:
        text += f", KL {a.kl_coef:g}" + (" in the reward" if a.kl_in_reward else "")
    steps = f"{cfg.train.steps} step{'' if cfg.train.steps == 1 else 's'}"
    text += (
        f"; {steps} of {r.prompts_per_step} prompts × {r.group_size} completions, "
        f"up to {r.max_new_tokens} new tokens at temperature {r.temperature:g}"
    )
    return text


def describe_limits(cfg: RunConfig) -> str:
    """The wall-clock limits that may stop training before ``train.steps``; empty when none is set."""
    t = cfg.train
    parts = []
    if t.time_limit_s:
        parts.append(f"training stops after {t.time_limit_s:g} s (train.time_limit_s)")
    if t.time_budget_s:
        parts.append(
            f"{'or earlier ' if parts else 'training stops '}so that the whole run, evals included, "
            f"ends within {t.time_budget_s:g} s (train.time_budget_s)"
        )
    return ", ".join(parts) + (" (null: no limit)" if parts else "")


def describe_eval(cfg: RunConfig, data: Datasets) -> str:
    if not data.held_out:
        return "none (data.eval_size=0)" if cfg.data.eval_size == 0 else f"none: {data.held_out_from}"
    e = cfg.eval
    scorer = describe_reward(eval_item(cfg.rewards)) if cfg.rewards.functions else "the environment"
    text = f"greedy accuracy by {scorer} on {len(data.held_out)} held-out"
    if data.held_out_from:
        text += f" from {data.held_out_from}"
    if e.samples:
        text += f"; {e.samples} samples each (pass@{', pass@'.join(map(str, e.pass_k))}"
        text += f", maj@{e.samples})" if e.samples > 1 else ")"
    if e.group_by:
        text += "; by " + ", ".join(e.group_by)
    return text
