"""Pipelines: several stages in order in one run directory (``stages: [...]`` in a config).

A pipeline's run directory holds its ``config.yaml`` (with ``stages``), ``pipeline.json`` (each
stage's kind, sub-directory, status and the step it starts at on the pipeline's axis) and one
sub-directory per stage, each an ordinary run directory (metrics, samples, checkpoints, report).
Stage *i* trains from stage *i−1*'s final weights (its newest checkpoint's ``model``), unless its
``set`` names ``model.name``; a value ``"stage:NAME"`` anywhere in ``set`` (inside lists and
mappings too) is replaced by that earlier stage's final model directory (e.g.
``distill.teacher: stage:grpo`` distils an RL-trained stage into the base model). A reward-model
stage (``rm``) trains a classifier, not the policy: the stage after it starts from the last policy
stage's weights (or the base model), and names the reward model as ``stage:NAME`` in a reward's
``params.path``.

``--resume`` skips finished stages (their results are read back from ``pipeline.json``) and
continues the stage that was running from its own last checkpoint, exactly as a single run
resumes; a stage that never started starts fresh.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from rlvr.config import RunConfig, dump_config, parse_override, validate
from rlvr.config.load import _set
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl
from rlvr.safe_parse import loads_json

MANIFEST = "pipeline.json"
STAGE_REF = "stage:"


def stage_configs(cfg: RunConfig, models: dict[str, str] | None = None) -> list[RunConfig]:
    """Each stage's own config: the pipeline's config without ``stages``, the stage's kind and
    ``set`` applied, writing to ``output_dir/name/<stage name>``. ``models`` maps finished
    stages to their final model directories (for ``stage:NAME`` values and the next stage's start)."""
    models = models or {}
    names = [s.name for s in cfg.stages]
    if len(set(names)) < len(names):
        raise RlvrError(f"stages: names must differ (got {', '.join(names)})")
    base = cfg.model_dump(mode="json")
    base["stages"] = []
    run_dir = Path(cfg.output_dir) / cfg.name
    out: list[RunConfig] = []
    previous: str | None = None
    for i, item in enumerate(cfg.stages):
        if not item.name.replace("-", "").replace("_", "").isalnum():
            raise RlvrError(f"stages[{i}].name={item.name!r}: letters, digits, - and _ only (a directory)")
        tree = copy.deepcopy(base)
        tree.update(stage=item.stage, output_dir=str(run_dir), name=item.name)
        explicit = set(item.set)
        for key, value in item.set.items():
            value = _stage_refs(value, names[:i], models, f"stages[{i}].set.{key}")
            keys, _ = parse_override(f"{key}=0")  # the dotted path, checked as an override's
            _set(tree, keys, value, f"stages[{i}].set.{key}")
        if previous is not None and "model.name" not in explicit:
            tree["model"]["name"] = models.get(previous, f"<final model of stage {previous}>")
        sub = validate(tree, source=f"stages[{i}] ({item.name})")
        if i < len(cfg.stages) - 1 and sub.train.final_checkpoint == "none":
            raise RlvrError(
                f"stages[{i}] ({item.name}): train.final_checkpoint=none leaves the next stage no weights "
                "to start from; leave it out (auto)"
            )
        if sub.model.lora.r and i < len(cfg.stages) - 1:
            raise RlvrError(
                f"stages[{i}] ({item.name}): a LoRA stage followed by another is not supported yet (its "
                "checkpoint holds adapters, not a model the next stage can load); set model.lora.r=0"
            )
        out.append(sub)
        if item.stage != "rm":  # a reward model is no policy: the next stage goes on from the last one
            previous = item.name
    return out


def _stage_refs(value: Any, earlier: list[str], models: dict[str, str], where: str) -> Any:
    """``value`` with every string ``"stage:NAME"`` in it (also inside lists and mappings, e.g. a
    reward's ``params.path``) replaced by that earlier stage's final model directory."""
    if isinstance(value, list):
        return [_stage_refs(v, earlier, models, f"{where}[{n}]") for n, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: _stage_refs(v, earlier, models, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, str) and value.startswith(STAGE_REF):
        ref = value[len(STAGE_REF) :]
        if ref not in earlier:
            raise RlvrError(
                f"{where}={value!r}: no earlier stage named {ref!r} (earlier: {', '.join(earlier) or 'none'})"
            )
        return models.get(ref, f"<final model of stage {ref}>")
    return value


def final_model(stage_dir: Path) -> str:
    """The model directory a finished stage hands on: its newest checkpoint's ``model``."""
    from rlvr.train.loop.checkpoint import newest_checkpoint

    newest = newest_checkpoint(stage_dir / "checkpoints")
    if newest is None or not (newest / "model").is_dir():
        raise RlvrError(f"{stage_dir}: the stage finished without a checkpoint to start the next stage from")
    return str(newest / "model")


def _read_manifest(run_dir: Path) -> dict[str, Any]:
    """``pipeline.json``, checked: each stage's ``dir`` must be a plain name inside the run directory
    (a hand-edited or foreign manifest never points the report or a resume elsewhere)."""
    path = run_dir / MANIFEST
    if not path.exists():
        return {"stages": []}
    try:
        manifest = loads_json(path.read_text(encoding="utf-8"), str(path))
        stages = manifest["stages"]
        for stage in stages:
            if (
                not isinstance(stage["dir"], str)
                or Path(stage["dir"]).name != stage["dir"]
                or stage["dir"] in ("", ".", "..")
            ):
                raise ValueError(f"stage dir {stage['dir']!r} is not a name inside the run directory")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        raise RlvrError(f"{path}: not a pipeline manifest rlvr wrote ({err})") from err
    return manifest


def _write_manifest(run_dir: Path, manifest: dict[str, Any]) -> None:
    tmp = run_dir / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    tmp.replace(run_dir / MANIFEST)


def _steps_done(stage_dir: Path) -> int:
    """The last training step in a stage's metrics.jsonl (its length on the pipeline's axis)."""
    rows = read_jsonl(stage_dir / "metrics.jsonl")
    return max((int(r.get("step", 0)) for r in rows if r.get("phase", "train") == "train"), default=0)


def run_pipeline(cfg: RunConfig, resume: bool, console: Console, quiet: bool) -> dict[str, Any]:
    """Run ``cfg.stages`` in order (see the module docstring); returns the last stage's results
    with ``stages`` (each stage's) and ``run`` (steps and updates summed)."""
    from rlvr.train.loop.run import run_training

    stage_configs(cfg)  # every stage's config is checked before anything runs
    run_dir = Path(cfg.output_dir) / cfg.name
    if not resume and run_dir.exists() and any(run_dir.iterdir()):
        raise RlvrError(
            f"run directory {run_dir} already holds a run; pass --resume to continue it, --overwrite to "
            "delete it and train again from scratch, or choose another name (name=...)"
        )
    if resume and not (run_dir / "config.yaml").exists():
        raise RlvrError(f"--resume: {run_dir} holds no pipeline to resume (no config.yaml)")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(dump_config(cfg))
    manifest = _read_manifest(run_dir)
    done = {s["name"]: s for s in manifest["stages"] if s.get("status") == "done"}
    models: dict[str, str] = {name: s["model"] for name, s in done.items()}
    results: dict[str, Any] = {"stages": {}}
    offset = 0
    for i, item in enumerate(cfg.stages):
        sub = stage_configs(cfg, models)[i]
        stage_dir = run_dir / item.name
        entry = {"name": item.name, "stage": item.stage, "dir": item.name, "start_step": offset}
        if item.name in done:
            results["stages"][item.name] = done[item.name].get("results", {})
            offset += int(done[item.name].get("steps", 0))
            continue
        if not quiet:
            console.print(
                f"stage {i + 1} of {len(cfg.stages)}: {item.name} ({item.stage}) from {sub.model.name}",
                highlight=False,
            )
        started = (stage_dir / "config.yaml").exists()
        if started and item.stage == "rm":  # an interrupted reward model is trained again from the start
            from rlvr.train.loop.run_dir import replace_run_dir

            replace_run_dir(stage_dir)
            started = False
        manifest["stages"] = [s for s in manifest["stages"] if s["name"] != item.name]
        manifest["stages"].append({**entry, "status": "running"})
        _write_manifest(run_dir, manifest)
        stage_results = run_training(sub, resume=resume and started, console=console, quiet=quiet)
        if not stage_results and started:  # a finished stage whose manifest entry was not written
            stage_results = {}
        steps = _steps_done(stage_dir)
        models[item.name] = final_model(stage_dir)
        manifest["stages"][-1] = {
            **entry,
            "status": "done",
            "steps": steps,
            "model": models[item.name],
            "results": stage_results,
        }
        _write_manifest(run_dir, manifest)
        results["stages"][item.name] = stage_results
        offset += steps
    last = results["stages"][cfg.stages[-1].name]
    first = results["stages"][cfg.stages[0].name]
    runs = [r.get("run", {}) for r in results["stages"].values()]
    summed = {k: sum(float(r.get(k, 0.0)) for r in runs) for k in {k for r in runs for k in r}}
    return {**last, "before": first.get("before", {}), "run": summed, "stages": results["stages"]}


def is_pipeline_dir(path: Path) -> bool:
    """Whether ``path`` is a pipeline's run directory (it holds ``pipeline.json``)."""
    return (path / MANIFEST).is_file()


def pipeline_stage_dirs(path: Path) -> list[tuple[str, str, Path, int]]:
    """``(name, kind, directory, start_step)`` of each stage that has started, in order."""
    manifest = _read_manifest(path)
    return [
        (s["name"], s["stage"], path / s["dir"], int(s.get("start_step", 0)))
        for s in manifest["stages"]
        if (path / s["dir"] / "metrics.jsonl").exists()
    ]
