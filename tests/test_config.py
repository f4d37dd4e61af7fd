"""Typed config: defaults, YAML, overrides and errors that name the key."""

from __future__ import annotations

import pytest

from rlvr.config import dump_config, load_config, parse_override
from rlvr.errors import RlvrError


def test_defaults_are_the_demo_job() -> None:
    cfg = load_config()
    assert cfg.model.name == "smollm2-135m-instruct"
    assert cfg.data.task == "chain_sum" and cfg.algo.advantage == "grpo"
    assert cfg.algo.kl_coef == 0.0


def test_yaml_then_overrides(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("optim:\n  lr: 0.001\nrollout:\n  group_size: 4\n")
    cfg = load_config(path, ["rollout.group_size=6", "data.task_config={min_terms: 3}"])
    assert cfg.optim.lr == 0.001 and cfg.rollout.group_size == 6
    assert cfg.data.task_config == {"min_terms": 3}


def test_override_values_are_parsed_as_yaml() -> None:
    assert parse_override("a.b=1e-5") == (["a", "b"], 1e-5)
    assert parse_override("x=[1, 2]") == (["x"], [1, 2])
    assert parse_override("x=null") == (["x"], None)


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("algo.klcoef=0.1", "algo.klcoef: unknown key; allowed: .*kl_coef"),
        ("algo.loss_agg=mean", "algo.loss_agg: .*'token-mean'"),
        ("rollout.group_size=0", "rollout.group_size"),
        ("model.dtype=int4", "model.dtype: .*'float32'"),
        ("nonsense=1", "nonsense: unknown key"),
        ("algo", "key=value"),
    ],
)
def test_bad_values_name_the_key(override: str, needle: str) -> None:
    with pytest.raises(RlvrError, match=needle):
        load_config(None, [override])


def test_bad_yaml_file_errors(tmp_path) -> None:
    with pytest.raises(RlvrError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(RlvrError, match="not valid YAML"):
        load_config(bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(RlvrError, match="mapping"):
        load_config(listy)


def test_dump_round_trips(tmp_path) -> None:
    cfg = load_config(None, ["optim.lr=0.5", "name=x"])
    path = tmp_path / "dump.yaml"
    path.write_text(dump_config(cfg))
    assert load_config(path) == cfg


def test_pass_k_larger_than_samples_is_rejected() -> None:
    with pytest.raises(RlvrError, match="pass_k"):
        load_config(None, ["eval.samples=4", "eval.pass_k=[8]"])
