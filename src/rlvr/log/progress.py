"""The live progress bar of a training run (rich), with the numbers a person watches.

A console that cannot redraw a bar in place (a batch job, output redirected to a file or a pipe)
gets :class:`StepLines` instead: one compact line per step (every ``log.every_steps`` steps), and
one line per evaluation with its accuracy (:func:`eval_line`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class IssuesColumn(ProgressColumn):
    """Reward errors and skipped groups so far (this process), shown only when there are any: a run
    whose rewards fail or whose groups are all filtered out should not look healthy. A mixture of
    sources (data.sources) leads with the last step's accuracy per source."""

    def render(self, task: Task) -> Text:
        fields = task.fields
        text = Text(fields.get("sources") or "")  # data.sources: the last step's accuracy per source
        if fields.get("reward_errors"):
            text.append("  " if text else "")
            text.append(f"reward errors {int(fields['reward_errors'])}", style="bold red")
        if fields.get("skipped_groups"):
            text.append("  " if text else "")
            text.append(
                f"skipped groups {int(fields['skipped_groups'])}/{int(fields['sampled_groups'])}",
                style="yellow",
            )
        if fields.get("skipped_steps"):
            text.append("  " if text else "")
            text.append(f"steps without update {int(fields['skipped_steps'])}", style="yellow")
        return text


def note_issues(progress: Progress, task: TaskID, metrics: Mapping[str, float]) -> None:
    """Add one step's reward errors, skipped groups (sampled but not trained on: errored or filtered
    out) and skipped update to the totals ``progress`` shows for ``task``."""
    fields = next(t for t in progress.tasks if t.id == task).fields
    sampled = metrics.get("groups/sampled", 0.0)
    step = {
        "reward_errors": metrics.get("reward/errors", 0.0),
        "skipped_groups": sampled - metrics.get("groups/kept", sampled),
        "sampled_groups": sampled,
        "skipped_steps": metrics.get("update/skipped", 0.0),
    }
    progress.update(task, **{k: fields.get(k, 0.0) + v for k, v in step.items()})
    if per_source := source_accuracy(metrics):
        progress.update(task, sources=per_source)


def source_accuracy(metrics: Mapping[str, float]) -> str:
    """``acc gsm 40% arith 12%``: a mixture's (data.sources) accuracy per source this step; "" without."""
    parts = [
        f"{key[len('source/') : -len('/accuracy')]} {value:.0%}"
        for key, value in metrics.items()
        if key.startswith("source/") and key.endswith("/accuracy")
    ]
    return "acc " + " ".join(parts) if parts else ""


def training_progress(console: Console | None = None, disable: bool = False) -> Progress:
    return Progress(
        TextColumn("[bold]train"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(
            "reward {task.fields[reward]:.3f}  acc {task.fields[acc]:.2f}  {task.fields[tps]:.0f} tok/s"
        ),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        IssuesColumn(),
        console=console,
        disable=disable,
        transient=False,
    )


def eval_progress(console: Console | None = None, disable: bool = False) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=disable,
        transient=True,
    )


def is_live(console: Console) -> bool:
    """Whether ``console`` redraws a progress bar in place: a terminal or a notebook, not a file."""
    return bool(console.is_terminal or console.is_jupyter)


def _clock(seconds: float) -> str:
    seconds = int(max(0.0, seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class StepLines:
    """One line per training step, for consoles without a live progress bar: step, reward, accuracy,
    tokens/s, elapsed time and ETA, and the run's reward errors and skipped groups so far when any. Every
    ``every`` steps, and always the last (``total``). The ETA is the mean step time so far times the
    steps left, or the time left to ``deadline`` (a ``time.perf_counter()`` value) when sooner."""

    def __init__(self, console: Console, total: int, every: int = 1, deadline: float | None = None) -> None:
        self.console, self.total, self.every, self.deadline = console, total, max(1, every), deadline
        self.started = time.perf_counter()
        self.done = 0
        self.errors = self.skipped = self.sampled = 0.0

    def step(self, step: int, metrics: Mapping[str, float]) -> None:
        self.done += 1
        self.errors += metrics.get("reward/errors", 0.0)
        sampled = metrics.get("groups/sampled", 0.0)
        self.sampled += sampled
        self.skipped += sampled - metrics.get("groups/kept", sampled)
        if step % self.every and step < self.total:
            return
        now = time.perf_counter()
        elapsed = now - self.started
        eta = elapsed / self.done * max(0, self.total - step)
        if self.deadline is not None:
            eta = min(eta, max(0.0, self.deadline - now))
        parts = [f"step {step}/{self.total}", f"reward {metrics.get('reward/mean', 0.0):.3f}"]
        if "train/accuracy" in metrics:
            parts.append(f"acc {metrics['train/accuracy']:.2f}")
        if per_source := source_accuracy(metrics):
            parts.append(f"({per_source})")
        parts += [
            f"{metrics.get('throughput/tokens_per_s', 0.0):.0f} tok/s",
            f"elapsed {_clock(elapsed)}",
            f"ETA {_clock(eta)}",
        ]
        # the run's totals so far, as the live bar shows them (note_issues)
        if self.errors:
            parts.append(f"reward errors {int(self.errors)}")
        if self.skipped:
            parts.append(f"skipped groups {int(self.skipped)}/{int(self.sampled)}")
        self.console.print("  ".join(parts), highlight=False)


def eval_line(label: str, step: int, metrics: Mapping[str, float]) -> str:
    """``eval (periodic) at step 20: accuracy 41.5% (n=200)`` for one evaluation's metrics."""
    text = f"eval ({label}) at step {step}: accuracy {metrics.get('eval/accuracy', 0.0):.1%}"
    if "eval/size" in metrics:
        text += f" (n={int(metrics['eval/size'])})"
    if metrics.get("eval/reward_errors"):
        text += f", {int(metrics['eval/reward_errors'])} not scored (reward errors, counted as wrong)"
    if "eval_master/accuracy" in metrics:  # eval.weights both: the numbers above are the sampler's
        text += f" with the sampler's weights; {metrics['eval_master/accuracy']:.1%} with the master weights"
        if metrics.get("eval_master/reward_errors"):
            text += f" ({int(metrics['eval_master/reward_errors'])} not scored)"
    return text
