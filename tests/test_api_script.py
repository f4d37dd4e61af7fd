"""The README's Python example runs as a plain script, from any directory, with no main guard."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).parents[1] / "README.md"
SHORT = [  # the README's run, cut to seconds on the tiny random model
    "model.name=tiny-random",
    "model.threads=1",
    "train.steps=1",
    "data.train_size=16",
    "data.eval_size=2",
    "rollout.prompts_per_step=1",
    "rollout.group_size=2",
    "rollout.max_new_tokens=4",
    "rewards.workers=1",
]


def _run_script(tmp_path: Path, code: str) -> subprocess.CompletedProcess:
    script = tmp_path / "example.py"
    script.write_text(code)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300
    )


def test_readme_python_example_runs_as_a_script_from_any_directory(tmp_path) -> None:
    block = re.search(r"## Python API\n\n```python\n(.*?)```", README.read_text(), re.S)
    assert block, "README has no Python API example"
    code = block.group(1)
    assert "__main__" not in code  # as written: no guard
    call = '"name=try"]'
    assert call in code, "the example's overrides changed: update SHORT's insertion point"
    code = code.replace(call, '"name=try", ' + ", ".join(repr(o) for o in SHORT) + "]")
    result = _run_script(tmp_path, code)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "failed to start" not in result.stderr
    assert re.fullmatch(r"\d\.\d+", result.stdout.splitlines()[0])  # results["after"]["eval/accuracy"]
    assert (tmp_path / "runs" / "try" / "checkpoints" / "step-000001").is_dir()
    assert (tmp_path / "groups.jsonl").stat().st_size > 0


SCRIPT_REWARD = """
from rlvr import api
from rlvr.rewards import register_reward


@register_reward("script_len")
def script_len(completion, example):
    return len(completion) / 100


{body}
"""
TRAIN = 'cfg = api.load_config(None, {overrides})\nprint(api.train(cfg, quiet=True)["after"]["eval/size"])\n'


# slow: the default run keeps the README script example (a script run from any directory)
@pytest.mark.slow
def test_script_with_its_own_reward_needs_the_guard_and_says_so(tmp_path) -> None:
    overrides = [*SHORT, "rewards.functions=[{name: script_len}]", "train.final_checkpoint=none"]
    train = TRAIN.format(overrides=overrides)
    unguarded = _run_script(tmp_path, SCRIPT_REWARD.format(body=train))
    assert unguarded.returncode != 0
    message = " ".join(unguarded.stderr.split())
    assert "example.py, line 12: this script defines the reward(s) script_len" in message, message[-2000:]
    assert 'if __name__ == "__main__":' in message
    assert "failed to start" not in message
    guarded = "def main():\n" + "".join(f"    {line}\n" for line in train.splitlines())
    guarded += 'if __name__ == "__main__":\n    main()\n'
    result = _run_script(tmp_path, SCRIPT_REWARD.format(body=guarded).replace("name=grpo", "name=g"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "2.0"  # trained and evaluated with the script's own reward
