"""Whether reward workers need the caller's main module, and a clear error when that cannot work.

Worker processes find a reward by name in their registry. Rewards of rlvr and of importable
modules register themselves when their module is imported; a reward defined in the script being
run (``python train.py``) exists only once that script has been executed, so workers then have to
import the script (as ``__mp_main__``, the way :mod:`multiprocessing` does for spawned children).
Importing a script re-runs everything at its top level that is not under
``if __name__ == "__main__":``: a script that trains at its top level would start a second
training inside every worker.

So workers import the main module only when a registered reward was defined there
(:func:`main_rewards`); a script that uses built-in or importable rewards needs no guard at all
(the README's Python example). A script that defines a reward *and* starts reward workers from
unguarded top-level code is refused with a message saying where and what to do
(:func:`check_main_guard`), instead of every worker failing to start.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from rlvr.errors import RlvrError

MAIN_NAMES = ("__main__", "__mp_main__")


def main_rewards(names: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Registered rewards defined in the main module, and those of ``names`` that are import paths
    into it (``"__main__:fn"``)."""
    from rlvr.rewards.registry import _REWARDS

    found = [name for name, fn in _REWARDS.items() if getattr(fn, "__module__", None) in MAIN_NAMES]
    found += [name for name in names if name.partition(":")[0] in MAIN_NAMES and ":" in name]
    return list(dict.fromkeys(found))


def _is_main_guard(node: ast.stmt) -> bool:
    """``if __name__ == "__main__":`` (either operand order)."""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    test = node.test
    if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    values = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and values == ["__main__"]


def unguarded_main_line() -> tuple[str, int] | None:
    """``(script, line)`` when the current call comes from the main script's top-level code outside
    an ``if __name__ == "__main__":`` block; None otherwise (or when the script cannot be read)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not path:
        return None
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is vars(main):
            break
        frame = frame.f_back
    if frame is None:
        return None
    line = frame.f_lineno
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None
    for node in tree.body:
        end = getattr(node, "end_lineno", None) or node.lineno
        if node.lineno <= line <= end:
            return None if _is_main_guard(node) else (path, line)
    return None


def check_main_guard(rewards: list[str]) -> None:
    """Refuse to start reward workers from unguarded top-level code of a script that defines
    ``rewards`` (the workers would import the script and run that code again)."""
    where = unguarded_main_line()
    if where is None or not rewards:
        return
    path, line = where
    raise RlvrError(
        f"{path}, line {line}: this script defines the reward(s) {', '.join(rewards)}, so reward worker "
        "processes import it to find them, which would run this line again in every worker. Put the "
        'code that trains or scores under `if __name__ == "__main__":`, or move the rewards into an '
        "importable module"
    )
