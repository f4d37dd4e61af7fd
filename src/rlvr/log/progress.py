"""The live progress bar of a training run (rich), with the numbers a person watches."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


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
