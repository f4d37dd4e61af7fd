"""A vLLM server that fails to start: the log its message points at still exists afterwards."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rlvr.config import load_config
from rlvr.rollout.vllm_process import VLLMServer, VLLMServerError
from rlvr.train.loop.run_dir import prepare_run_dir, removed_unless_trained


def test_the_log_a_failed_start_names_is_kept_with_the_run_directory(tmp_path: Path) -> None:
    fake = tmp_path / "python"  # a "vLLM" that dies at start, as one without a GPU or memory does
    fake.write_text("#!/bin/sh\necho 'RuntimeError: CUDA out of memory (fake vLLM)' >&2\nexit 1\n")
    fake.chmod(0o755)
    cfg = load_config(None, [f"output_dir={tmp_path / 'runs'}", "name=fails"])
    with pytest.raises(VLLMServerError) as info:
        with removed_unless_trained(cfg, resume=False, trained=lambda: False):
            run = prepare_run_dir(cfg, resume=False)  # what the trainer makes before its engine
            VLLMServer.start(fake, [], log_dir=run, startup_timeout_s=30)
    message = str(info.value)
    [named] = re.findall(r"its log \((\S+)\)", message)
    assert "CUDA out of memory (fake vLLM)" in message
    assert Path(named).is_file() and "CUDA out of memory" in Path(named).read_text()
    # nothing else of the failed run is left: no config.yaml that would look like a run
    assert sorted(p.name for p in (tmp_path / "runs" / "fails").iterdir()) == ["vllm_server.log"]


def test_a_failure_naming_no_log_still_leaves_nothing(tmp_path: Path) -> None:
    cfg = load_config(None, [f"output_dir={tmp_path / 'runs'}", "name=fails"])
    with pytest.raises(RuntimeError):
        with removed_unless_trained(cfg, resume=False, trained=lambda: False):
            run = prepare_run_dir(cfg, resume=False)
            (run / "vllm_server.log").write_text("started\n")
            raise RuntimeError("the reward cannot score this data")
    assert not (tmp_path / "runs").exists()
