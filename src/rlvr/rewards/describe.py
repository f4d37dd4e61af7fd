"""Reward components as one line of text: what a run's header and ``rlvr reward``'s summary print."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlvr.config import RunConfig
    from rlvr.config.schema import RewardItem


def describe_reward(item: RewardItem) -> str:
    params = ", ".join(f"{k}={v}" for k, v in item.params.items())
    text = f"{item.name}({params})"
    if item.label:
        text = f"{item.label} = {text}"
    if item.gate:
        text += f" if {item.gate} ≥ {item.gate_min:g}"
    return text


def describe_rewards(functions: list[RewardItem], cfg: RunConfig) -> str:
    if not functions:
        return "the environment's turn rewards only"
    text = " + ".join(f"{item.weight:g} × {describe_reward(item)}" for item in functions)
    if cfg.rewards.shaping:
        text += "; shaped by " + ", ".join(s.name for s in cfg.rewards.shaping)
    return text
