"""Metric sinks (``log.tensorboard``, ``log.wandb``): the rows of metrics.jsonl, as scalars there too."""

from __future__ import annotations

import json

import pytest
from tiny import TINY_RUN

from rlvr import api
from rlvr.config import load_config
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl


def _train(tmp_path, *extra: str):
    cfg = load_config(None, [*TINY_RUN, f"output_dir={tmp_path}", "name=run", "train.steps=2", *extra])
    api.train(cfg, quiet=True)
    return tmp_path / "run", read_jsonl(tmp_path / "run" / "metrics.jsonl")


def _by_key(rows: list[dict], key: str) -> list[tuple[int, float]]:
    return [(r["step"], r[key]) for r in rows if isinstance(r.get(key), float)]


def test_tensorboard_gets_every_metric_at_its_step(tmp_path) -> None:
    pytest.importorskip("tensorboard", reason="tensorboard not installed (pip install 'rlvr[tensorboard]')")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run, rows = _train(tmp_path, "log.tensorboard=true")
    events = list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1
    acc = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    logged = {k for r in rows for k, v in r.items() if k != "step" and isinstance(v, (int, float))}
    assert tags == logged
    for key in ("reward/mean", "update/entropy", "eval/accuracy", "train/accuracy"):
        got = [(e.step, e.value) for e in acc.Scalars(key)]
        want = _by_key(rows, key)
        assert [s for s, _ in got] == [s for s, _ in want] and want, key
        assert [v for _, v in got] == pytest.approx([v for _, v in want], rel=1e-6), key
    assert [e.step for e in acc.Scalars("eval/accuracy")] == [0, 2]  # before and after


def test_wandb_offline_writes_its_run_directory(tmp_path) -> None:
    pytest.importorskip("wandb", reason="wandb not installed (pip install 'rlvr[wandb]')")
    run, rows = _train(tmp_path, "log.wandb={project: rlvr-test, mode: offline}")
    files = list((run / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1, list((run / "wandb").rglob("*"))
    # the run file holds history records: each key and each value as JSON text (protobuf strings)
    data = files[0].read_bytes()
    for key in ("reward/mean", "eval/accuracy"):
        for _, value in _by_key(rows, key):
            assert key.encode() in data and json.dumps(value).encode() in data, (key, value)


@pytest.mark.parametrize(
    ("override", "module", "key"),
    [
        ("log.tensorboard=true", "tensorboard", "log.tensorboard"),
        ("log.wandb={project: p}", "wandb", "log.wandb"),
    ],
)
def test_a_missing_package_is_a_config_error(monkeypatch, override, module, key) -> None:
    import importlib.util

    import rlvr.config.extras as extras

    real = importlib.util.find_spec
    absent = lambda name: None if name == module else real(name)  # noqa: E731
    monkeypatch.setattr(extras.importlib.util, "find_spec", absent)
    with pytest.raises(RlvrError) as caught:
        load_config(None, [override])
    message = str(caught.value)
    assert f"{key}:" in message and f"pip install 'rlvr[{module}]'" in message, message
    load_config(None, [])  # the default config needs neither


def test_sinks_are_off_by_default_and_wandb_needs_a_project() -> None:
    cfg = load_config()
    assert cfg.log.tensorboard is False and cfg.log.wandb is None and cfg.log.tokens is True
    with pytest.raises(RlvrError, match="log.wandb.project: Field required"):
        load_config(None, ["log.wandb={mode: offline}"])
    with pytest.raises(RlvrError, match="log.wandb.mode"):
        load_config(None, ["log.wandb={project: p, mode: cloud}"])
