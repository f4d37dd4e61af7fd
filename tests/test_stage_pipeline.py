"""Pipelines (``stages: [...]``): stages in order in one run directory, each from the previous
stage's weights; ``--resume`` continues inside the stage where the run stopped; the report puts
the stages on one step axis."""

from __future__ import annotations

import json

import pytest
import torch
from tiny import TINY_RUN

from rlvr import api
from rlvr.errors import RlvrError, Stopped
from rlvr.log import read_jsonl
from rlvr.models import load_model
from rlvr.train.loop.orchestrator import Orchestrator
from rlvr.train.stages.pipeline import stage_configs

STAGES = (
    "stages=[{name: first, stage: rl, set: {train.steps: 2}},"
    " {name: second, stage: rl, set: {train.steps: 4, train.save_every: 2, optim.lr: 0.001}}]"
)


def _cfg(tmp_path, name: str = "p", *extra: str):
    return api.load_config(None, [*TINY_RUN, f"output_dir={tmp_path}", f"name={name}", STAGES, *extra])


def _timeless(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "throughput/"))} for r in rows]


@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory) -> tuple:
    """One finished two-stage pipeline, shared by the tests that only read it."""
    out = tmp_path_factory.mktemp("pipeline")
    return out / "p", api.train(_cfg(out), quiet=True)


def test_each_stage_starts_from_the_previous_stage_weights(pipeline_run) -> None:
    run, results = pipeline_run
    manifest = json.loads((run / "pipeline.json").read_text())
    assert [(s["name"], s["status"], s["start_step"], s["steps"]) for s in manifest["stages"]] == [
        ("first", "done", 0, 2),
        ("second", "done", 2, 4),
    ]
    first_model = manifest["stages"][0]["model"]
    second = api.load_config(run / "second" / "config.yaml")
    assert second.model.name == first_model  # the second stage trained from the first's weights
    assert second.optim.lr == 0.001 and second.train.steps == 4  # the stage's own settings
    # the first stage's final weights are what the second stage loaded: its step-0 logprobs of the
    # same tokens equal the first stage's final model's
    base = load_model("tiny-random", "float32", "cpu")
    trained = load_model(first_model, "float32", "cpu")
    assert any(not torch.equal(a, b) for a, b in zip(base.parameters(), trained.parameters()))
    assert set(results["stages"]) == {"first", "second"}
    assert results["run"]["steps"] == 6.0


def test_a_pipeline_killed_in_its_second_stage_resumes_there_with_the_same_metrics(
    pipeline_run, tmp_path, monkeypatch
) -> None:
    save = Orchestrator.save

    def save_then_die(self, model_only: bool = False):
        path = save(self, model_only)
        if self.cfg.name == "second" and self.step == 2:
            raise KeyboardInterrupt  # as a kill after the step-2 checkpoint
        return path

    monkeypatch.setattr(Orchestrator, "save", save_then_die)
    with pytest.raises(Stopped):
        api.train(_cfg(tmp_path, "cut"), quiet=True)
    monkeypatch.setattr(Orchestrator, "save", save)
    first_metrics = (tmp_path / "cut" / "first" / "metrics.jsonl").read_text()
    manifest = json.loads((tmp_path / "cut" / "pipeline.json").read_text())
    assert [s["status"] for s in manifest["stages"]] == ["done", "running"]
    api.train(_cfg(tmp_path, "cut"), resume=True, quiet=True)
    assert (tmp_path / "cut" / "first" / "metrics.jsonl").read_text() == first_metrics  # not rerun
    for stage in ("first", "second"):
        whole = _timeless(read_jsonl(pipeline_run[0] / stage / "metrics.jsonl"))  # uninterrupted
        cut = _timeless(read_jsonl(tmp_path / "cut" / stage / "metrics.jsonl"))
        assert cut == whole, stage


def test_report_shows_the_stages_on_one_step_axis(pipeline_run, tmp_path) -> None:
    from rlvr.report.load import load_run
    from rlvr.report.page import write_report

    run = load_run(pipeline_run[0])
    steps = [(r["stage"], r["step"]) for r in run.train_rows]
    assert steps == [("first (rl)", 1), ("first (rl)", 2)] + [("second (rl)", s) for s in (3, 4, 5, 6)]
    assert run.stages == [("first (rl)", 0), ("second (rl)", 2)]
    page = write_report([pipeline_run[0]], tmp_path / "report.html").read_text()
    assert "first (rl) from step 0 → second (rl) from step 2" in page


def test_stage_references_and_bad_stages_are_errors_naming_the_stage(tmp_path) -> None:
    teacher = "stages=[{name: a, stage: rl}, {name: b, stage: distill, set: {distill.teacher: 'stage:a'}}]"
    cfg = api.load_config(None, [*TINY_RUN, f"output_dir={tmp_path}", teacher])
    _, b = stage_configs(cfg, {"a": "/models/a"})
    assert b.distill.teacher == "/models/a" and b.model.name == "/models/a"
    bad_ref = "stages=[{name: a, stage: rl}, {name: b, stage: rl, set: {model.name: 'stage:z'}}]"
    with pytest.raises(RlvrError, match=r"stages\[1\].set.model.name='stage:z': no earlier stage named 'z'"):
        stage_configs(api.load_config(None, [*TINY_RUN, bad_ref]))
    bad_key = "stages=[{name: a, stage: rl, set: {optim.nope: 1}}]"
    with pytest.raises(RlvrError, match=r"(?s)stages\[0\] \(a\).*optim.nope: unknown key"):
        stage_configs(api.load_config(None, [*TINY_RUN, bad_key]))
    twice = "stages=[{name: a, stage: rl}, {name: a, stage: rl}]"
    with pytest.raises(RlvrError, match="names must differ"):
        stage_configs(api.load_config(None, [*TINY_RUN, twice]))


@pytest.mark.slow  # two more pipelines; --overwrite of one run directory has its fast test
def test_overwrite_deletes_a_pipeline_run_but_not_foreign_files(tmp_path) -> None:
    api.train(_cfg(tmp_path), quiet=True)
    (tmp_path / "p" / "notes.txt").write_text("mine")
    with pytest.raises(RlvrError, match="notes.txt"):
        api.train(_cfg(tmp_path), quiet=True, overwrite=True)
    (tmp_path / "p" / "notes.txt").unlink()
    api.train(_cfg(tmp_path), quiet=True, overwrite=True)
    assert (tmp_path / "p" / "pipeline.json").exists()


def test_a_manifest_pointing_outside_the_run_directory_is_refused(tmp_path) -> None:
    from rlvr.report.load import load_run

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "metrics.jsonl").write_text('{"step": 1, "phase": "train", "reward/mean": 0.5}\n')
    run = tmp_path / "p"
    run.mkdir()
    (run / "config.yaml").write_text("name: p\n")
    stage = {"name": "a", "stage": "rl", "dir": "../elsewhere", "start_step": 0}
    (run / "pipeline.json").write_text(json.dumps({"stages": [stage]}))
    with pytest.raises(RlvrError, match=r"pipeline.json: not a pipeline manifest.*'\.\./elsewhere'"):
        load_run(run)
