"""The whole-run time budget (``train.time_budget_s``): when to stop training so the run ends in time."""

from __future__ import annotations

from typing import Any

# what the first checkpoint of a run is expected to take before one has been timed: SmolLM2-135M in
# fp32 with its AdamW state is 1.6 GB, written in 7.3-7.6 s on the 2-core machine (2026-11-21)
FIRST_SAVE_S = 10.0


def over_budget(spent_s: float, budget_s: float, step_s: float, eval_s: float, save_s: float) -> bool:
    """Would one more step leave too little of ``budget_s`` for the final eval and checkpoint?

    ``spent_s`` is the run's time so far; the next step is expected to take ``step_s`` (the last
    step's time), the final eval ``eval_s`` (the last eval's time: the eval before training, or a
    periodic one; 0 when none ran, so with ``eval.before=false`` the final eval is not reserved for)
    and the checkpoint ``save_s`` (the last save's time, :data:`FIRST_SAVE_S` before any).
    """
    return spent_s + step_s + eval_s + (save_s or FIRST_SAVE_S) > budget_s


def stop_message(cfg: Any, step: int, time_up: bool) -> str:
    """Why training stopped before ``train.steps``: the time limit (``time_up``) or the budget."""
    t = cfg.train
    if time_up:
        return (
            f"time limit: stopping after step {step} of {t.steps}, "
            f"train.time_limit_s={t.time_limit_s:g} reached (null: no limit)"
        )
    return (
        f"time budget: stopping after step {step} of {t.steps} so that the final eval and checkpoint "
        f"fit in train.time_budget_s={t.time_budget_s:g} (null: no budget)"
    )
