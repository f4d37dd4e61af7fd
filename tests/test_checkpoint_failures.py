"""A checkpoint that cannot be written (disk full, I/O error): one message naming the path and the
space it needs, the previous checkpoint intact, no temporary directory left, the step marked in
metrics.jsonl, exit code 74."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tiny import TINY_RUN

from rlvr.log import read_jsonl
from rlvr.train.loop import checkpoint as ckpt

TESTS = str(Path(__file__).parent)


def _enospc_midway(state, path: Path) -> None:
    """What a full disk does to torch.save: part of the file is written, then ENOSPC."""
    with open(path, "wb") as handle:
        handle.write(b"\0" * 1024)
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


@pytest.fixture(scope="module")
def tiny():
    from rlvr.models import load_model, load_tokenizer

    model = load_model("tiny-random")
    state = {"optimizer": {k: torch.zeros_like(v) for k, v in model.state_dict().items()}}
    return model, load_tokenizer("tiny-random"), state


def _files(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_estimate_bounds_the_written_size(tmp_path, tiny) -> None:
    model, tokenizer, state = tiny
    path = ckpt.save_checkpoint(tmp_path, 1, model, tokenizer, state, {}, keep=2)
    written = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    estimate = ckpt.estimate_checkpoint_bytes(model, state)
    assert written <= estimate <= written * 1.5 + ckpt.OVERHEAD_BYTES, (written, estimate)


@pytest.mark.parametrize("failure", ["writer", "free_space"])
def test_failed_checkpoint_keeps_the_previous_one_and_leaves_nothing(
    tmp_path, tiny, monkeypatch, failure
) -> None:
    model, tokenizer, state = tiny
    first = ckpt.save_checkpoint(tmp_path, 1, model, tokenizer, state, {"n": 1}, keep=1)
    before = _files(first)
    needed = ckpt.estimate_checkpoint_bytes(model, state)
    if failure == "writer":
        monkeypatch.setattr(ckpt, "write_trainer_state", _enospc_midway)
    else:
        usage = shutil.disk_usage(tmp_path)
        monkeypatch.setattr(shutil, "disk_usage", lambda p: usage._replace(free=needed - 1))
    with pytest.raises(ckpt.CheckpointError) as info:
        ckpt.save_checkpoint(tmp_path, 2, model, tokenizer, state, {"n": 2}, keep=1)
    message = str(info.value)
    assert info.value.exit_code == 74
    assert f"cannot write checkpoint {tmp_path / 'step-000002'}" in message
    assert f"it needs about {ckpt.gib(needed)}" in message
    assert f"the previous checkpoint {first} is intact" in message
    assert (
        "No space left on device" if failure == "writer" else f"has {ckpt.gib(needed - 1)} free"
    ) in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000001"]  # no .tmp-*, no step 2
    assert _files(first) == before  # keep=1 did not prune it
    assert ckpt.latest_checkpoint(tmp_path) == first


PATCHED_CLI = """
import errno, os, shutil, sys
from rlvr.train.loop import checkpoint as ckpt

calls = []
failure = sys.argv.pop(1)
real_write, real_usage = ckpt.write_trainer_state, shutil.disk_usage

def write(state, path):
    calls.append(path)
    if len(calls) == 2:  # the second checkpoint fails half-way through its last file
        with open(path, "wb") as handle:
            handle.write(b"0" * 1024)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    real_write(state, path)

def usage(path):
    calls.append(path)
    found = real_usage(path)
    return found._replace(free=1000) if len(calls) == 2 else found

if failure == "writer":
    ckpt.write_trainer_state = write
else:
    shutil.disk_usage = usage
from rlvr.cli import main
sys.argv[0] = "rlvr"
main()
"""


@pytest.mark.parametrize(  # the free-space path is also covered in-process above
    "failure", ["writer", pytest.param("free_space", marks=pytest.mark.slow)]
)
def test_cli_exits_74_naming_the_checkpoint_and_marks_the_step(tmp_path, failure) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")]))}
    args = [*TINY_RUN, f"output_dir={tmp_path}", "name=full", "train.steps=3", "train.save_every=1"]
    result = subprocess.run(
        [sys.executable, "-c", PATCHED_CLI, failure, "train", *args, "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 74, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and result.stderr.count("error:") == 1
    message = " ".join(result.stderr.split())
    checkpoints = tmp_path / "full" / "checkpoints"
    squashed = "".join(result.stderr.split())  # the console wraps the path anywhere
    assert f"error:cannotwritecheckpoint{checkpoints / 'step-000002'}:" in squashed
    assert "it needs about" in message and "is intact" in message
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-000001"]  # no .tmp-*, no step 2
    first = checkpoints / "step-000001"
    assert json.loads((first / "state.json").read_text())["step"] == 1
    torch.load(first / "trainer_state.pt", weights_only=False)  # whole, loadable
    rows = read_jsonl(tmp_path / "full" / "metrics.jsonl")
    assert [(r["phase"], r["step"]) for r in rows] == [
        ("before", 0),
        ("train", 1),
        ("train", 2),
        ("checkpoint_failed", 2),
    ]
    assert "step-000002" in rows[-1]["error"]
