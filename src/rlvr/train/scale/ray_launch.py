"""Trainer ranks as Ray actors: ``rlvr train ... cluster.ray=true cluster.ranks=N``.

Ray places the ranks; torch.distributed still trains them. The driver (the ``rlvr train``
process) joins a Ray cluster (``cluster.address``, or a local one it starts), creates N actors
and gives each torchrun's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``: rank 0's address and a port free there, chosen at run time); each actor then runs
the same :func:`rlvr.train.loop.run.run_training` that ``torchrun`` would start
(:mod:`rlvr.train.scale.distributed`).

With ``rollout.engine=vllm`` (and no ``rollout.vllm.url``) the driver also places one vLLM server
per rank, on the rank's node, and gives the rank its URL (:mod:`rlvr.train.scale.ray_servers`).

A rank that dies (killed, out of memory, its node lost) or raises ends the run: the driver sees
it in :func:`ray.wait`, kills the other actors (which may be blocked in a collective with the dead
one) and raises an error naming the rank, instead of waiting for a collective that never finishes.
A vLLM server (process or actor) that dies ends it the same way, with an error naming its rank.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from rlvr.config import RunConfig
from rlvr.errors import RlvrError
from rlvr.train.scale import ray_servers

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

    def train(
        self, cfg: RunConfig, resume: bool, master: str, port: int, quiet: bool, server_url: str | None = None
    ) -> dict:
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
        if server_url:  # the vLLM server Ray placed beside this rank (build_vllm_engine connects)
            from rlvr.rollout.from_config import PLACED_SERVER_URL

            os.environ[PLACED_SERVER_URL] = server_url
        from rlvr.train.loop.run import run_training

        return run_training(cfg, resume=resume, quiet=quiet)


def _host_address() -> str:
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - outside Ray: this machine
        return "127.0.0.1"


def train_on_ray(cfg: RunConfig, resume: bool, console: Console, quiet: bool) -> dict:
    """Run ``cfg`` on ``cluster.ranks`` Ray actors (and their vLLM servers); rank 0's results
    (held-out metrics)."""
    ray = _require_ray()
    c = cfg.cluster
    placed = ray_servers.places_servers(cfg)
    started = not ray.is_initialized()
    if started:
        options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
        if c.address:
            options["address"] = c.address
        else:  # a local cluster with room for every rank (and server), however many cores there are
            per_rank = c.cpus_per_rank + (c.vllm_cpus if placed else 0)
            options["num_cpus"] = max(os.cpu_count() or 1, c.ranks * per_rank)
        ray.init(**options)
    try:
        if not placed:
            return _run(ray, cfg, resume, console, quiet, groups=[])
        from rlvr.train.loop.run_dir import removed_unless_trained

        # the servers write their logs into the run directory before rank 0 makes it its own: a new
        # run that fails before its first step leaves nothing there (rlvr.train.loop.run_dir), logs included
        run = Path(cfg.output_dir) / cfg.name
        with removed_unless_trained(cfg, resume, lambda: _trained(run)):
            groups = ray_servers.placement_groups(ray, cfg)
            try:
                return _run(ray, cfg, resume, console, quiet, groups)
            finally:
                for group in groups:
                    ray.util.remove_placement_group(group)
    finally:
        if started:
            ray.shutdown()


def _run(ray, cfg: RunConfig, resume: bool, console: Console, quiet: bool, groups: list) -> dict:  # noqa: ANN001
    """Start the ranks (each in bundle 0 of its placement group, if any) and their vLLM servers (in
    bundle 1), train, stop and kill them all."""
    c = cfg.cluster
    gpus = 1 if cfg.model.device.startswith("cuda") else 0
    actor = ray.remote(num_cpus=c.cpus_per_rank, num_gpus=gpus, max_restarts=0)(TrainRank)
    if groups:
        ray_servers.wait_placed(ray, groups, cfg)
        ranks = [
            actor.options(scheduling_strategy=ray_servers.in_bundle(g, 0)).remote(r, c.ranks)
            for r, g in enumerate(groups)
        ]
        server = ray.remote(num_cpus=c.vllm_cpus, num_gpus=gpus, max_restarts=0, max_concurrency=4)(
            ray_servers.VLLMServerActor
        )
        servers = [
            server.options(scheduling_strategy=ray_servers.in_bundle(g, 1)).remote(r)
            for r, g in enumerate(groups)
        ]
    else:
        ranks, servers = [actor.remote(r, c.ranks) for r in range(c.ranks)], []
    try:
        log_dir = str((Path(cfg.output_dir) / cfg.name).resolve())
        starting = [_Job(s.start.remote(cfg, log_dir), r, "server") for r, s in enumerate(servers)]
        places = _gather(
            ray, [_Job(a.where.remote(), r, "rank") for r, a in enumerate(ranks)], c.start_timeout_s, "start"
        )
        for rank, place in enumerate(places):
            console.print(f"rank {rank}: Ray actor pid {place['pid']} on {place['address']}")
        urls: list[str | None] = [None] * c.ranks
        if servers:
            bound = c.start_timeout_s + cfg.rollout.vllm.startup_timeout_s
            for rank, info in enumerate(_gather(ray, starting, bound, "start")):
                console.print(
                    f"rank {rank}: vLLM server pid {info['pid']} at {info['url']} (Ray actor pid "
                    f"{info['actor_pid']} on {info['address']}), log {info['log']}"
                )
                urls[rank] = info["url"]
        master, port = places[0]["address"], places[0]["port"]
        watched = [_Job(s.watch.remote(), r, "server watch") for r, s in enumerate(servers)]
        jobs = [
            _Job(a.train.remote(cfg, resume, master, port, quiet, urls[r]), r, "rank")
            for r, a in enumerate(ranks)
        ]
        return _gather(ray, jobs, None, "train", watched)[0]
    finally:
        try:
            ray_servers.stop_servers(ray, servers)
        finally:
            for a in ranks + servers:
                ray.kill(a, no_restart=True)


def _trained(run: Path) -> bool:
    """Whether rank 0 logged a training step in ``run`` (its metrics.jsonl has a train row)."""
    try:
        lines = (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return False
    for line in lines:
        try:
            if json.loads(line).get("phase") == "train":
                return True
        except ValueError:  # a line cut short by a rank that was killed
            continue
    return False


@dataclass
class _Job:
    """A Ray call the driver waits on: a rank's (``rank``), a server's start (``server``), or a
    server's :meth:`~rlvr.train.scale.ray_servers.VLLMServerActor.watch` (``server watch``: its
    finishing, however, is a failure)."""

    ref: Any
    rank: int
    kind: str


def _gather(ray, jobs: list[_Job], timeout_s: float | None, phase: str, watched: Sequence[_Job] = ()) -> list:  # noqa: ANN001
    """Every result of ``jobs`` (one per rank), or an :class:`RlvrError` naming the first rank or
    server that died or failed (a ``watched`` job that finishes has failed); ``timeout_s`` bounds
    the whole wait (None: no bound)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    by_ref = {job.ref: job for job in [*jobs, *watched]}
    pending = list(by_ref)
    left = {job.ref for job in jobs}
    while left:
        wait = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
        done, pending = ray.wait(pending, num_returns=1, timeout=wait)
        for ref in done:
            job = by_ref[ref]
            if job.kind == "server watch":
                raise _failure(ray, jobs, watched, job, phase) from None
            try:
                ray.get(ref)
            except Exception:  # noqa: BLE001 - reported below with the rank's number
                raise _failure(ray, jobs, watched, job, phase) from None
            left.discard(ref)
        if deadline is not None and time.monotonic() > deadline and left:
            what = "vLLM servers" if jobs[0].kind == "server" else "trainer ranks"
            keys = "cluster.start_timeout_s" + (" + rollout.vllm.startup_timeout_s" if what[0] == "v" else "")
            raise RlvrError(
                f"Ray: {len(left)} of {len(jobs)} {what} did not {phase} within {timeout_s:g} s "
                f"({keys}); is the cluster short of CPUs or GPUs?"
            )
    return ray.get([job.ref for job in jobs])


