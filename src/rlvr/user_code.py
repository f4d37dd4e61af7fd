"""Import the user's own modules that a config names (``myrewards:fn``, ``myenvs:Env``).

A config may name code by import path. Users expect a module next to their config — in the
directory they run ``rlvr`` from — to be found, as ``python script.py`` or ``python -m`` would
find it; the ``rlvr`` console script, however, does not put the working directory on
``sys.path``. So :func:`import_user_module` imports as usual and, only when the module itself is
not found anywhere, also looks in the working directory: that directory is then *appended* to
``sys.path`` (installed packages and the standard library still win over a same-named file there)
and stays there, so the module's own later imports of its siblings work too.

Reward worker processes find the same modules: :mod:`multiprocessing` starts each one with the
trainer's ``sys.path`` and working directory of that moment (also when its forkserver started
earlier), and a worker that resolves an import path itself (the ``verifier`` reward's routes)
looks in that directory the same way.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType


def working_dir() -> str:
    """The current working directory, absolute: where a config's own modules are looked for."""
    return os.path.abspath(os.getcwd())


def add_search_dir(directory: str) -> None:
    """Append ``directory`` to ``sys.path`` unless it is there already (as given or as ``""``/``"."``
    standing for it)."""
    directory = os.path.abspath(directory)
    present = {os.path.abspath(p or os.curdir) for p in sys.path if isinstance(p, str)}
    if directory not in present:
        sys.path.append(directory)
        importlib.invalidate_caches()


def _not_found_itself(err: ModuleNotFoundError, name: str) -> bool:
    """True when ``err`` says that ``name`` (or a package above it) is missing, not something the
    module imports in turn."""
    missing = err.name or ""
    return bool(missing) and (name == missing or name.startswith(missing + "."))


def import_user_module(name: str, directory: str | None = None) -> ModuleType:
    """``importlib.import_module(name)``, also looking in ``directory`` (default: the working
    directory) when the module is not found elsewhere. Errors are the import's own
    (``ModuleNotFoundError`` when it is nowhere); callers turn them into messages naming the key."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if not _not_found_itself(err, name):
            raise
        where = os.path.abspath(directory or working_dir())
        top = name.partition(".")[0]
        if not (os.path.isfile(os.path.join(where, top + ".py")) or os.path.isdir(os.path.join(where, top))):
            raise
    add_search_dir(where)
    return importlib.import_module(name)
