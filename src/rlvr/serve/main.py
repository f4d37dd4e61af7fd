"""``rlvr serve``'s start-up: build the service, bind, print how to point the SDK at it, serve."""

from __future__ import annotations

import errno
import logging
from dataclasses import replace
from pathlib import Path

import torch

from rlvr.errors import RlvrError
from rlvr.serve.http import TinkerServer
from rlvr.serve.replicas import announce, follow
from rlvr.serve.service import ServeSettings, Service


def _distributed() -> int:
    """Under torchrun (``WORLD_SIZE`` > 1): join the process group (gloo: the server trains on the
    CPU) and return this rank; else 0."""
    import os

    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        dist.init_process_group("gloo")
    return dist.get_rank() if dist.is_initialized() else 0


def serve(settings: ServeSettings, host: str, port: int, api_key: str | None, threads: int | None) -> None:
    """Serve until interrupted (Ctrl-C stops it; checkpoints already written stay). Under torchrun,
    rank 0 serves and the other ranks follow it (:mod:`rlvr.serve.replicas`)."""
    if threads:
        torch.set_num_threads(threads)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    settings.root.mkdir(parents=True, exist_ok=True)
    if _distributed() > 0:
        follower = Service(replace(settings, engine="hf"))  # followers train; rank 0 alone samples
        try:
            follow(follower)
        finally:
            follower.stop()
        return
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
        service.worker.join(timeout=60)  # the operation in flight ends on every rank
        announce("stop")
