"""Preference pairs for reward-model training (:mod:`rlvr.train.stages.reward_model`).

From a file in TRL's preference columns (:func:`read_pairs`: ``prompt`` text or chat messages,
``chosen`` / ``rejected`` text or one assistant message), or built by the verifier from the
policy's sampled groups (:func:`sample_pairs`: within a group, a higher-scored completion is
chosen over a lower-scored one; ties and errored completions give no pair). Sampled pairs are
written back in the file's columns (:func:`write_pairs`), so they can be inspected and reused.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rlvr.data.example import Example
from rlvr.errors import RlvrError

if TYPE_CHECKING:
    from rich.console import Console

    from rlvr.config import RunConfig
    from rlvr.config.stages import RewardModelConfig

TIE = 1e-6  # rewards closer than this are a tie (as rlvr.algo.filters.informative_groups)


@dataclass
class RewardPair:
    """One preference: the prompt (an :class:`Example`, rendered as the reward renders it) and two
    completions; ``rewards`` are the verifier's scores of a sampled pair (None for a file's)."""

    example: Example
    chosen: str
    rejected: str
    where: str
    rewards: tuple[float, float] | None = None

    def row(self) -> dict[str, Any]:
        """The pair in TRL's conversational preference columns (what ``rm.pairs=file`` reads)."""
        row: dict[str, Any] = {
            "prompt": self.example.prompt,
            "chosen": [{"role": "assistant", "content": self.chosen}],
            "rejected": [{"role": "assistant", "content": self.rejected}],
            "id": self.example.id,
        }
        if self.rewards is not None:
            row["chosen_reward"], row["rejected_reward"] = self.rewards
        return row


# ------------------------------------------------------------------------------ pairs from a file
def _prompt_messages(value: Any, where: str, key: str) -> list[dict[str, str]]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, list) and value:
        for n, message in enumerate(value):
            if (
                not isinstance(message, dict)
                or not isinstance(message.get("role"), str)
                or not isinstance(message.get("content"), str)
            ):
                raise RlvrError(f"{where}: {key}[{n}] must be a message with string 'role' and 'content'.")
        return [{"role": m["role"], "content": m["content"]} for m in value]
    raise RlvrError(f"{where}: column {key!r} must be text or a non-empty list of chat messages.")


def _completion(value: Any, where: str, key: str) -> str:
    """A completion column: text, or a list holding the one assistant message that follows the prompt."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
        message = value[0]
        if message.get("role") == "assistant" and isinstance(message.get("content"), str):
            return message["content"]
    raise RlvrError(
        f"{where}: column {key!r} must be text or a list of one assistant message "
        "({'role': 'assistant', 'content': ...}); multi-turn completions are not supported by rm training."
    )


def read_pairs(rm: RewardModelConfig, path: str, split: str) -> list[RewardPair]:
    """Every row of ``path`` (the first ``rm.limit``) as a :class:`RewardPair`; a malformed row is an
    error naming it."""
    from rlvr.train.stages.preference import _rows, check_pair_row

    rows = _rows(path, split)[: rm.limit]
    if not rows:
        raise RlvrError(f"{path}: no rows; the preference data is empty.")
    pairs = []
    for index, (where, row) in enumerate(rows):
        check_pair_row(where, row, (rm.prompt_key, rm.chosen_key, rm.rejected_key), "rm")
        prompt = _prompt_messages(row[rm.prompt_key], where, rm.prompt_key)
        chosen = _completion(row[rm.chosen_key], where, rm.chosen_key)
        rejected = _completion(row[rm.rejected_key], where, rm.rejected_key)
        if chosen == rejected:
            raise RlvrError(f"{where}: {rm.chosen_key!r} and {rm.rejected_key!r} hold the same completion.")
        ident = row.get("id") if isinstance(row.get("id"), str) else f"pair-{index}"
        pairs.append(RewardPair(Example(id=ident, prompt=prompt, origin=where), chosen, rejected, where))
    return pairs


def write_pairs(path: Path, pairs: list[RewardPair]) -> None:
    """``pairs`` as JSONL rows (:meth:`RewardPair.row`), written atomically."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for pair in pairs:
            f.write(json.dumps(pair.row()) + "\n")
    tmp.replace(path)


