"""Preloaded by the reward forkserver: import the trainer's main module once, before any fork.

Worker processes import the main module (as ``__mp_main__``) so that rewards registered in a script
resolve. CPython's forkserver means to do that import once, in the server, but drops the main path
on the way (3.11: its ``desired_keys`` name ``main_path``, the data says ``init_main_from_path``), so
every worker repeats it — with a trainer script that imports torch, about 1.5 s and hundreds of MB
per worker start, and again after every timeout. The parent passes the main module through an
environment variable while it starts the server; importing it here lets workers fork warm.

Failures are swallowed: a worker then imports the main module itself and reports what goes wrong.

When no reward lives in the main module (``skip-path:``/``skip-name:``), the server's ``__main__``
is only *marked* as that module (its file or spec name), which is what CPython checks before
importing it in a child: workers then never run the caller's script, so a script without an
``if __name__ == "__main__":`` guard can train (:mod:`rlvr.rewards.main_module`).

The server and its workers ignore SIGINT from here on: Ctrl-C goes to the whole foreground
process group, and the trainer, not its reward processes, decides what an interrupt does (a
server still importing reward modules printed a KeyboardInterrupt traceback of its own).
"""

from __future__ import annotations

import importlib.machinery
import os
import signal
import sys
from multiprocessing import process, spawn

MAIN_ENV = "RLVR_FORKSERVER_MAIN"


def _mark_main(kind: str, target: str) -> None:
    """Make the server's ``__main__`` look like the caller's main module without running it."""
    main = sys.modules["__main__"]
    if kind == "skip-path":
        main.__file__ = target
    elif kind == "skip-name":
        main.__spec__ = importlib.machinery.ModuleSpec(target, None)


def _import_main(spec: str) -> None:
    kind, _, target = spec.partition(":")
    if kind.startswith("skip-"):
        _mark_main(kind, target)
        return
    process.current_process()._inheriting = True  # as the forkserver does around its own preload
    try:
        if kind == "path" and getattr(sys.modules.get("__main__"), "__file__", None) != target:
            spawn.import_main_path(target)
        elif kind == "name":
            fixup = getattr(spawn, "_fixup_main_from_name", None)
            if fixup is not None:
                fixup(target)
    except (Exception, SystemExit):  # noqa: BLE001 - see module docstring
        pass
    finally:
        del process.current_process()._inheriting


_main_spec = os.environ.pop(MAIN_ENV, None)  # set only while rlvr's pool starts this forkserver
if _main_spec is not None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # the parent started us with SIGINT blocked: now ignored
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if _main_spec:
        _import_main(_main_spec)
