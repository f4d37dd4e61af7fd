"""The config documents itself: ``help(RunConfig)`` lists each section's keys with their
descriptions, and ``rlvr config show --doc`` prints each key's description beside its value."""

from __future__ import annotations

import os
import pydoc
import subprocess
import sys

import yaml

from rlvr.config import RunConfig, validate
from rlvr.config.outer import VLLMConfig
from rlvr.config.schema import ModelConfig


def test_help_of_a_config_section_lists_its_fields_with_descriptions() -> None:
    shown = pydoc.render_doc(RunConfig, renderer=pydoc.plaintext)
    assert "output_dir (str, default 'runs'): Parent directory of runs." in " ".join(shown.split())
    assert "model (ModelConfig): the model.* keys; see ModelConfig." in shown
    model = " ".join(pydoc.render_doc(ModelConfig, renderer=pydoc.plaintext).split())
    assert "device (str, default 'cpu'): Torch device for the policy: cpu, cuda, cuda:1" in model
    assert "lora (LoraConfig)" in model
    # a section's own docstring stays first
    assert VLLMConfig.__doc__.startswith("The vLLM engine (``rollout.engine: vllm``)")
    assert "gpu_memory_utilization (float, default 0.3): On GPU:" in VLLMConfig.__doc__


def test_config_show_doc_prints_descriptions_beside_values_as_loadable_yaml(tmp_path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}

    def show(*args: str) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "rlvr.cli", "config", "show", "model.device=cuda:1", *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    documented = show("--doc")
    assert "  device: cuda:1  # Torch device for the policy: cpu, cuda, cuda:1, …" in documented.splitlines()
    assert "  # Reward components, summed with their weights." in documented  # above a block value
    # still the config, comments aside (--doc also lists the stage sections a plain show leaves out)
    assert validate(yaml.safe_load(documented)) == validate(yaml.safe_load(show()))
    assert "sft:" in documented and "sft:" not in show()
