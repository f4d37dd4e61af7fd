"""Whether a Hugging Face Hub id may be downloaded: as in transformers, unless nothing can be.

A Hub id (``model.name: Qwen/Qwen2.5-0.5B-Instruct``, ``data.path`` of an HF dataset) downloads
into the Hugging Face cache as it does with transformers. Downloads are off when:

- the user says so: ``HF_HUB_OFFLINE=1`` (or ``TRANSFORMERS_OFFLINE=1``); the tests
  (``tests/conftest.py``) and ``make`` (the Makefile) set it;
- the Hub cannot be reached from this machine (no DNS, no route): probed once per process, and
  only when a Hub id is about to be loaded, so a built-in model or a local directory never touches
  the network. Without the probe, huggingface_hub would retry each file for about a minute before
  failing. rlvr then sets ``HF_HUB_OFFLINE=1`` for this process and the processes it starts, and
  loads from the cache alone.

:func:`downloads_hint` tells a "not found" error which of these applies and how to change it.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from urllib.parse import urlparse

_TRUE = ("1", "on", "yes", "true")
_PROXIES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
_PROBE_TIMEOUT_S = 3.0

_unreachable: str | None = None  # the probe's finding, once made: why the Hub cannot be reached
_probed = False


def _env_setting() -> bool | None:
    """The user's choice: True/False when HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set, else None."""
    values = [os.environ.get(key) for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")]
    given = [v.strip().lower() for v in values if v is not None and v.strip()]
    if not given:
        return None
    return any(v in _TRUE for v in given)


def endpoint_host() -> tuple[str, int]:
    """``(host, port)`` of the Hub rlvr would download from (``HF_ENDPOINT`` or huggingface.co)."""
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    return url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)


def _probe() -> str | None:
    """None when a TCP connection to the Hub opens within a few seconds; else what went wrong."""
    if any(os.environ.get(key) for key in _PROXIES):
        return None  # through a proxy: leave it to huggingface_hub
    host, port = endpoint_host()
    found: list[str | None] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=_PROBE_TIMEOUT_S).close()
            found.append(None)
        except OSError as err:
            found.append(f"{type(err).__name__}: {err}")

    thread = threading.Thread(target=connect, daemon=True, name="rlvr-hub-probe")
    thread.start()
    thread.join(2 * _PROBE_TIMEOUT_S)  # a name lookup is not bounded by the socket timeout
    return found[0] if found else f"no answer within {2 * _PROBE_TIMEOUT_S:g} s"


def _go_offline() -> None:
    """Offline mode for this process (huggingface_hub and datasets read it at import) and its children."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        constants.HF_HUB_OFFLINE = True
    config = sys.modules.get("datasets.config")
    if config is not None:
        config.HF_HUB_OFFLINE = True
        config.HF_DATASETS_OFFLINE = True


def hub_offline() -> bool:
    """True when a Hub id must come from the local cache: the user set ``HF_HUB_OFFLINE``, or the
    Hub cannot be reached from here (then offline mode is switched on for the process)."""
    global _probed, _unreachable
    setting = _env_setting()
    if setting is not None:
        return setting
    if not _probed:
        _probed = True
        _unreachable = _probe()
    if _unreachable is not None:
        _go_offline()
        return True
    return False


def downloads_hint(name: str, repo_type: str = "model") -> str:
    """Why ``name`` (a ``repo_type`` repository: model or dataset) was looked up in the local cache
    only, or why a download may have failed, and what to do: one sentence for an error message."""
    host = endpoint_host()[0]
    if repo_type != "model":
        name = f"{name} --repo-type {repo_type}"
    if _unreachable is not None and _probed:
        return (
            f"The Hugging Face Hub ({host}) cannot be reached from this machine ({_unreachable}), so only "
            f"the local cache was searched: download it where there is network (hf download {name}) and "
            "copy the cache (~/.cache/huggingface) or the files here"
        )
    if _env_setting():
        return (
            "Downloads are off because HF_HUB_OFFLINE=1 (or TRANSFORMERS_OFFLINE=1) is set: unset it, or "
            "set HF_HUB_OFFLINE=0, to let rlvr download it from the Hub; or download it first "
            f"(hf download {name})"
        )
    return (
        f"Check the name on {host}; a gated or private repository needs a token (hf auth login, or HF_TOKEN)"
    )
