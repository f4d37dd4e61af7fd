"""vLLM servers placed by Ray beside the trainer ranks: ``cluster.ray=true rollout.engine=vllm``.

Without Ray each rank starts its vLLM server as a child process (:mod:`rlvr.rollout.vllm_process`),
which Ray would not see: it could not reserve the server's CPUs and GPU, place it, or say when it
died. With Ray (and no ``rollout.vllm.url``) the driver places them:

- **One placement group per rank**, two bundles packed on one node (``STRICT_PACK``): the rank's
  (``cluster.cpus_per_rank`` CPUs) and its server's (``cluster.vllm_cpus`` CPUs); each bundle also
  holds one GPU when ``model.device`` is CUDA. The same node is required: the ``shm`` weight
  transfer hands the weights over through a file in ``/dev/shm``, and the server listens on
  loopback only (:meth:`VLLMServer.start`), which its rank reaches because it is on that host.
- **A server actor** (:class:`VLLMServerActor`) starts the server with :meth:`VLLMServer.start`,
  exactly as a rank would (the server exits by itself when the actor's process goes away:
  ``--parent-pid``), with its log in the run directory (``vllm_server.rank<r>.log``), and reports
  its URL and pid. Each rank is then given its server's URL
  (:data:`rlvr.rollout.from_config.PLACED_SERVER_URL`) and pushes its weights at start, as it does
  for ``rollout.vllm.url``.
- **Watched**: :meth:`VLLMServerActor.watch` returns when the server process ends; the driver
  waits on it beside the ranks, so a server (or its actor) that dies mid-run ends the run with an
  error naming it, whether or not a rank was talking to it then. At the end of the run (success,
  error, Ctrl-C) the driver stops every server, then kills the actors.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from rlvr.config import RunConfig
from rlvr.errors import RlvrError
from rlvr.rollout.vllm_process import VLLMServer, find_vllm_python, log_tail

LOG_TAIL_LINES = 12  # of a dead server's log, in the driver's error
STOP_TIMEOUT_S = 60.0  # for every server to stop (its /shutdown, then SIGTERM, then SIGKILL)


def places_servers(cfg: RunConfig) -> bool:
    """Whether the Ray driver places the vLLM servers (rather than nothing: the HF engine, or a
    server of the user's at ``rollout.vllm.url``)."""
    return cfg.cluster.ray and cfg.rollout.engine == "vllm" and not cfg.rollout.vllm.url


class VLLMServerActor:
    """One rank's vLLM server inside a Ray actor (the class Ray's ``remote`` wraps). Threaded
    (``max_concurrency`` > 1): :meth:`stop` runs while :meth:`watch` waits."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.server: VLLMServer | None = None  # once started
        self.process: Any = None  # its subprocess.Popen (the server's close() lets go of it)
        self.stopping = threading.Event()

    def start(self, cfg: RunConfig, log_dir: str) -> dict[str, Any]:
        """Start the server (this node's vLLM environment and model path) and wait until it serves:
        its URL (loopback: the rank is on this node), pid, this node's address and the log's path."""
        import ray

        from rlvr.rollout.from_config import vllm_server_args, weight_transfer_of

        v = cfg.rollout.vllm
        on_gpu = cfg.model.device.startswith("cuda")  # Ray gave this actor its GPU (CUDA_VISIBLE_DEVICES)
        self.server = VLLMServer.start(
            find_vllm_python(v.python),
            vllm_server_args(cfg, weight_transfer_of(cfg, on_gpu), on_gpu),
            Path(log_dir),
            startup_timeout_s=v.startup_timeout_s,
            timeout_s=v.request_timeout_s,
            log_name=f"vllm_server.rank{self.rank}.log",
        )
        self.process = self.server.process
        return {
            "url": self.server.url,
            "pid": self.process.pid,
            "actor_pid": os.getpid(),
            "address": ray.util.get_node_ip_address(),
            "log": str(self.server.log_path),
        }

    def watch(self) -> dict[str, Any]:
        """Wait until the server process ends (or :meth:`stop` is called); how it ended."""
        while self.process.poll() is None and not self.stopping.is_set():
            time.sleep(0.5)
        return {
            "code": self.process.poll(),
            "pid": self.process.pid,
            "log": str(self.server.log_path),
            "tail": log_tail(self.server.log_path, LOG_TAIL_LINES),
        }

    def stop(self) -> None:
        """Stop the server: asked first, then SIGTERM, then SIGKILL (:meth:`VLLMServer.close`)."""
        self.stopping.set()
        if self.server is not None:
            self.server.close()


def placement_groups(ray, cfg: RunConfig) -> list:  # noqa: ANN001
    """One ``STRICT_PACK`` placement group per rank: bundle 0 for the rank, bundle 1 for its server."""
    from ray.util.placement_group import placement_group

    c = cfg.cluster
    gpu = {"GPU": 1} if cfg.model.device.startswith("cuda") else {}
    bundles = [{"CPU": c.cpus_per_rank, **gpu}, {"CPU": c.vllm_cpus, **gpu}]
    return [placement_group(bundles, strategy="STRICT_PACK") for _ in range(c.ranks)]


def wait_placed(ray, groups: list, cfg: RunConfig) -> None:  # noqa: ANN001
    """Wait until every rank's placement group is reserved, or fail naming the resources."""
    c = cfg.cluster
    ready, pending = ray.wait([g.ready() for g in groups], num_returns=len(groups), timeout=c.start_timeout_s)
    if pending:
        gpus = " and 1 GPU each" if cfg.model.device.startswith("cuda") else ""
        raise RlvrError(
            f"Ray: {len(pending)} of {len(groups)} trainer ranks could not be placed with their vLLM "
            f"server within {c.start_timeout_s:g} s (cluster.start_timeout_s): each rank needs "
            f"{c.cpus_per_rank} CPUs (cluster.cpus_per_rank) and its server {c.vllm_cpus} CPUs "
            f"(cluster.vllm_cpus){gpus}, on one node; is the cluster short of them?"
        )


def in_bundle(group, index: int):  # noqa: ANN001, ANN201
    """The scheduling strategy that puts an actor in ``group``'s bundle ``index``."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index)


def server_died(rank: int, ended: dict[str, Any], phase: str) -> str:
    """The driver's message for a server whose process ended during ``phase``."""
    return (
        f"Ray: the vLLM server of rank {rank} (pid {ended['pid']}) exited with code {ended['code']} "
        f"during {phase}; its log ({ended['log']}) ends with:\n{ended['tail']}\nrun stopped"
    )


def stop_servers(ray, servers: list) -> None:  # noqa: ANN001
    """Stop every server (each actor's :meth:`VLLMServerActor.stop`), bounded; the caller then kills
    the actors, which would also end the servers (``--parent-pid``), only less promptly."""
    if not servers:
        return
    # every stop ends (a dead actor's fails at once: its server went with it), or the bound passes
    refs = [s.stop.remote() for s in servers]
    ray.wait(refs, num_returns=len(refs), timeout=STOP_TIMEOUT_S)
