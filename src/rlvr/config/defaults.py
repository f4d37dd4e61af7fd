"""Defaults that depend on where the data comes from, resolved after the YAML file and overrides.

The default job (reasoning-gym ``chain_sum`` with the bundled model) was tuned with settings that
only make sense for that task: a worked arithmetic demonstration in the prompt, a reward for how
close a *number* is, accuracy per arithmetic operator, 24 new tokens, and time limits that end the
demo within 10 minutes (``train.time_limit_s`` / ``time_budget_s``). They belong to that task, not
to every run: ``data.task=gsm_symbolic``, ``data.path=problems.jsonl`` or an environment's dataset
each start from their own source's defaults instead (:func:`source_defaults`). A value the user set
(in the YAML file, a recipe or an override) always wins; only keys left out are filled.

The chain_sum values live here rather than as the schema's field defaults so that a field's
default never silently carries one task's tuning into another's run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr.errors import RlvrError

DEFAULT_TASK = "chain_sum"
DEFAULT_SOURCE = "reasoning_gym"

# The default job's task, its demonstration and rewards (README "What the demo does"; the runs
# behind each choice are in docs/chain-sum.md).
CHAIN_SUM_TASK_CONFIG: dict[str, Any] = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}
CHAIN_SUM_FEW_SHOT: list[list[str]] = [
    [
        "State the final answer to the following arithmetic problem: 12 + 5 =",
        "12 + 5 = 17\n<answer>17</answer>",
    ]
]
CHAIN_SUM_REWARDS: list[dict[str, Any]] = [
    # Half the reward for a right answer wherever it is written, half for a right answer inside
    # <answer> tags: correctness carries signal from step one, the format follows. A quarter more
    # for how close a tagged number is: groups that are all wrong still rank their answers.
    {"name": "reasoning_gym", "weight": 0.5, "params": {"extract": "auto"}},
    {"name": "reasoning_gym", "label": "tagged", "weight": 0.5, "params": {"extract": "answer_tag"}},
    {"name": "numeric_closeness", "label": "closeness", "weight": 0.25, "params": {"extract": "answer_tag"}},
]
CHAIN_SUM_GROUP_BY = ["operators", "answer_sign"]
# The demo's length: 24 new tokens fit "12 + 5 = 17\n<answer>17</answer>" (1 of 64 of the base
# model's completions was cut there), and its time limits keep `rlvr train` with no arguments under
# 10 minutes on a 2-core CPU (README "What the demo does").
CHAIN_SUM_MAX_NEW_TOKENS = 24
DEMO_TIME_LIMITS: dict[str, Any] = {"time_limit_s": 450.0, "time_budget_s": 570.0}
# Every other task, file or dataset: room to reason before the answer. SmolLM2-135M's completions of
# word problems: 30 of 32 cut at 24 tokens, 6 of 32 at 256 (mean 123; sampling ~5x as long on the
# 2-core CPU). 256 is TRL's GRPOConfig.max_completion_length default; eval follows (eval.max_new_tokens
# defaults to rollout.max_new_tokens). No time limits: a run trains all its train.steps.
GENERAL_MAX_NEW_TOKENS = 256
ENV_MAX_NEW_TOKENS = 24

# Any other reasoning-gym task: the task's own score_answer, reading the answer wherever the model
# wrote it (tags, \boxed{}, an "Answer:" line, the last number), as held-out accuracy does.
REASONING_GYM_REWARDS: list[dict[str, Any]] = [{"name": "reasoning_gym", "params": {"extract": "auto"}}]
# Files and HF datasets: each row's `verifier` column picks its reward, math-verify equivalence
# to the reference otherwise.
TABLE_REWARDS: list[dict[str, Any]] = [{"name": "verifier", "params": {"default": "math"}}]
# Held-out problems generated for reasoning-gym tasks and environment datasets.
GENERATED_EVAL_SIZE = 200


def infer_source(data: dict[str, Any]) -> str:
    """``data.source`` when given; else ``file`` for a ``data.path`` with a data file's extension,
    ``hf`` for any other path (a dataset directory or a hub id), and reasoning-gym without a path."""
    if data.get("source") is not None:
        return str(data["source"])
    path = data.get("path")
    if not path:
        return DEFAULT_SOURCE
    from rlvr.data.file_source import SUPPORTED_EXTENSIONS

    return "file" if Path(str(path)).suffix.lower() in SUPPORTED_EXTENSIONS else "hf"


def source_defaults(source: str, task: str | None, data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{section: {key: default}}`` for a run whose data comes from ``source`` (and ``task``)."""
    if source == DEFAULT_SOURCE and (task or DEFAULT_TASK) == DEFAULT_TASK:
        return {
            "data": {
                "task": DEFAULT_TASK,
                "task_config": CHAIN_SUM_TASK_CONFIG,
                "few_shot": CHAIN_SUM_FEW_SHOT,
                "eval_size": GENERATED_EVAL_SIZE,
            },
            "rewards": {"functions": CHAIN_SUM_REWARDS},
            "eval": {"group_by": CHAIN_SUM_GROUP_BY},
            "rollout": {"max_new_tokens": CHAIN_SUM_MAX_NEW_TOKENS},
            "train": DEMO_TIME_LIMITS,
        }
    if source == DEFAULT_SOURCE:
        return {
            "data": {"task_config": {}, "few_shot": [], "eval_size": GENERATED_EVAL_SIZE},
            "rewards": {"functions": REASONING_GYM_REWARDS},
            "eval": {"group_by": []},
            "rollout": {"max_new_tokens": GENERAL_MAX_NEW_TOKENS},
        }
    if source in ("file", "hf"):
        rewards = TABLE_REWARDS if data.get("answer_key", "answer") is not None else None
        return {
            # a user's prompts are used as written: no answer-format instruction unless asked for;
            # data.eval_size is left to the data (rlvr.data.from_config: an eval source, or 10%)
            "data": {"task": None, "task_config": {}, "few_shot": [], "answer_format": "none"},
            "rewards": {"functions": rewards},
            "eval": {"group_by": []},
            "rollout": {"max_new_tokens": GENERAL_MAX_NEW_TOKENS},
        }
    # env: the environment's own turn rewards score its episodes
    return {
        "data": {"task_config": {}, "few_shot": [], "eval_size": GENERATED_EVAL_SIZE},
        "rewards": {"functions": []},
        "eval": {"group_by": []},
        # short turns: the environment recipes use 16-32 tokens a turn (env.max_tokens bounds an episode)
        "rollout": {"max_new_tokens": ENV_MAX_NEW_TOKENS},
    }


