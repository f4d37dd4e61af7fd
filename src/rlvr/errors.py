"""User-facing errors.

Anything the user can fix (a bad file, an unknown key, a model that is not available offline)
raises :class:`RlvrError` with a message that names the file, row or key. The CLI prints the
message and exits with code 2; the traceback is shown only with ``--debug``. A checkpoint that
cannot be written (:class:`rlvr.train.loop.checkpoint.CheckpointError`: a full disk, an I/O error)
exits with 74, a run stopped by Ctrl-C with 130 and by SIGTERM with 143 (:class:`Stopped`). A
training run that finished but did not train (no step made an update, or more than half of its
reward calls failed) exits with 3 after writing its outputs (:class:`TrainingFailed`,
:mod:`rlvr.train.loop.health`).
"""

from __future__ import annotations


class RlvrError(Exception):
    """An error caused by the user's input; its message alone must tell them what to fix."""

    exit_code = 2


class Stopped(RlvrError):
    """The run was stopped from outside: Ctrl-C (exit 130) or SIGTERM (exit 143, after a checkpoint)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class TrainingFailed(RlvrError):
    """A run that finished without training: no update in any step, or most reward calls failed (exit 3)."""

    exit_code = 3
