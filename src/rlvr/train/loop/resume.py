"""What ``--resume`` does with a run directory: its saved config, the settings that may change.

A resumed run continues under the config it was started with (``runs/<name>/config.yaml``). Keys
given again with ``--resume`` (as ``key=value`` or in a config file) are compared with it:

* equal values change nothing;
* keys that only say how long to train, how often to log, evaluate or checkpoint, or how fast to
  compute (:data:`SAFE_KEYS`, :data:`SAFE_SECTIONS`) are applied, and the CLI lists them;
* any other change (model, data, algorithm, rewards, seed, learning rate, group size, ...) is
  refused with a message naming the keys: the checkpoint's optimizer, schedule, data order and
  RNG states mean something only under the settings that produced them.

A run whose last record is its final evaluation is *finished*: resuming it does nothing unless
``train.steps`` goes beyond where it ended, or its time limits change (a run stopped by its time
limit continues only when given more time). It continues from its newest resumable checkpoint; a
run that reached ``train.steps`` ends with a model-only checkpoint by default
(``train.final_checkpoint=auto``), so without an earlier periodic one it cannot be extended: the
error says so before anything is written, and how to start a new run from that model. A run
directory without a checkpoint starts over from step 0 with its saved config, and its old logs are
cleared.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlvr.config import RunConfig, load_config, validate
from rlvr.config.load import parse_override, read_yaml
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl

SAFE_KEYS = frozenset(
    {
        "train.steps",
        "train.time_limit_s",
        "train.time_budget_s",
        "train.save_every",
        "train.keep_checkpoints",
        "train.final_checkpoint",
        "train.log_samples",
        "train.log_trajectories",
        "log.every_steps",
        "model.threads",
        "rewards.workers",
        "rewards.timeout_s",
        "rewards.batch_deadline_s",
        "rollout.max_batch_sequences",
        "rollout.packed_weights",
        "rollout.share_prefix",
        "algo.micro_batch_size",
        "algo.packing",
        "env.threads",
    }
)
SAFE_SECTIONS = ("eval.",)  # evaluation never feeds back into training
LENGTH_KEYS = ("train.steps", "train.time_limit_s", "train.time_budget_s")


def is_safe(key: str) -> bool:
    """Whether ``key`` may change when a run resumes."""
    return key in SAFE_KEYS or key.startswith(SAFE_SECTIONS)


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` → ``{"a.b": 1}``; lists and empty dicts are leaves."""
    if not isinstance(tree, dict) or (not tree and prefix):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def config_changes(saved: RunConfig, new: RunConfig) -> dict[str, tuple[Any, Any]]:
    """``{key: (saved value, new value)}`` for every setting that differs."""
    old, now = flatten(saved.model_dump(mode="json")), flatten(new.model_dump(mode="json"))
    return {k: (old.get(k), now.get(k)) for k in dict.fromkeys([*old, *now]) if old.get(k) != now.get(k)}


def _merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for key, value in top.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _merge(out[key], value) if both else value
    return out


def _show(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
    text = text.removesuffix("...").strip()
    return text if len(text) <= 60 else text[:57] + "..."


def describe(changes: dict[str, tuple[Any, Any]]) -> str:
    return ", ".join(f"{key} {_show(old)} → {_show(new)}" for key, (old, new) in changes.items())


def refuse_unsafe(changes: dict[str, tuple[Any, Any]], run: Path) -> None:
    """An error naming every key of ``changes`` that may not change mid-run."""
    unsafe = {k: v for k, v in changes.items() if not is_safe(k)}
    if unsafe:
        allowed = ", ".join([*sorted(SAFE_KEYS), *(f"{s}*" for s in SAFE_SECTIONS)])
        raise RlvrError(
            f"--resume: {run} was trained with other settings; these cannot change mid-run: "
            f"{describe(unsafe)}. Keys that may change on resume: {allowed}. To train with the new "
            "settings, start a new run (name=...)"
        )


def saved_config(run: Path) -> RunConfig:
    """The config a run was started with (its ``config.yaml``, validated again)."""
    path = run / "config.yaml"
    if not path.is_file():
        raise RlvrError(f"--resume: {run} holds no run to resume (no config.yaml); drop --resume to start it")
    return load_config(path)


def resume_config(path: str | None, overrides: list[str]) -> tuple[RunConfig, dict[str, tuple[Any, Any]]]:
    """The config of ``rlvr train [path] [overrides] --resume``: the run's saved config with the
    given keys applied over it, and the settings that changed (all of them safe; an unsafe change
    raises :class:`RlvrError` naming the keys)."""
    located = load_config(path, overrides)  # name and output_dir say which run
    run = Path(located.output_dir) / located.name
    saved = saved_config(run)
    tree = saved.model_dump(mode="json")
    if path:
        tree = _merge(tree, read_yaml(path))
    for item in overrides:
        keys, value = parse_override(item)
        node = tree
        for part in keys[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise RlvrError(f"override '{item}': '{part}' is a value, not a section")
            node = child
        node[keys[-1]] = value
    cfg = validate(tree, source=f"{run / 'config.yaml'} with the given overrides")
    changes = config_changes(saved, cfg)
    refuse_unsafe(changes, run)
    return cfg, changes


@dataclass
class ResumeState:
    """Where a run stands: its last checkpoint's step, whether it ended with its final evaluation."""

    run: Path
    checkpoint: Path | None
    finished_at: int | None  # the step of the final evaluation, when that is the run's last record
    changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    @property
    def has_checkpoint(self) -> bool:
        return self.checkpoint is not None


def resume_state(cfg: RunConfig) -> ResumeState:
    """Check ``cfg`` against the run's saved config (unsafe changes raise) and find where it stands."""
    from rlvr.train.loop.checkpoint import list_checkpoints

    run = Path(cfg.output_dir) / cfg.name
    changes = config_changes(saved_config(run), cfg)
    refuse_unsafe(changes, run)
    rows = read_jsonl(run / "metrics.jsonl") if (run / "metrics.jsonl").is_file() else []
    trained = max((r.get("step", 0) for r in rows if r.get("phase") == "train"), default=0)
    ends = [r.get("step", 0) for r in rows if r.get("phase") == "after"]
    finished_at = max(ends) if ends and max(ends) >= trained else None
    checkpoints = list_checkpoints(run / "checkpoints")
    return ResumeState(run, checkpoints[-1] if checkpoints else None, finished_at, changes)


def nothing_to_do(state: ResumeState, cfg: RunConfig) -> str | None:
    """Why resuming does nothing (a finished run not given more steps or time), or None."""
    if state.finished_at is None:
        return None
    from rlvr.train.loop.checkpoint import latest_checkpoint

    lengthened = [k for k in LENGTH_KEYS if k in state.changes]
    if state.finished_at < cfg.train.steps and lengthened:
        return None
    further = "To train further, resume with a larger train.steps (or new time limits)"
    if state.checkpoint is not None and latest_checkpoint(state.checkpoint.parent) is None:
        further = (
            f"Its checkpoint {state.checkpoint.name} holds the model only (train.final_checkpoint="
            f"{cfg.train.final_checkpoint}): to train further, start a new run from it "
            f"(model.name={state.checkpoint / 'model'} name=NEW_NAME)"
        )
    return (
        f"--resume: {state.run} finished at step {state.finished_at} (train.steps={cfg.train.steps}); "
        f"nothing to do. {further}"
    )


def clear_logs(run: Path) -> None:
    """Remove a run's logs: it starts over from step 0."""
    from rlvr.train.loop.orchestrator import LOGS

    for name in LOGS:
        (run / name).unlink(missing_ok=True)
