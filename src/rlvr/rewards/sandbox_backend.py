"""Which isolation this machine offers the code sandbox, probed once per process.

``bwrap`` (bubblewrap: namespaces, a read-only root of ``/usr``, no network), else ``unshare``
namespaces, else bare ``rlimits``; and which interpreter runs untrusted code (one the ``nobody``
user can reach, when running as root, so that the process limit applies). See
:mod:`rlvr.rewards.sandbox` for what each backend exposes and how runs use them.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("rlvr.rewards.sandbox")

BACKEND_ENV = "RLVR_SANDBOX_BACKEND"  # set by the parent after probing, so workers need not probe
PYTHON_ENV = "RLVR_SANDBOX_PYTHON"  # the interpreter that runs untrusted code (default: see below)
INSTALL_HINT = "apt-get install -y bubblewrap"
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
NOBODY = 65534
UNSHARE = ["unshare", "--user", "--pid", "--net", "--ipc", "--uts", "--fork", "--kill-child"]


@dataclass(frozen=True)
class Backend:
    name: str  # "bwrap", "unshare" or "rlimits"
    python: str
    python_prefix: str | None  # to bind read-only when outside /usr
    drop_to_nobody: bool


def bwrap_args(backend: Backend, tmpfs_mb: int = 64) -> list[str]:
    args = [
        "bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--setenv", "PATH", SANDBOX_PATH,
        "--setenv", "LANG", "C.UTF-8",
        "--setenv", "HOME", "/tmp",
        "--hostname", "sandbox",
        "--ro-bind", "/usr", "/usr",
        "--proc", "/proc",
        "--dev", "/dev",
        "--size", str(tmpfs_mb << 20), "--tmpfs", "/tmp",
        "--chdir", "/tmp",
    ]  # fmt: skip
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    if backend.python_prefix:
        args += ["--ro-bind", backend.python_prefix, backend.python_prefix]
    return args


def user_kwargs(backend: Backend) -> dict[str, Any]:
    if not backend.drop_to_nobody:
        return {}
    return {"user": NOBODY, "group": NOBODY, "extra_groups": []}


@functools.cache
def probe() -> Backend:
    """Probe once per process what isolation works here; warn once when it is the weak fallback.

    The parent probes when a code reward is configured and exports the answer in
    ``RLVR_SANDBOX_BACKEND``, so reward workers started afterwards neither probe nor warn again.
    """
    root = os.geteuid() == 0
    python, prefix, nobody_ok = _interpreter(root)
    drop = root and nobody_ok
    forced = os.environ.get(BACKEND_ENV)
    if forced in ("bwrap", "unshare", "rlimits"):
        return Backend(forced, python, prefix, drop)
    backend = Backend("rlimits", python, prefix, drop)
    for name in ("bwrap", "unshare"):
        if works(Backend(name, python, prefix, drop)):
            backend = Backend(name, python, prefix, drop)
            break
    os.environ[BACKEND_ENV] = backend.name
    if backend.name != "bwrap":
        log.warning(
            "bubblewrap (bwrap) is not available: untrusted code would run with rlimits%s but could "
            "READ the host's files, WRITE to its /tmp and follow symlinks anywhere, so the code reward "
            "and the python tool refuse to run unless allow_unsafe_sandbox is set (and then warn "
            "again). Install it for a read-only, network-less sandbox (Debian/Ubuntu: %s).",
            " and unshare namespaces (no network)"
            if backend.name == "unshare"
            else ", WITH network (loopback services included)",
            INSTALL_HINT,
        )
    if root and not drop:
        log.warning(
            "sandboxed code runs as root (no interpreter reachable by 'nobody'), so the process "
            "limit does not apply; set %s to a world-readable python3",
            PYTHON_ENV,
        )
    return backend


def _interpreter(root: bool) -> tuple[str, str | None, bool]:
    """The python for untrusted code, its prefix to bind (if outside /usr), and whether ``nobody``
    can run it. Default: the trainer's base interpreter (run with ``-I -S``: stdlib only), or the
    system ``/usr/bin/python3`` when running as root and the former sits in a private directory."""
    chosen = os.environ.get(PYTHON_ENV)
    candidates = [chosen] if chosen else [sys._base_executable, "/usr/bin/python3"]
    usable = [os.path.realpath(p) for p in candidates if p and os.access(p, os.X_OK)]
    if not usable:
        raise RuntimeError(f"no python interpreter for the sandbox (tried {candidates}; set {PYTHON_ENV})")
    chosen_path = usable[0]
    if root:
        chosen_path = next((p for p in usable if _world_reachable(p)), usable[0])
    prefix = None if chosen_path.startswith("/usr/") else str(Path(chosen_path).parent.parent)
    return chosen_path, prefix, not root or _world_reachable(chosen_path)


def _world_reachable(path: str) -> bool:
    current = Path(path)
    for parent in current.parents:
        if not os.stat(parent).st_mode & 0o001:
            return False
    return bool(os.stat(current).st_mode & 0o005)


def works(backend: Backend) -> bool:
    needed = "bwrap" if backend.name == "bwrap" else "unshare"
    if shutil.which(needed) is None:
        return False
    if backend.name == "bwrap":
        command = [*bwrap_args(backend), "--", backend.python, "-I", "-S", "-c", "pass"]
    else:
        command = [*UNSHARE, backend.python, "-I", "-S", "-c", "pass"]
    try:
        result = subprocess.run(
            command, capture_output=True, timeout=30, env={"PATH": SANDBOX_PATH}, **user_kwargs(backend)
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return result.returncode == 0
