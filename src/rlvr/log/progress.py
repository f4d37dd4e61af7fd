"""The live progress bar of a training run (rich), with the numbers a person watches."""

from __future__ import annotations

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
    whose rewards fail or whose groups are all filtered out should not look healthy."""

    def render(self, task: Task) -> Text:
        fields = task.fields
        text = Text()
        if fields.get("reward_errors"):
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
