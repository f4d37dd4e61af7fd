"""Whether a run trained at all: reward errors said on the console, and a run that failed said at exit.

A reward that raises is an error, never a number (rlvr.rewards.pool): its group is skipped or scored
0 and the error is counted in ``reward_errors/*``. Counting alone let a run whose reward failed on
every call look finished. So the first error of each kind (reward label and exception type) is
printed with its message as it happens, once (:class:`ErrorEcho`), and a run that made no update in
any of its steps, or whose reward calls failed more often than not, ends with a summary
(:func:`run_failure`) and exit code 3 from the CLI (:class:`rlvr.errors.TrainingFailed`), after its
metrics, samples, checkpoint and final eval were written as usual.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.markup import escape

FAILED_CALLS_AT = 0.5  # more than this fraction of the run's reward calls failed: the run failed
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*): ")


def error_kind(message: str) -> str:
    """The kind of an error message: its exception type (``ValueError`` of ``"ValueError: ..."``),
    or the pool's own wording (``timeout``, ``worker crashed``, ``batch deadline``)."""
    match = _EXCEPTION.match(message)
    if match:
        return match.group(1)
    for kind in ("timeout", "worker crashed", "worker died", "batch deadline"):
        if message.startswith(kind):
            return kind
    return message.split(":", 1)[0][:40]


class ErrorEcho:
    """Prints the first error of each (reward label, kind) with its message, once per run."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.seen: set[tuple[str, str]] = set()

    def observe(self, groups: Iterable[Any]) -> None:
        for group in groups:
            for t in group.trajectories:
                for label, message in t.errors.items():
                    key = (label, error_kind(str(message)))
                    if key in self.seen:
                        continue
                    self.seen.add(key)
                    what = "environment error" if label == "env" else f"reward error in {label!r}"
                    self.console.print(
                        f"[bold red]{what}:[/bold red] {escape(str(message))} (first of its kind; "
                        "each is counted in reward_errors/* of metrics.jsonl, with its completion in "
                        "samples.jsonl)",
                        highlight=False,
                    )


HACK_SUFFIX = "process_unanswered"  # an environment's outcome: earned process reward, never answered
HACK_WARN_AT = 0.5  # a step where more than this share of the episodes did so is warned about


class HackWatch:
    """Warns, once per run, when most of a step's episodes earned an environment's process reward
    without attempting the task (an outcome named ``*process_unanswered``, e.g. the search
    environment's: it found the gold document and never answered). The share is in metrics.jsonl
    at every step; this makes a run farming a shaped reward visible while it runs."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.warned = False

    def observe(self, step: int, metrics: dict[str, float]) -> str | None:
        """The warning printed for this step's metrics, if any (None when quiet or said before)."""
        if self.warned:
            return None
        for key, share in metrics.items():
            if key.endswith(HACK_SUFFIX) and share > HACK_WARN_AT:
                self.warned = True
                message = (
                    f"step {step}: {share:.0%} of the episodes earned process reward and never answered "
                    f"({key} in metrics.jsonl): the policy may be farming the shaped reward"
                )
                self.console.print(
                    f"[bold yellow]reward hacking?[/bold yellow] {escape(message)}", highlight=False
                )
                return message
        return None


def reward_calls(pool: Any) -> dict[str, float]:
    """``{"reward_calls": n, "reward_errors": failed}`` of a reward pool since it started (its
    components' calls; a routing reward's per-route counts are not counted twice)."""
    if pool is None:
        return {"reward_calls": 0.0, "reward_errors": 0.0}
    stats = [pool.stats.get(label, {}) for label in pool.labels]
    return {
        "reward_calls": float(sum(s.get("calls", 0) for s in stats)),
        "reward_errors": float(sum(s.get("errors", 0) for s in stats)),
    }


def run_failure(results: dict[str, Any]) -> str | None:
    """Why a finished run failed, from ``results["run"]`` (:meth:`Orchestrator.fit`); None if it
    did not: it trained steps and made at least one update, and at most half its reward calls failed."""
    run = results.get("run")
    if not run:
        return None
    steps, updates = int(run.get("steps", 0)), int(run.get("updates", 0))
    calls, errors = int(run.get("reward_calls", 0)), int(run.get("reward_errors", 0))
    problems = []
    if calls and errors > FAILED_CALLS_AT * calls:
        share = f"{errors / calls:.0%}"
        problems.append(
            f"{errors} of {calls} reward calls failed ({share}; the first of each kind is shown above)"
        )
    if steps and not updates:
        problems.append(f"none of its {steps} steps made an update (every group was skipped)")
    if not problems:
        return None
    return "the run failed: " + "; ".join(problems) + " (its logs and outputs are written)"
