"""Start, reach and stop the vLLM server process (``rlvr/rollout/vllm_server.py``).

The server runs in vLLM's own environment (``.venv-vllm``, made by ``make vllm``): vLLM pins its
own transformers and torch, which must not replace rlvr's. rlvr starts it with that environment's
Python and the server file's path (nothing of rlvr is importable there: ``PYTHONPATH`` is dropped,
``PYTHONSAFEPATH`` keeps the file's directory off ``sys.path``), waits for it to write its port,
and talks to it over HTTP on 127.0.0.1. The process is rlvr's: it is stopped by :meth:`close`, at
interpreter exit, and by itself when rlvr's process disappears. A server that dies, or never comes
up, is an error that quotes the end of its log.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from rlvr.errors import RlvrError

SERVER_FILE = Path(__file__).with_name("vllm_server.py")
LOG_TAIL_LINES = 40


def find_vllm_python(configured: str | None = None) -> Path:
    """The Python of the environment with vLLM: ``configured`` (``rollout.vllm.python``), else
    ``$RLVR_VLLM_PYTHON``, else ``.venv-vllm/bin/python`` in the current directory or in the rlvr
    checkout this module belongs to."""
    if configured:
        path = Path(configured).expanduser()
        if not path.exists():
            raise RlvrError(f"rollout.vllm.python: {path} does not exist")
        return path
    if os.environ.get("RLVR_VLLM_PYTHON"):
        path = Path(os.environ["RLVR_VLLM_PYTHON"]).expanduser()
        if not path.exists():
            raise RlvrError(f"RLVR_VLLM_PYTHON: {path} does not exist")
        return path
    candidates = candidate_venvs()
    for venv in candidates:
        if (venv / ".installed").exists() and (venv / "bin" / "python").exists():
            return venv / "bin" / "python"
    looked = ", ".join(str(c) for c in dict.fromkeys(candidates))
    raise RlvrError(
        "rollout.engine=vllm needs vLLM in an environment of its own: run `make vllm` in the rlvr "
        f"checkout (it creates .venv-vllm; looked in {looked}), or set rollout.vllm.python to a Python "
        "that has vllm, or rollout.vllm.url to a running server"
    )


def candidate_venvs() -> list[Path]:
    """Where ``make vllm`` puts the environment: the current directory, then this rlvr checkout."""
    return [Path.cwd() / ".venv-vllm", Path(__file__).resolve().parents[3] / ".venv-vllm"]


class VLLMServerError(RlvrError):
    """The vLLM server failed: it did not start, died, or refused a request."""


class VLLMServer:
    """One vLLM server: started here (``start``) or already running at a URL (``connect``)."""

    def __init__(
        self,
        url: str,
        process: subprocess.Popen | None = None,
        log_path: Path | None = None,
        timeout_s: float = 1800.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.process = process
        self.log_path = log_path
        self.timeout_s = timeout_s
        if process is not None:
            atexit.register(self.close)

    @classmethod
    def connect(cls, url: str, timeout_s: float = 1800.0) -> VLLMServer:
        server = cls(url, timeout_s=timeout_s)
        try:
            server.health()
        except VLLMServerError as err:
            raise VLLMServerError(
                f"rollout.vllm.url={url}: no rlvr vLLM server answers there ({err})"
            ) from err
        return server

    @classmethod
    def start(
        cls,
        python: Path,
        server_args: list[str],
        log_dir: Path | None = None,
        startup_timeout_s: float = 600.0,
        timeout_s: float = 1800.0,
        env: dict[str, str] | None = None,
        log_name: str = "vllm_server.log",
    ) -> VLLMServer:
        """Start ``python vllm_server.py server_args`` (``env`` added to this process's environment)
        and wait until it serves (or fails); its output goes to ``log_dir/log_name``."""
        log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="rlvr-vllm-"))
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / log_name
        ready = log_dir / f".vllm-ready-{os.getpid()}-{time.monotonic_ns()}.json"
        extra = env or {}
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        env.update(extra)
        env.update(
            PYTHONSAFEPATH="1",  # the server file's directory (rlvr/rollout) stays off sys.path
            PYTHONUNBUFFERED="1",
            HF_HUB_OFFLINE=os.environ.get("HF_HUB_OFFLINE", "1"),
            VLLM_ENABLE_V1_MULTIPROCESSING="0",
            VLLM_NO_USAGE_STATS="1",
            TOKENIZERS_PARALLELISM="false",
        )
        command = [
            str(python),
            str(SERVER_FILE),
            *server_args,
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--ready-file",
            str(ready),
            "--parent-pid",
            str(os.getpid()),
        ]
        with open(log_path, "ab") as log:
            log.write(f"$ {' '.join(command)}\n".encode())
            log.flush()
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # its own process group: close() stops it and anything it started
            )
        began = time.monotonic()
        try:
            while not ready.exists():
                if process.poll() is not None:
                    raise VLLMServerError(
                        f"the vLLM server exited with code {process.returncode} while starting; "
                        f"its log ({log_path}) ends with:\n{log_tail(log_path)}"
                    )
                if time.monotonic() - began > startup_timeout_s:
                    _stop(process)
                    raise VLLMServerError(
                        f"the vLLM server did not start within rollout.vllm.startup_timeout_s="
                        f"{startup_timeout_s:g} s; its log ({log_path}) ends with:\n{log_tail(log_path)}"
                    )
                time.sleep(0.2)
            port = json.loads(ready.read_text())["port"]
        except BaseException:
            _stop(process)
            raise
        finally:
            ready.unlink(missing_ok=True)
        return cls(f"http://127.0.0.1:{port}", process, log_path, timeout_s)

    # ----------------------------------------------------------------------------- requests
    def health(self) -> dict[str, Any]:
        return self.request("GET", "/health", timeout_s=30.0)

    def request(
        self, method: str, path: str, body: dict[str, Any] | None = None, timeout_s: float | None = None
    ) -> dict[str, Any]:
        """One JSON request; any failure raises :class:`VLLMServerError` with the server's log tail."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout_s or self.timeout_s) as reply:
                return json.loads(reply.read())
        except urllib.error.HTTPError as err:
            try:
                message = json.loads(err.read()).get("error", "")
            except (ValueError, OSError):
                message = err.reason
            raise VLLMServerError(
                f"vLLM server: {path} failed ({err.code}): {message}{self._tail()}"
            ) from err
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as err:
            raise VLLMServerError(
                f"vLLM server at {self.url} unreachable on {path}: {err}{self._tail()}"
            ) from err

    def _tail(self) -> str:
        if self.process is None or self.log_path is None:
            return ""
        state = "" if self.process.poll() is None else f" (it exited with code {self.process.returncode})"
        return f"\nthe server's log ({self.log_path}){state} ends with:\n{log_tail(self.log_path)}"

    # ----------------------------------------------------------------------------- lifetime
    def close(self) -> None:
        """Stop the server if this process started it (asking first, then SIGTERM, then SIGKILL)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        atexit.unregister(self.close)
        try:
            urllib.request.urlopen(urllib.request.Request(self.url + "/shutdown", data=b"{}"), timeout=5)
            process.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            pass
        _stop(process)


def _stop(process: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
        if process.poll() is not None:
            return
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    if process.poll() is None:
        print(f"warning: vLLM server pid {process.pid} did not stop", file=sys.stderr)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:]) or "(empty log)"
