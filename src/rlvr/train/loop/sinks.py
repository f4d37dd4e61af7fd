"""Metric sinks besides metrics.jsonl: TensorBoard event files and Weights & Biases (``log.*``).

metrics.jsonl stays the record (``rlvr report``, resume and the tests read it); a sink receives the
same rows as they are written. Each sink's package is an optional extra, checked when the config
is validated, so a run never trains for minutes before finding it missing.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Protocol

from rlvr.config import RunConfig, dump_config


def _scalars(record: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of a metrics row, less its ``step`` (``phase`` and other text are left out)."""
    return {
        key: float(value)
        for key, value in record.items()
        if key != "step"
        and isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
    }


class Sink(Protocol):
    def write(self, step: int, scalars: dict[str, float]) -> None: ...

    def close(self) -> None: ...


class TensorBoardSink:
    """Scalars in ``<run>/tensorboard/``, one tag per metrics key, at the row's step. On a resume
    the events after the checkpoint's step are purged, as metrics.jsonl's rows are."""

    def __init__(self, run_dir: Path, resume_step: int | None) -> None:
        import tensorboard  # noqa: F401  (the `tensorboard` extra: torch's writer is built on it)
        from torch.utils.tensorboard import SummaryWriter

        purge = None if resume_step is None else resume_step + 1
        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"), purge_step=purge)

    def write(self, step: int, scalars: dict[str, float]) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    """A wandb run named after the rlvr run, its files under ``<run>/wandb/``; the resolved config
    is the wandb run's config."""

    def __init__(self, cfg: RunConfig, run_dir: Path) -> None:
        import wandb
        import yaml

        w = cfg.log.wandb
        assert w is not None
        self.run = wandb.init(
            project=w.project,
            entity=w.entity,
            mode=w.mode,
            name=cfg.name,
            dir=str(run_dir),
            config=yaml.safe_load(dump_config(cfg)),
            settings=wandb.Settings(console="off", silent=True),
            reinit="create_new",
        )

    def write(self, step: int, scalars: dict[str, float]) -> None:
        self.run.log(scalars, step=step)

    def close(self) -> None:
        self.run.finish()


class MetricsLog:
    """metrics.jsonl's writer with the configured sinks behind it: ``write(record)`` appends the row
    to the JSONL file first, then hands its numbers to each sink."""

    def __init__(self, jsonl: Any, sinks: list[Sink]) -> None:
        self.jsonl, self.sinks = jsonl, sinks

    def write(self, record: dict[str, Any]) -> None:
        self.jsonl.write(record)
        scalars = _scalars(record)
        for sink in self.sinks:
            sink.write(int(record.get("step", 0)), scalars)

    def close(self) -> None:
        self.jsonl.close()
        for sink in self.sinks:
            sink.close()


def with_sinks(jsonl: Any, cfg: RunConfig, run_dir: Path, resume_step: int | None = None) -> Any:
    """``jsonl`` itself when no sink is configured, else a :class:`MetricsLog` that also feeds them."""
    sinks: list[Sink] = []
    if cfg.log.tensorboard:
        sinks.append(TensorBoardSink(run_dir, resume_step))
    if cfg.log.wandb is not None:
        sinks.append(WandbSink(cfg, run_dir))
    return MetricsLog(jsonl, sinks) if sinks else jsonl
