"""Trainer ranks as Ray actors: ``rlvr train ... cluster.ray=true cluster.ranks=N``.

Ray places the ranks; torch.distributed still trains them. The driver (the ``rlvr train``
process) joins a Ray cluster (``cluster.address``, or a local one it starts), creates N actors
and gives each torchrun's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``: rank 0's address and a port free there, chosen at run time); each actor then runs
the same :func:`rlvr.api.train` that ``torchrun`` would start (:mod:`rlvr.train.distributed`).

A rank that dies (killed, out of memory, its node lost) or raises ends the run: the driver sees
it in :func:`ray.wait`, kills the other actors (which may be blocked in a collective with the dead
one) and raises an error naming the rank, instead of waiting for a collective that never finishes.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from rich.console import Console

from rlvr.config import RunConfig
from rlvr.errors import RlvrError

# how long the driver waits for the other ranks to fail too after a first failure, so that the
# rank that died (the cause) is reported rather than a survivor's broken connection (the effect)
SETTLE_S = 3.0


def _require_ray():  # noqa: ANN202
    try:
        import ray
    except ImportError as err:
        raise RlvrError("cluster.ray=true needs Ray: pip install 'rlvr[ray]' (or pip install ray)") from err
    return ray


class TrainRank:
    """One trainer rank inside a Ray actor (the class Ray's ``remote`` wraps)."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world = rank, world

    def where(self) -> dict[str, Any]:
        """This actor's host address, process id and a TCP port free on its host."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return {"address": _host_address(), "pid": os.getpid(), "port": port}

    def train(self, cfg: RunConfig, resume: bool, master: str, port: int, quiet: bool) -> dict:
        os.environ.update(
            {
                "RANK": str(self.rank),
                "WORLD_SIZE": str(self.world),
                # Ray shows each actor only its own GPU (CUDA_VISIBLE_DEVICES): it is cuda:0 there
                "LOCAL_RANK": "0",
                "MASTER_ADDR": master,
                "MASTER_PORT": str(port),
            }
        )
        from rlvr import api

        return api.train(cfg, resume=resume, quiet=quiet)


def _host_address() -> str:
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - outside Ray: this machine
        return "127.0.0.1"


def train_on_ray(cfg: RunConfig, resume: bool, console: Console, quiet: bool) -> dict:
    """Run ``cfg`` on ``cluster.ranks`` Ray actors; rank 0's results (held-out metrics)."""
    ray = _require_ray()
    c = cfg.cluster
    started = not ray.is_initialized()
    if started:
        options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
        if c.address:
            options["address"] = c.address
        else:  # a local cluster with room for every rank, however many cores there are
            options["num_cpus"] = max(os.cpu_count() or 1, c.ranks * c.cpus_per_rank)
        ray.init(**options)
    gpus = 1 if cfg.model.device.startswith("cuda") else 0
    actor = ray.remote(num_cpus=c.cpus_per_rank, num_gpus=gpus, max_restarts=0)(TrainRank)
    ranks = [actor.remote(r, c.ranks) for r in range(c.ranks)]
    try:
        places = _gather(ray, [a.where.remote() for a in ranks], c.start_timeout_s, "start")
        for rank, place in enumerate(places):
            console.print(f"rank {rank}: Ray actor pid {place['pid']} on {place['address']}")
        master, port = places[0]["address"], places[0]["port"]
        jobs = [a.train.remote(cfg, resume, master, port, quiet) for a in ranks]
        return _gather(ray, jobs, None, "train")[0]
    finally:
        for a in ranks:
            ray.kill(a, no_restart=True)
        if started:
            ray.shutdown()


def _gather(ray, refs: list, timeout_s: float | None, phase: str) -> list:  # noqa: ANN001
    """Every result of ``refs`` (one per rank), or an :class:`RlvrError` naming the first rank that
    died or failed; ``timeout_s`` bounds the whole wait (None: no bound)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    pending = list(refs)
    while pending:
        wait = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
        done, pending = ray.wait(pending, num_returns=1, timeout=wait)
        for ref in done:
            try:
                ray.get(ref)
            except Exception:  # noqa: BLE001 - reported below with the rank's number
                raise _failure(ray, refs, refs.index(ref), phase) from None
        if deadline is not None and time.monotonic() > deadline and pending:
            raise RlvrError(
                f"Ray: {len(pending)} of {len(refs)} trainer ranks did not {phase} within "
                f"{timeout_s:g} s (cluster.start_timeout_s); is the cluster short of CPUs or GPUs?"
            )
    return ray.get(list(refs))


def _failure(ray, refs: list, first: int, phase: str) -> RlvrError:  # noqa: ANN001
    """The error to report once rank ``first`` failed: a rank whose actor died comes first."""
    time.sleep(SETTLE_S)  # the others' errors arrive: which rank died, which only lost a peer
    failures = []
    for rank, ref in enumerate(refs):
        ready, _ = ray.wait([ref], timeout=0)
        if not ready and rank != first:
            continue
        try:
            ray.get(ref, timeout=0)
        except ray.exceptions.RayActorError as err:
            failures.append((0, rank, f"its Ray actor died ({_first_line(err)})"))
        except Exception as err:  # noqa: BLE001
            failures.append((1, rank, f"it raised: {_cause(err)}"))
    failures.sort()
    _, rank, why = failures[0] if failures else (0, first, "it failed")
    return RlvrError(f"Ray: trainer rank {rank} of {len(refs)} failed during {phase}: {why}; run stopped")


def _cause(err: BaseException) -> str:
    cause = getattr(err, "cause", None)  # RayTaskError keeps the rank's own exception
    return _first_line(cause if isinstance(cause, BaseException) else err)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".strip()
