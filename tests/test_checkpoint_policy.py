"""Which checkpoints a run keeps and which one ``rlvr eval --model RUN`` takes: periodic checkpoints
keep the optimizer, the end of a finished run saves the model alone (a run stopped early keeps
everything resume needs), ``train.keep_checkpoints`` never deletes the newest resumable one, and
``rlvr train --overwrite`` replaces a finished run (only a run directory, never through a link)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch
from rich.console import Console
from test_cli_resume import rlvr
from tiny import TINY_RUN

from rlvr import api
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl
from rlvr.train.loop import checkpoint as ckpt
from rlvr.train.loop.run_dir import replace_run_dir

QUICK = [*TINY_RUN, "data.eval_size=4", "eval.before=false"]


def _train(tmp_path: Path, *extra: str) -> Path:
    cfg = api.load_config(None, [*QUICK, f"output_dir={tmp_path}", *extra])
    api.train(cfg, quiet=True)
    return tmp_path / cfg.name


def _kinds(run: Path) -> dict[str, bool]:
    """``{checkpoint name: resumable}``."""
    return {p.name: ckpt.is_resumable(p) for p in ckpt.list_checkpoints(run / "checkpoints")}


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    """3 steps, a periodic checkpoint at step 2, the default final checkpoint at step 3."""
    return _train(tmp_path_factory.mktemp("mixed"), "name=mixed", "train.steps=3", "train.save_every=2")


def test_periodic_checkpoints_are_full_and_a_finished_run_ends_model_only(mixed) -> None:
    assert _kinds(mixed) == {"step-000002": True, "step-000003": False}
    final = mixed / "checkpoints" / "step-000003"
    assert json.loads((final / "state.json").read_text())["resumable"] is False
    assert (final / "model" / "config.json").is_file()


def test_eval_of_a_run_takes_its_newest_checkpoint_and_says_which(mixed) -> None:
    model, config = api.resolve_run(str(mixed))
    newest = mixed / "checkpoints" / "step-000003" / "model"
    assert model == str(newest)  # not the older full step-000002
    assert config == str(mixed / "config.yaml")
    cfg = api.load_config(config, [f"model.name={model}"])
    out = io.StringIO()
    api.evaluate_model(cfg, console=Console(file=out, width=400), quiet=True)
    assert f"evaluating {newest} (model-only, step 3) on 4 held-out problems" in out.getvalue()


def test_a_run_stopped_by_its_time_limit_ends_resumable(tmp_path) -> None:
    run = _train(tmp_path, "name=cut", "train.steps=5", "train.time_limit_s=0.001")
    assert _kinds(run) == {"step-000001": True}  # --resume with more time continues it


def test_resume_of_a_finished_run_with_the_model_alone_says_what_to_do(tmp_path) -> None:
    run = _train(tmp_path, "name=done", "train.steps=1")
    assert _kinds(run) == {"step-000001": False}
    config, metrics = (run / "config.yaml").read_text(), (run / "metrics.jsonl").read_text()
    out = io.StringIO()
    same = api.load_config(run / "config.yaml")
    assert api.train(same, resume=True, console=Console(file=out, width=400), quiet=True) == {}
    said = out.getvalue()
    assert "finished at step 1 (train.steps=1); nothing to do" in said
    assert "holds the model only (train.final_checkpoint=auto): to train further, start a new run" in said
    assert f"model.name={run / 'checkpoints' / 'step-000001' / 'model'}" in said
    longer = api.load_config(run / "config.yaml", ["train.steps=2"])
    with pytest.raises(RlvrError, match="no resumable checkpoint: step-000001 holds the model only"):
        api.train(longer, resume=True, quiet=True)
    # refused before anything was written: the run is as it was
    assert (run / "config.yaml").read_text() == config and (run / "metrics.jsonl").read_text() == metrics


@pytest.fixture(scope="module")
def tiny():
    from rlvr.models import load_model, load_tokenizer

    model = load_model("tiny-random")
    state = {"optimizer": {k: torch.zeros_like(v) for k, v in model.state_dict().items()}}
    return model, load_tokenizer("tiny-random"), state


def test_keep_checkpoints_keeps_the_newest_and_the_newest_resumable_one(tmp_path, tiny) -> None:
    model, tokenizer, state = tiny
    for step, full in ((1, True), (2, True), (3, False)):
        ckpt.save_checkpoint(tmp_path, step, model, tokenizer, state if full else None, {}, keep=1)
    # keep=1: step 3 (model-only) and step 2, which --resume continues from
    assert {p.name: ckpt.is_resumable(p) for p in ckpt.list_checkpoints(tmp_path)} == {
        "step-000002": True,
        "step-000003": False,
    }
    assert ckpt.resume_point(tmp_path) == tmp_path / "step-000002"
    # an interrupted deletion leaves a renamed directory: never taken for a checkpoint, removed next time
    leftover = tmp_path / ".old-step-000002-1"
    (leftover / "model").mkdir(parents=True)
    (leftover / "state.json").write_text("{}")
    assert ckpt.newest_checkpoint(tmp_path) == tmp_path / "step-000003"
    ckpt.save_checkpoint(tmp_path, 4, model, tokenizer, state, {}, keep=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000004"]
    ckpt.save_checkpoint(tmp_path, 5, model, tokenizer, None, {}, keep=None)  # None: keep all
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step-000004", "step-000005"]
    assert api.load_config(None, ["train.keep_checkpoints=null"]).train.keep_checkpoints is None


# ------------------------------------------------------------------------------- --overwrite
# the CLI in a child process, as test_cli_resume runs it
def test_overwrite_replaces_a_finished_run_and_the_refusal_names_it(tmp_path) -> None:
    run = _train(tmp_path, "name=again", "train.steps=2")
    overrides = [*QUICK, f"output_dir={tmp_path}", "name=again", "train.steps=1"]
    with pytest.raises(RlvrError, match="already holds a run; pass --resume to continue it, --overwrite to"):
        api.train(api.load_config(None, overrides), quiet=True)
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl") if r["phase"] == "train"] == [1, 2]
    again = rlvr("train", *overrides, "--quiet", "--overwrite", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "--overwrite: deleted the earlier run" in again.stderr
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl") if r["phase"] == "train"] == [1]
    assert _kinds(run) == {"step-000001": False}  # the old run's step 2 is gone
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # nothing set aside


def _fake_run(path: Path) -> Path:
    (path / "checkpoints" / "step-000001").mkdir(parents=True)
    (path / "config.yaml").write_text("name: x\n")
    (path / "metrics.jsonl").write_text("{}\n")
    return path


def test_overwrite_deletes_only_run_directories_and_never_through_a_link(tmp_path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    real = _fake_run(tmp_path / "real")
    link = tmp_path / "runs" / "link"
    link.parent.mkdir()
    link.symlink_to(real, target_is_directory=True)
    with pytest.raises(RlvrError, match="is a symbolic link"):
        replace_run_dir(link)
    assert (real / "metrics.jsonl").is_file() and link.is_symlink()
    # a link inside a run directory is removed, not followed
    (real / "checkpoints" / "elsewhere").symlink_to(outside, target_is_directory=True)
    assert replace_run_dir(real) and not real.exists()
    assert (outside / "precious.txt").read_text() == "keep me"
    assert not replace_run_dir(tmp_path / "absent")
    with pytest.raises(RlvrError, match="is not an rlvr run directory"):
        replace_run_dir(outside)
    mine = _fake_run(tmp_path / "mine")
    (mine / "notes.md").write_text("my notes")
    with pytest.raises(RlvrError, match=r"holds files rlvr did not write \(notes.md\)"):
        replace_run_dir(mine)
    assert (mine / "notes.md").is_file() and (mine / "metrics.jsonl").is_file()
    cfg = api.load_config(None, [*QUICK, f"output_dir={tmp_path}", "name=mine"])
    with pytest.raises(RlvrError, match="--overwrite deletes the run that --resume would continue"):
        api.train(cfg, resume=True, overwrite=True, quiet=True)
    assert (mine / "metrics.jsonl").is_file()


def test_every_log_the_loop_writes_is_one_overwrite_may_delete() -> None:
    """A log added to the loop but not to ``RUN_FILES`` makes ``--overwrite`` refuse every finished
    run (it holds "files rlvr did not write")."""
    from rlvr.train.loop.orchestrator import LOGS
    from rlvr.train.loop.run_dir import RUN_FILES

    assert set(LOGS) <= RUN_FILES
