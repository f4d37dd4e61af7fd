"""Typed config: defaults, YAML, overrides and errors that name the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.config import dump_config, load_config, parse_override
from rlvr.config.load import recipe_names
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
        ("model.precision=int4", "model.precision: .*'bf16-mixed'"),
        ("model.dtype=bfloat16", "model.dtype='bfloat16' was replaced by model.precision"),
        ("rollout.weights_dtype=fp8", "rollout.weights_dtype: .*'policy'"),
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


# ------------------------------------------------------------------ defaults per data source
GOLDEN = Path(__file__).parent / "golden"


def test_the_default_job_resolves_exactly_as_before() -> None:
    """``tests/golden/default_config.yaml`` is ``rlvr config show`` of the default job from before the
    chain_sum specifics moved out of the schema's field defaults (commit a869543): ``rlvr train``
    with no arguments must keep training exactly that."""
    assert dump_config(load_config()) == (GOLDEN / "default_config.yaml").read_text()


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if (
            isinstance(value, dict)
            and value
            and key not in ("params", "task_config", "settings", *PARAM_KEYS)
        ):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


PARAM_KEYS = ("advantage_params", "loss_params")


def test_every_recipe_resolves_as_before() -> None:
    """``tests/golden/recipe_configs.json``: each recipe's resolved keys that differ from the default
    job, recorded before the change (the recipes train on the default data, so nothing may move)."""
    golden = json.loads((GOLDEN / "recipe_configs.json").read_text())
    base = _flat(load_config().model_dump(mode="json"))
    assert sorted(golden) == recipe_names()
    for name in recipe_names():
        resolved = _flat(load_config(name).model_dump(mode="json"))
        assert {k: v for k, v in resolved.items() if v != base[k]} == golden[name], name


def test_another_task_starts_from_its_own_defaults() -> None:
    cfg = load_config(None, ["data.task=gsm_symbolic"])
    assert cfg.data.task_config == {} and cfg.data.few_shot == []  # the task's own config, zero-shot
    assert [(f.name, f.params) for f in cfg.rewards.functions] == [("reasoning_gym", {"extract": "auto"})]
    assert cfg.eval.group_by == [] and cfg.name == "grpo-gsm-symbolic"
    # the default job's task, named explicitly, is the default job
    assert load_config(None, ["data.task=chain_sum"]) == load_config()


def test_explicit_values_win_over_source_defaults(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "data:\n  task: gsm_symbolic\n  few_shot: [[q, a]]\n  task_config: {difficulty: 0.5}\n"
        "eval:\n  group_by: [answer_sign]\nname: mine\n"
    )
    cfg = load_config(path, ["rewards.functions=[{name: math}]"])
    assert cfg.data.few_shot == [("q", "a")] and cfg.data.task_config == {"difficulty": 0.5}
    assert [f.name for f in cfg.rewards.functions] == ["math"]
    assert cfg.eval.group_by == ["answer_sign"] and cfg.name == "mine"
    # and on the default task: an explicit [] is kept, not refilled with the demonstration
    assert load_config(None, ["data.few_shot=[]"]).data.few_shot == []


@pytest.mark.parametrize(
    ("path", "source", "name"),
    [
        ("problems.jsonl", "file", "grpo-problems"),
        ("d/x.PARQUET", "file", "grpo-x"),
        ("openai/gsm8k", "hf", "grpo-gsm8k"),
    ],
)
def test_a_data_path_alone_is_a_file_or_dataset_with_its_own_defaults(path, source, name, tmp_path) -> None:
    cfg = load_config(None, [f"data.path={path}"])
    assert cfg.data.source == source and cfg.name == name
    assert cfg.data.task is None and cfg.data.task_config == {} and cfg.data.few_shot == []
    assert [(f.name, f.params) for f in cfg.rewards.functions] == [("verifier", {"default": "math"})]
    assert cfg.eval.group_by == []
    dumped = tmp_path / "resolved.yaml"
    dumped.write_text(dump_config(cfg))
    assert load_config(dumped) == cfg  # a run's config.yaml reloads to the same run


def test_an_environment_dataset_is_scored_by_its_environment() -> None:
    cfg = load_config(None, ["data.source=env", "data.task=guess_number"])
    assert cfg.rewards.functions == [] and cfg.data.few_shot == [] and cfg.eval.group_by == []
    assert cfg.name == "grpo-guess-number"


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (
            ["data.source=reasoning_gym", "data.path=x.jsonl"],
            "data.path is set but data.source is reasoning_gym",
        ),
        (["data.path=x.jsonl", "data.task=chain_sum"], "data.task applies to reasoning-gym"),
        (["data.path=x.jsonl", "data.task_config={a: 1}"], "data.task_config applies"),
        (["data.source=env"], "data.source=env needs data.task.*guess_number"),
        (["data.path=x.jsonl", "data.answer_key=null"], "data.answer_key is null.*rewards.functions"),
        (["data.source=file"], "data.path is required when data.source=file"),
    ],
)
def test_settings_a_source_would_ignore_are_refused(overrides, needle) -> None:
    with pytest.raises(RlvrError, match=needle):
        load_config(None, overrides)


def test_the_header_says_what_each_source_trains_on() -> None:
    from rlvr.data.from_config import load_datasets
    from rlvr.train.loop.header import run_header

    small = ["data.train_size=8", "data.eval_size=2"]
    default = load_config(None, small)
    text = run_header(default, load_datasets(default.data))
    assert "reasoning-gym chain_sum {min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 2}" in text
    assert "1 demonstration (data.few_shot)" in text and "Give your final answer inside" in text
    assert "0.25 × closeness = numeric_closeness(extract=answer_tag)" in text and "by operators" in text
    other = load_config(None, [*small, "data.task=basic_arithmetic"])
    text = run_header(other, load_datasets(other.data))
    assert "reasoning-gym basic_arithmetic (the task's default config)" in text
    assert "no demonstrations" in text and "rewards  1 × reasoning_gym(extract=auto)" in text
    assert "closeness" not in text and "operators" not in text and "12 + 5" not in text


# ------------------------------------------------------------------ settings that follow others
def test_the_overlong_penalty_follows_the_generation_limit() -> None:
    assert load_config("dapo").rewards.functions[2].params == {"max_tokens": 24, "buffer": 6}
    longer = load_config("dapo", ["rollout.max_new_tokens=64"])
    assert longer.rewards.functions[2].params == {"max_tokens": 64, "buffer": 6}
    penalty = "rewards.functions=[{name: math}, {name: length_penalty}, {name: cosine_length}]"
    cfg = load_config(None, [penalty, "rollout.max_new_tokens=40"])
    assert [f.params["max_tokens"] for f in cfg.rewards.functions[1:]] == [40, 40]


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (
            [
                "rewards.functions=[{name: overlong, params: {max_tokens: 24, buffer: 6}}]",
                "rollout.max_new_tokens=64",
            ],
            r"rewards.functions\[0\].params.max_tokens=24 disagrees with rollout.max_new_tokens=64",
        ),
        (
            ["rollout.max_new_tokens=4"],  # with dapo: its buffer of 6 cannot fit in 4 tokens
            r"rewards.functions\[2\].params \(overlong\): buffer=6 must not exceed max_tokens=4.*"
            r"rollout.max_new_tokens=4",
        ),
        (
            ["algo.advantage=alp", "algo.advantage_params={max_new_tokens: 100}"],
            r"algo.advantage_params.max_new_tokens=100 disagrees with rollout.max_new_tokens=24",
        ),
    ],
)
def test_disagreeing_dependent_settings_are_refused_naming_both_keys(overrides, needle) -> None:
    recipe = "dapo" if overrides == ["rollout.max_new_tokens=4"] else None
    with pytest.raises(RlvrError, match=needle):
        load_config(recipe, overrides)


def test_passk_needs_k_completions_per_group() -> None:
    from rlvr.train.learn.estimate import check_algorithm

    check_algorithm(load_config("passk", ["rollout.group_size=4"]))  # k=4 of 4: fine
    with pytest.raises(RlvrError, match=r"algo.advantage_params.k=4 exceeds rollout.group_size=2"):
        check_algorithm(load_config("passk", ["rollout.group_size=2"]))
