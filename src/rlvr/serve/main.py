"""``rlvr serve``'s start-up: build the service, bind, print how to point the SDK at it, serve."""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import torch

from rlvr.errors import RlvrError
from rlvr.serve.http import TinkerServer
from rlvr.serve.service import ServeSettings, Service


def serve(settings: ServeSettings, host: str, port: int, api_key: str | None, threads: int | None) -> None:
    """Serve until interrupted (Ctrl-C stops it; checkpoints already written stay)."""
    if threads:
        torch.set_num_threads(threads)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    settings.root.mkdir(parents=True, exist_ok=True)
    service = Service(settings)
    try:
        server = TinkerServer((host, port), service, api_key)
    except OSError as err:
        if err.errno == errno.EADDRINUSE:
            raise RlvrError(f"rlvr serve: {host}:{port} is in use (pass --port)") from err
        raise
    key = api_key or "tml-local"
    print(f"rlvr serve: {service.path} on {server.url} (checkpoints in {Path(settings.root).resolve()})")
    print(f"  point the Tinker SDK here: TINKER_BASE_URL={server.url} TINKER_API_KEY={key}")
    print(f"  base_model / model_name for clients: {service.path}", flush=True)
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
        service.stop()
