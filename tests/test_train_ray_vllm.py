"""vLLM servers placed by Ray beside the trainer ranks (``cluster.ray=true rollout.engine=vllm``), on a
local Ray cluster with the bundled SmolLM2-135M: a 2-rank GRPO run samples from its two placed
servers and stops them at the end; a server killed mid-run ends the run with an error naming its
rank, and nothing is left running; a server that cannot start is an error naming it, and the new
run leaves no directory.

Each run starts a Ray cluster and two vLLM servers (about 45 s on one loaded core) before its first
step: the file takes about 4 minutes here (docs/scale.md). It is skipped, saying why, without Ray or
without vLLM's environment (``make vllm``).
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest
from tiny import SMOLLM_RUN
from train_process import finish, start_train

from rlvr.errors import RlvrError

STEPS = 2
RUN = [
    *SMOLLM_RUN,
    "rollout.engine=vllm",
    "rollout.vllm.max_model_len=512",
    "cluster.ray=true",
    "cluster.ranks=2",
    "cluster.vllm_cpus=1",
]
# what the driver prints of each rank's server
SERVER_LINE = r"rank (\d): vLLM server pid (\d+) at (\S+) \(Ray actor pid (\d+) on"


@pytest.fixture
def ray_and_vllm() -> None:
    pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'rlvr[ray]')")
    from rlvr.rollout.vllm_process import find_vllm_python

    try:
        find_vllm_python()
    except RlvrError as err:
        pytest.skip(f"vLLM's environment is absent ({err})")


def _flat(lines: list[str]) -> str:
    """The output with its line breaks undone (rich wraps long lines at 80 columns in a pipe)."""
    return " ".join("".join(lines).split())


def _pids(out: str, pattern: str) -> list[int]:
    return [int(pid) for pid in re.findall(pattern, out)]


def _all_gone(pids: list[int], within_s: float = 30.0) -> list[int]:
    """The ``pids`` still running after ``within_s`` seconds (zombies count as gone)."""
    deadline = time.monotonic() + within_s
    while True:
        alive = [pid for pid in pids if _running(pid)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.5)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_config_refuses_rollout_vllm_gpus_with_ray_placed_servers() -> None:
    from rlvr.config import load_config

    with pytest.raises(RlvrError, match=r"rollout.vllm.gpus with cluster.ray"):
        load_config(None, ["cluster.ray=true", "rollout.engine=vllm", "rollout.vllm.gpus=0,1"])
    # a server of the user's own: Ray places nothing, the GPU setting is theirs
    load_config(
        None,
        ["cluster.ray=true", "rollout.engine=vllm", "rollout.vllm.gpus=0,1", "rollout.vllm.url=http://h:1"],
    )


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.vllm
@pytest.mark.usefixtures("ray_and_vllm")
def test_ranks_sample_from_their_placed_vllm_servers(tmp_path: Path) -> None:
    from rlvr.log import read_jsonl

    began = time.monotonic()
    proc, lines = start_train(tmp_path, *RUN, f"output_dir={tmp_path}", "name=placed", f"train.steps={STEPS}")
    assert finish(proc, lines, 600) == 0, "".join(lines)[-4000:]
    print(f"the run took {time.monotonic() - began:.0f} s")
    out = _flat(lines)
    servers = re.findall(SERVER_LINE, out)
    assert [rank for rank, *_ in servers] == ["0", "1"], out[-4000:]
    assert len({url for *_, url, _ in servers}) == 2  # one server per rank
    run = tmp_path / "placed"
    rows = [r for r in read_jsonl(run / "metrics.jsonl") if r["phase"] == "train"]
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    for row in rows:
        assert row["update/sampler_logprob_diff"] < 1e-3  # vLLM sampled with the trainer's weights
    versions: dict[int, set[int]] = {}
    for record in read_jsonl(run / "trajectories.jsonl"):
        versions.setdefault(record["step"], set()).add(record["policy_version"])
    assert versions == {step: {step - 1} for step in range(1, STEPS + 1)}
    for rank, pid, _url, actor in servers:
        log = (run / f"vllm_server.rank{rank}.log").read_text()
        assert f"--parent-pid {actor}" in log and f"(pid {pid})" in log  # started by its Ray actor
        assert f"weight update to version {STEPS} (shm)" in log  # its rank pushed every update
        assert log.rstrip().endswith("rlvr vLLM server stopped")  # stopped by the driver
    assert not (run / "vllm_server.log").exists()  # no rank started a server of its own
    assert "url: null" in (run / "config.yaml").read_text()  # a --resume places its servers anew
    pids = _pids(out, r"Ray actor pid (\d+)") + [int(pid) for _, pid, *_ in servers]
    assert _all_gone(pids) == []


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.vllm
@pytest.mark.usefixtures("ray_and_vllm")
def test_a_dead_vllm_server_ends_the_run_with_an_error_naming_its_rank(tmp_path: Path) -> None:
    """Rank 1's server process is killed (SIGKILL) after the first step: the driver reports it and
    exits 2 within 120 s, and no rank, server or actor is left running."""
    proc, lines = start_train(tmp_path, *RUN, f"output_dir={tmp_path}", "name=dies", "train.steps=1000")
    metrics = tmp_path / "dies" / "metrics.jsonl"
    deadline = time.monotonic() + 600
    while not (metrics.exists() and metrics.read_text().strip()):
        assert proc.poll() is None, "".join(lines)[-4000:]
        assert time.monotonic() < deadline, "no training step within 600 s:\n" + "".join(lines)[-4000:]
        time.sleep(0.5)
    out = _flat(lines)
    servers = {int(rank): int(pid) for rank, pid, *_ in re.findall(SERVER_LINE, out)}
    os.kill(servers[1], signal.SIGKILL)
    killed = time.monotonic()
    code = finish(proc, lines, 120)
    print(f"the run ended {time.monotonic() - killed:.1f} s after the kill")
    out = _flat(lines)
    assert code == 2, out[-4000:]
    assert f"Ray: the vLLM server of rank 1 (pid {servers[1]}) exited with code -9 during train" in out, out[
        -4000:
    ]
    pids = _pids(out, r"Ray actor pid (\d+)") + list(servers.values())
    assert _all_gone(pids) == []


@pytest.mark.slow
@pytest.mark.distributed
def test_a_server_that_cannot_start_is_an_error_naming_it_and_leaves_no_run(tmp_path: Path) -> None:
    """rlvr's own Python as vLLM's (it has no vllm): both servers exit at their first import; the
    driver names rank 0's with the end of its log, exits 2, and the new run's directory (which
    held only the servers' logs) is gone."""
    import sys

    from tiny import TINY_RUN

    pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'rlvr[ray]')")
    proc, lines = start_train(
        tmp_path,
        *TINY_RUN,
        f"output_dir={tmp_path / 'runs'}",
        "name=nostart",
        "rollout.engine=vllm",
        f"rollout.vllm.python={sys.executable}",
        "cluster.ray=true",
        "cluster.ranks=2",
        "cluster.vllm_cpus=1",
    )
    out = _flat(lines) if finish(proc, lines, 300) == 2 else pytest.fail("".join(lines)[-4000:])
    assert "Ray: the vLLM server of rank 0 failed to start: VLLMServerError: the vLLM server exited" in out
    assert "No module named 'vllm'" in out
    assert not (tmp_path / "runs").exists()
