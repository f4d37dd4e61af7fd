"""Preloaded by the reward forkserver: import the trainer's main module once, before any fork.

Worker processes import the main module (as ``__mp_main__``) so that rewards registered in a script
resolve. CPython's forkserver means to do that import once, in the server, but drops the main path
on the way (3.11: its ``desired_keys`` name ``main_path``, the data says ``init_main_from_path``), so
every worker repeats it — with a trainer script that imports torch, about 1.5 s and hundreds of MB
per worker start, and again after every timeout. The parent passes the main module through an
environment variable while it starts the server; importing it here lets workers fork warm.

Failures are swallowed: a worker then imports the main module itself and reports what goes wrong.
"""

from __future__ import annotations

import os
import sys
from multiprocessing import process, spawn

MAIN_ENV = "RLVR_FORKSERVER_MAIN"


def _import_main(spec: str) -> None:
    kind, _, target = spec.partition(":")
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


if os.environ.get(MAIN_ENV):
    _import_main(os.environ[MAIN_ENV])