def _failure(ray, jobs: list[_Job], watched: Sequence[_Job], first: _Job, phase: str) -> RlvrError:  # noqa: ANN001
    """The error to report once ``first`` failed. The cause comes first: a vLLM server that ended
    or failed to start, then a rank whose actor died, then a rank whose vLLM server refused it,
    then any other error (often a survivor's broken connection to a dead peer)."""
    time.sleep(SETTLE_S)  # the others' errors arrive: which rank died, which only lost a peer
    failures = []
    for job in [*jobs, *watched]:
        ready, _ = ray.wait([job.ref], timeout=0)
        if ready or job is first:
            failure = _why(ray, job, phase, len(jobs))
            if failure is not None:
                failures.append(failure)
    failures.sort(key=lambda f: f[:2])
    if failures:
        return RlvrError(failures[0][2])
    return RlvrError(f"Ray: trainer rank {first.rank} of {len(jobs)} failed during {phase}; run stopped")


def _why(ray, job: _Job, phase: str, world: int) -> tuple[int, int, str] | None:  # noqa: ANN001
    """``(precedence, rank, message)`` of a finished ``job`` that failed; None if it succeeded."""
    from rlvr.rollout.vllm_process import VLLMServerError

    server = f"Ray: the vLLM server of rank {job.rank}"
    try:
        ended = ray.get(job.ref, timeout=0)
    except Exception as err:  # noqa: BLE001
        cause = getattr(err, "cause", None)  # RayTaskError keeps the rank's own exception
        cause = cause if isinstance(cause, BaseException) else err
        if isinstance(err, ray.exceptions.RayActorError):
            why = f"its Ray actor died ({_first_line(err)})"
        else:  # e.g. Ray's OutOfMemoryError: the node ran low on memory and Ray killed the worker
            why = f"it raised: {_first_line(cause)}"
        if job.kind == "server":  # did not start: the whole message, with the end of its log
            return 0, job.rank, f"{server} failed to start: {type(cause).__name__}: {cause}\nrun stopped"
        if job.kind == "server watch":
            return 0, job.rank, f"{server} failed during {phase}: {why}; run stopped"
        if isinstance(err, ray.exceptions.RayActorError):
            return 1, job.rank, _rank_failed(job.rank, world, phase, why)
        if isinstance(cause, VLLMServerError):
            got = f"trainer rank {job.rank} got {_first_line(cause)}"
            return 2, job.rank, f"{server} failed during {phase}: {got}; run stopped"
        return 3, job.rank, _rank_failed(job.rank, world, phase, why)
    if job.kind == "server watch":  # the server process ended (it never does before the driver stops it)
        return 0, job.rank, ray_servers.server_died(job.rank, ended, phase)
    return None


def _rank_failed(rank: int, world: int, phase: str, why: str) -> str:
    return f"Ray: trainer rank {rank} of {world} failed during {phase}: {why}; run stopped"


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".strip()
