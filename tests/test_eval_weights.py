"""``eval.weights``: a run that samples from a bf16 copy evaluates the copy and the fp32 master
weights both (``auto``), and says which number is which; ``master`` evaluates the master alone."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tiny import TINY_RUN

from rlvr.config import load_config
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl
from rlvr.log.progress import eval_line
from rlvr.train.loop.engine_sync import eval_weights
from rlvr.train.loop.orchestrator import Orchestrator

TINY = [*TINY_RUN, "name=run", "train.steps=1", "train.final_checkpoint=none", "optim.warmup_steps=0"]


def _run(tmp_path: Path, *extra: str) -> tuple[list[torch.dtype], list[dict]]:
    """Train one step; the dtype of the weights each evaluation generated with, and the eval rows."""
    run = Orchestrator(load_config(None, [*TINY, f"output_dir={tmp_path}", *extra]), quiet=True)
    seen: list[torch.dtype] = []
    evaluate = run.collector.evaluate

    def spy(label, console=None, quiet=False, engine=None):  # noqa: ANN001, ANN202
        used = engine if engine is not None else run.collector.engine
        seen.append(next(used.model.parameters()).dtype)
        if engine is not None:
            assert used.model is run.learner.model  # the learner's own module: the master weights
        return evaluate(label, console, quiet, engine)

    run.collector.evaluate = spy
    try:
        run.fit()
    finally:
        run.close()
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    return seen, [r for r in rows if r.get("phase") in ("before", "after")]


def test_a_bf16_copy_run_evaluates_the_copy_and_the_master(tmp_path: Path) -> None:
    seen, rows = _run(tmp_path, "model.precision=bf16-mixed")
    assert seen == [torch.bfloat16, torch.float32] * 2  # before and after: the copy, then the master
    assert [r["phase"] for r in rows] == ["before", "after"]
    for row in rows:
        assert row["eval/size"] == row["eval_master/size"] == 8
        assert "eval_master/accuracy" in row and "eval_master/mean_length" in row


def test_master_alone_and_fp32_runs_evaluate_once(tmp_path: Path) -> None:
    seen, rows = _run(tmp_path / "master", "model.precision=bf16-mixed", "eval.weights=master")
    assert seen == [torch.float32] * 2
    assert all("eval/accuracy" in r and not any(k.startswith("eval_master/") for k in r) for r in rows)
    seen, rows = _run(tmp_path / "fp32")  # the engine samples from the policy itself: nothing to compare
    assert seen == [torch.float32] * 2
    assert not any(k.startswith("eval_master/") for r in rows for k in r)


def test_master_before_training_equals_sampling_from_the_policy(tmp_path: Path) -> None:
    """Before any update the master weights are the fp32 model: their evaluation is what a run that
    samples from the policy itself (``rollout.weights_dtype=policy``) measures."""
    _, both = _run(tmp_path / "both", "model.precision=bf16-mixed")
    _, policy = _run(tmp_path / "policy", "model.precision=bf16-mixed", "rollout.weights_dtype=policy")
    prefix = "eval_master/"
    master = {k.replace(prefix, "eval/"): v for k, v in both[0].items() if k.startswith(prefix)}
    assert master == {k: v for k, v in policy[0].items() if k.startswith("eval/")}


def test_resolution_and_the_fsdp_refusal() -> None:
    def cfg(*extra: str):  # noqa: ANN202
        return load_config(None, [*TINY, *extra])

    assert eval_weights(cfg(), fsdp=False) == "sampler"
    assert eval_weights(cfg("model.precision=bf16-mixed"), fsdp=False) == "both"
    assert eval_weights(cfg("model.precision=bf16-mixed", "rollout.weights_dtype=policy"), False) == "sampler"
    assert eval_weights(cfg("model.precision=bf16-mixed"), fsdp=True) == "sampler"
    assert eval_weights(cfg("eval.weights=both"), fsdp=False) == "both"
    with pytest.raises(RlvrError, match="eval.weights=master: under FSDP2"):
        eval_weights(cfg("eval.weights=master"), fsdp=True)


def test_the_eval_line_says_which_weights_each_number_is() -> None:
    line = eval_line("after", 3, {"eval/accuracy": 0.5, "eval/size": 8, "eval_master/accuracy": 0.625})
    assert line == (
        "eval (after) at step 3: accuracy 50.0% (n=8) with the sampler's weights; "
        "62.5% with the master weights"
    )
    assert eval_line("after", 3, {"eval/accuracy": 0.5, "eval/size": 8}).endswith("(n=8)")
