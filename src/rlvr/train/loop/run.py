"""Run one training job in this process: resume checks, the orchestrator, interruption.

:func:`rlvr.api.train` calls this after what only a driver does (``--overwrite``, starting Ray
actors); each Ray actor calls it directly (:mod:`rlvr.train.scale.ray_launch`), so the launcher
never imports the public API back.
"""

from __future__ import annotations

from rich.console import Console

from rlvr.config import RunConfig
from rlvr.errors import Stopped


def run_training(
    cfg: RunConfig, resume: bool = False, console: Console | None = None, quiet: bool = False
) -> dict:
    """Train ``cfg`` here (under torchrun: this rank's part); the results :func:`rlvr.api.train` returns."""
    from rlvr.train.loop.orchestrator import Orchestrator
    from rlvr.train.loop.run_dir import removed_unless_trained

    console = console or Console(stderr=True)
    if (
        cfg.stage == "rm"
    ):  # a reward model: a classifier on pairs, not a policy (rlvr.train.stages.reward_model)
        return _reward_model(cfg, resume, console, quiet)
    if resume:
        from rlvr.train.loop.resume import clear_logs, nothing_to_do, resume_state

        state = resume_state(cfg)
        done = nothing_to_do(state, cfg)
        if done:
            console.print(done, highlight=False)
            return {}
        if not state.has_checkpoint:
            console.print(
                f"--resume: {state.run} has no checkpoint: starting fresh from step 0 with its "
                "config.yaml (its old logs are cleared)",
                highlight=False,
            )
            clear_logs(state.run)
        else:  # a run with model-only checkpoints alone cannot continue: say so before writing anything
            from rlvr.train.loop.checkpoint import resume_point

            resume_point(state.run / "checkpoints")

    run: Orchestrator | None = None
    # a new run that fails before its first step leaves no run directory (rlvr.train.loop.run_dir)
    with removed_unless_trained(cfg, resume, lambda: run is not None and run.step > 0):
        run = Orchestrator(cfg, resume=resume, console=console, quiet=quiet)
        try:
            return run.fit()
        except KeyboardInterrupt:
            if run.step == 0 and not resume:
                message = "interrupted before the first training step; nothing of the run was kept"
            else:
                last = run.last_checkpoint or "none yet"
                message = f"interrupted at step {run.step} (last checkpoint: {last})"
            raise Stopped(message, exit_code=130) from None
        finally:
            run.close()


def _reward_model(cfg: RunConfig, resume: bool, console: Console, quiet: bool) -> dict:
    """``stage=rm``: trained in one go; ``--resume`` of a finished one does nothing, of an interrupted
    one is refused (it is short: train it again with --overwrite)."""
    from pathlib import Path

    from rlvr.errors import RlvrError
    from rlvr.train.loop.checkpoint import newest_checkpoint
    from rlvr.train.loop.run_dir import removed_unless_trained
    from rlvr.train.stages.reward_model import train_reward_model

    if resume:
        run = Path(cfg.output_dir) / cfg.name
        if newest_checkpoint(run / "checkpoints") is not None:
            console.print(f"--resume: the reward model of {run} is already trained", highlight=False)
            return {}
        raise RlvrError(
            f"--resume: {run} is a reward-model run (stage=rm) that did not finish; it cannot continue "
            "mid-way: train it again with --overwrite"
        )
    with removed_unless_trained(cfg, resume, lambda: False):  # a failed one leaves nothing behind
        return train_reward_model(cfg, console, quiet)