# ------------------------------------------------------------------------------ verifier-built pairs
def group_pairs(
    example: Example, scored: list[tuple[str, float | None]], most: int, rng: random.Random
) -> tuple[list[RewardPair], str | None]:
    """Pairs from one prompt's scored completions ``[(text, total or None)]``: every (higher, lower)
    combination of distinct texts whose scores differ by more than :data:`TIE`, at most ``most`` of
    them drawn with ``rng``; and why there are none (``"errors"``: fewer than two scored, ``"tie"``)."""
    seen: dict[str, float] = {}
    for text, total in scored:
        if total is not None and math.isfinite(total) and text not in seen:
            seen[text] = total
    if len(seen) < 2:
        return [], "errors" if sum(t is not None for _, t in scored) < 2 else "tie"
    items = list(seen.items())
    combos = [(a, b) for a in items for b in items if a[1] - b[1] > TIE]
    if not combos:
        return [], "tie"
    rng.shuffle(combos)
    where = f"sampled group of {example.id}"
    pairs = [RewardPair(example, a[0], b[0], where, (a[1], b[1])) for a, b in combos[:most]]
    return pairs, None


def sample_pairs(
    cfg: RunConfig, console: Console | None = None, quiet: bool = True
) -> tuple[list[RewardPair], list[RewardPair], dict[str, float]]:
    """Verifier-built training and held-out pairs (``rm.pairs=sampled``), and what sampling counted:
    ``rm/groups``, ``rm/tied_groups``, ``rm/errored_groups``, ``rm/reward_errors``. A progress bar
    counts the prompts sampled unless ``quiet``."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from rlvr.collect.collector import Collector
    from rlvr.data.from_config import load_datasets
    from rlvr.models import load_model, load_tokenizer
    from rlvr.rewards.scoring import check_reward_examples, score_completions
    from rlvr.rollout import SamplingParams
    from rlvr.rollout.from_config import build_engine

    rm, r = cfg.rm, cfg.rollout
    if cfg.env.name or cfg.data.source == "env":
        raise RlvrError(
            "rm.pairs=sampled samples single-turn completions and cannot play an environment's episodes "
            f"(env.name={cfg.env.name}, data.source={cfg.data.source}); give pairs in a file (rm.pairs=file)"
        )
    data = load_datasets(cfg.data)
    check_reward_examples(cfg.rewards, data.train)
    tokenizer = load_tokenizer(cfg.model.name)
    policy = load_model(cfg.model.name, cfg.model.dtype, cfg.model.device).eval()
    collector = Collector(cfg, build_engine(cfg, policy, tokenizer), tokenizer, data.train, data.held_out)
    params = SamplingParams(
        n=r.group_size, temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens
    )
    counts = {"rm/groups": 0.0, "rm/tied_groups": 0.0, "rm/errored_groups": 0.0, "rm/reward_errors": 0.0}
    rng = random.Random(cfg.seed)

    columns = (TextColumn("[bold]sample pairs"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    bar = Progress(*columns, console=console, disable=quiet)
    task = bar.add_task(
        "sample", total=min(rm.prompts, len(data.train)) + min(rm.eval_prompts, len(data.held_out))
    )

    def pairs_of(prompts: list, examples: list[Example], count: int) -> list[RewardPair]:
        out: list[RewardPair] = []
        for start in range(0, min(count, len(examples)), r.prompts_per_step):
            part = range(start, min(start + r.prompts_per_step, count, len(examples)))
            with torch.no_grad():
                groups = collector.engine.generate([prompts[i] for i in part], params)
            flat = [c for g in groups for c in g]
            results = score_completions(
                collector.pool,
                flat,
                [examples[i] for i, g in zip(part, groups) for _ in g],
                [len(g) for g in groups],
            )
            at = 0
            for i, group in zip(part, groups):
                scored = [(c.text, res.total) for c, res in zip(group, results[at : at + len(group)])]
                counts["rm/reward_errors"] += sum(not res.ok for res in results[at : at + len(group)])
                at += len(group)
                pairs, why = group_pairs(examples[i], scored, rm.pairs_per_group, rng)
                counts["rm/groups"] += 1
                if why:
                    counts[f"rm/{'tied' if why == 'tie' else 'errored'}_groups"] += 1
                out.extend(pairs)
            bar.update(task, advance=len(part))
        return out

    try:
        with bar:
            train = pairs_of(collector.train_prompts, collector.train_examples, rm.prompts)
            held_out = pairs_of(collector.eval_prompts, collector.eval_examples, rm.eval_prompts)
    finally:
        collector.close()
    return train, held_out, counts