def apply_source_defaults(tree: dict[str, Any]) -> dict[str, Any]:
    """A copy of the raw config ``tree`` with the keys it leaves out filled for its data source.

    Also refuses keys that the chosen source would silently ignore (a ``data.path`` for
    reasoning-gym, a ``data.task`` for a file), naming them.
    """
    tree = {key: _plain(value) for key, value in tree.items()}
    data = dict(tree.get("data") or {})
    if data.get("sources"):  # a weighted mixture: each source its own data and reward
        tree, defaults = mixture_defaults(tree, data)
        return _fill(tree, defaults)
    source = infer_source(data)
    _check_applicable(source, data)
    defaults = source_defaults(source, data.get("task"), data)
    if source in ("file", "hf") and defaults["rewards"]["functions"] is None:
        if "functions" not in (tree.get("rewards") or {}):
            raise RlvrError(
                "data.answer_key is null (no reference answers), so the default reward (math against "
                "the reference) cannot score; set rewards.functions to a label-free reward, e.g. "
                "'rewards.functions=[{name: majority_vote}]'"
            )
        defaults["rewards"] = {}
    data.setdefault("source", source)
    tree["data"] = data
    return _fill(tree, defaults)


def _fill(tree: dict[str, Any], defaults: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``tree`` with each key of ``defaults`` it leaves out filled, and its default name."""
    for section, values in defaults.items():
        given = dict(tree.get(section) or {})
        for key, value in values.items():
            given.setdefault(key, _copy(value))
        tree[section] = given
    if "name" not in tree:
        tree["name"] = default_name(tree)
    return tree


def default_name(tree: dict[str, Any]) -> str:
    """``<algo.advantage>-<task or data file name>``, e.g. ``grpo-chain-sum``, ``grpo-problems``; a
    reward model's (``stage=rm``) is ``rm-<task or pair file name>``."""
    data = tree.get("data") or {}
    advantage = (tree.get("algo") or {}).get("advantage", "grpo")
    if tree.get("stage") == "rm":
        rm = tree.get("rm") or {}
        if rm.get("pairs") == "file" and rm.get("path"):
            return "rm-" + (Path(str(rm["path"]).rstrip("/")).stem or "pairs").replace("_", "-")
        advantage = "rm"
    if data.get("sources"):
        subject = "mix-" + "-".join(str(item.get("name")) for item in data["sources"][:3])
    elif data.get("source") in ("file", "hf"):
        path = str(data.get("path") or "data").rstrip("/")
        subject = Path(path).stem or path
    else:
        subject = str(data.get("task") or DEFAULT_TASK)
    return f"{advantage}-{subject}".replace("_", "-").replace("/", "-")


def _check_applicable(source: str, data: dict[str, Any]) -> None:
    if source in ("reasoning_gym", "env") and data.get("path"):
        raise RlvrError(
            f"data.path is set but data.source is {source}, which does not read files; drop "
            "data.source (a data.path alone means a file) or set data.source to file or hf"
        )
    if source in ("reasoning_gym", "env"):
        for key in ("eval_path", "eval_split"):
            if data.get(key) is not None:
                raise RlvrError(
                    f"data.{key} applies to files and HF datasets; data.source={source} generates its "
                    f"held-out problems (data.eval_size of them): drop data.{key}"
                )
    if source in ("file", "hf") and data.get("eval_split") is not None:
        held_out = data.get("eval_path") or (data.get("path") if source == "hf" else None)
        if not held_out or infer_source({"path": held_out}) == "file":
            raise RlvrError(
                f"data.eval_split={data['eval_split']} names a split of an HF dataset, but "
                f"{'data.eval_path=' + str(held_out) if held_out else 'data.path'} is a data file: "
                "drop data.eval_split, or give data.eval_path a file of held-out rows"
            )
    if source in ("file", "hf"):
        for key in ("task", "task_config"):
            if data.get(key):
                raise RlvrError(
                    f"data.{key} applies to reasoning-gym tasks and environment datasets, not to "
                    f"data.source={source} (data.path={data.get('path')}); drop data.{key}"
                )
    if source == "env" and not data.get("task"):
        from rlvr.data.env_source import ENV_DATASETS

        raise RlvrError(
            "data.source=env needs data.task, the environment whose generator makes the problems: "
            + ", ".join(ENV_DATASETS.names())
        )


# A mixture (data.sources): each source's examples name the reward that scores them (data.sources[i]
# .reward, else their kind's own below) and the verifier reward routes each there, reasoning-gym's with
# the answer read wherever the model wrote it, as a run of that task alone; accuracy is reported per
# source (eval groups by data_source: the source's name).
SOURCE_REWARDS = {"reasoning_gym": "reasoning_gym", "file": "math", "hf": "math", "env": "environment"}
MIXTURE_GROUP_BY = ["data_source"]
# Keys of `data` that one source reads and a mixture gives each source instead.
_PER_SOURCE_KEYS = ("path", "task", "task_config", "eval_path", "eval_split")


def mixture_defaults(tree: dict[str, Any], data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The tree of a run whose data is ``data.sources`` (checked, each source's kind resolved) and the
    defaults it gets: the routing verifier reward, eval groups by source, no demonstrations."""
    from rlvr.config.data_plan import check_source_names

    given = data["sources"]
    plain = [_plain(item) for item in given] if isinstance(given, list) else [given]
    if not all(isinstance(item, dict) for item in plain):
        raise RlvrError("data.sources: give a list of sources, each a mapping with at least a name")
    items = [dict(item) for item in plain]
    check_source_names([item.get("name") for item in items])
    for key in _PER_SOURCE_KEYS:
        if data.get(key):
            raise RlvrError(
                f"data.{key} is not read when data.sources is set: give it to the source that needs it "
                f"(data.sources[i].{key})"
            )
    if data.get("source") not in (None, DEFAULT_SOURCE):
        raise RlvrError(
            f"data.source={data['source']} is not read when data.sources is set: give each source its "
            "kind (data.sources[i].source)"
        )
    for i, item in enumerate(items):
        item["source"] = infer_source(item)
        _check_source(i, item)
        table = item["source"] in ("file", "hf")
        if table and item.get("answer_format") is None and "answer_format" not in data:
            item["answer_format"] = "none"  # a file's prompts as written, as for a run of that file
    _check_source_rewards(items, tree)
    data["sources"] = items
    tree["data"] = data
    reward_params: dict[str, dict[str, Any]] = {"reasoning_gym": {"extract": "auto"}}
    for item in items:  # an import path the config names may be routed to (rewards.routing)
        if item.get("reward") and ":" in item["reward"]:
            reward_params.setdefault(item["reward"], {})
    episodes_only = all(item["source"] == "env" for item in items)
    return tree, {
        "data": {"task": None, "task_config": {}, "few_shot": []},
        "rewards": {"functions": [{"name": "verifier", "params": {"reward_params": reward_params}}]},
        "eval": {"group_by": MIXTURE_GROUP_BY},
        "rollout": {"max_new_tokens": ENV_MAX_NEW_TOKENS if episodes_only else GENERAL_MAX_NEW_TOKENS},
    }


def _check_source(i: int, item: dict[str, Any]) -> None:
    """Refuse keys a source of this kind would silently ignore, and a missing task or path."""
    where, kind = f"data.sources[{i}]", item["source"]
    if kind in ("reasoning_gym", "env"):
        if not item.get("task"):
            raise RlvrError(f"{where}.task: a {kind} source needs its task (source={kind})")
        for key in ("path", "eval_path", "eval_split"):
            if item.get(key) is not None:
                raise RlvrError(
                    f"{where}.{key} applies to files and HF datasets, not to source={kind}; drop it"
                )
    if kind in ("file", "hf"):
        if not item.get("path"):
            raise RlvrError(f"{where}.path: a {kind} source needs its data file or dataset (source={kind})")
        for key in ("task", "task_config"):
            if item.get(key):
                raise RlvrError(f"{where}.{key} applies to reasoning-gym tasks and environments; drop it")
        if "answer_key" in item and item["answer_key"] is None and not item.get("reward"):
            raise RlvrError(
                f"{where}.answer_key is null (no reference answers), so its default reward (math against "
                f"the reference) cannot score it: set {where}.reward"
            )


def _check_source_rewards(items: list[dict[str, Any]], tree: dict[str, Any]) -> None:
    """Each source's reward exists and can be routed to; the run's rewards route to it."""
    from rlvr.rewards.registry import get_reward, is_group_reward, list_rewards

    for i, item in enumerate(items):
        reward = item.get("reward")
        if reward is None or not isinstance(reward, str) or ":" in reward:  # an import path: the user's
            continue
        where = f"data.sources[{i}].reward={reward!r}"
        if reward not in list_rewards():
            raise RlvrError(f"{where} is not a registered reward; registered: {', '.join(list_rewards())}")
        if reward == "verifier" or is_group_reward(get_reward(reward)):
            raise RlvrError(
                f"{where}: a source's reward scores each answer alone; 'verifier' and group rewards "
                "cannot be routed to (name a group reward in rewards.functions)"
            )
    functions = (tree.get("rewards") or {}).get("functions")
    named = [i for i, item in enumerate(items) if item.get("reward")]
    if functions is not None and named:
        names = [f.get("name") if isinstance(f, dict) else getattr(f, "name", None) for f in functions]
        if "verifier" not in names:
            raise RlvrError(
                f"data.sources[{named[0]}].reward is read by the verifier reward, which routes each "
                "example to its source's reward, but rewards.functions has no {name: verifier}: add it, "
                "or leave rewards.functions out"
            )


def _plain(value: Any) -> Any:
    """A section given as a model instance (Python API) as the dict of the keys that were set."""
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        return value.model_dump(exclude_unset=True)
    return value


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value
