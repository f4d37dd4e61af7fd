"""``rlvr serve`` under torchrun (gloo, 2 ranks): the SDK talks to rank 0, the training is split over
the ranks, and the result is one process's. Marked ``distributed`` (``make test-scale``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

tinker = pytest.importorskip("tinker")

from safetensors.torch import load_file  # noqa: E402
from test_serve import ADVANTAGES, COMPLETIONS, _datums  # noqa: E402
from tinker import types  # noqa: E402

from rlvr.models.loading import load_model  # noqa: E402
from rlvr.serve import ServeSettings, Service  # noqa: E402
from rlvr.serve.checkpoints import resolve  # noqa: E402
from rlvr.serve.http import TinkerServer  # noqa: E402

SRC = Path(__file__).resolve().parents[1] / "src"
SAMPLER = [[-1.0 - 0.1 * i for i in range(len(c))] for c in COMPLETIONS]


def _train(client, path: str) -> tuple[list[torch.Tensor], str]:
    """forward_backward(ppo) on three datums (two ranks: shards of two and one), an AdamW step, a
    second forward_backward + step, save_state: the per-datum logprobs and the state's path."""
    training = client.create_lora_training_client(base_model=path, rank=8).result()
    adam = types.AdamParams(learning_rate=1e-3, beta1=0.9, beta2=0.99, eps=1e-8, grad_clip_norm=1.0)
    logprobs = []
    for _ in range(2):
        out = training.forward_backward(_datums(SAMPLER), "ppo").result()
        logprobs += [o["logprobs"].to_torch() for o in out.loss_fn_outputs]
        training.optim_step(adam).result()
    return logprobs, training.save_state("after").result().path


@pytest.mark.distributed
def test_two_ranks_train_as_one_process(tmp_path, monkeypatch) -> None:
    assert len(ADVANTAGES) == 3
    monkeypatch.setenv("TINKER_API_KEY", "tml-test")
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    # the reference: one process
    service = Service(ServeSettings(model="tiny-random", root=tmp_path / "one", full=True))
    server = TinkerServer(("127.0.0.1", 0), service, poll_seconds=1.0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        expected, saved = _train(tinker.ServiceClient(base_url=server.url), service.path)
        reference = load_file(str(resolve(tmp_path / "one", saved)[1] / "trained.safetensors"))
    finally:
        server.shutdown()
        service.stop()

    # two ranks under torchrun, rank 0 serving on a port the OS picks
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    env.update({"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    cmd += ["-m", "rlvr.cli", "serve", "--model", "tiny-random", "--port", "0", "--full"]
    cmd += ["--threads", "1", "--root", str(tmp_path / "two")]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    lines: list[str] = []
    url = None
    try:
        deadline = time.monotonic() + 180
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            line = proc.stdout.readline()
            lines.append(line)
            if "TINKER_BASE_URL=" in line:
                url = line.split("TINKER_BASE_URL=")[1].split()[0]
        assert url, "".join(lines)[-3000:]
        threading.Thread(target=lambda: [lines.append(x) for x in proc.stdout], daemon=True).start()
        got, saved = _train(tinker.ServiceClient(base_url=url), service.path)
        weights = load_file(str(resolve(tmp_path / "two", saved)[1] / "trained.safetensors"))
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("torchrun's ranks did not stop on SIGINT:\n" + "".join(lines)[-3000:])
    # the per-datum outputs come back in the request's order, and the weights are one process's
    assert len(got) == len(expected) == 6
    for a, b in zip(got, expected, strict=True):
        assert torch.allclose(a, b, atol=1e-5)
    assert set(weights) == set(reference)
    for name, tensor in reference.items():
        assert torch.allclose(weights[name], tensor, atol=1e-6), name
    base = dict(load_model("tiny-random").named_parameters())
    assert sum(not torch.equal(t, base[n]) for n, t in reference.items()) > 10  # the steps moved it
