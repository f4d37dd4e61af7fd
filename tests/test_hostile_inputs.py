"""Hostile data rows: a dataset or a completions file must never name code to import or run, nor
change a safety setting. Each attack here would have run (or imported) the attacker's code before
the routing checks of rlvr.rewards.routing and rlvr.envs.data_params; each now gets a clear error
naming the file, row and column, and the marker file the attack writes never appears.

The other hostile-input classes have files of their own: inputs that exhaust the machine
(tests/test_hostile_exhaustion.py) and code that escapes a weak sandbox (tests/test_hostile_sandbox.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tiny import TINY_RUN

from rlvr import api
from rlvr.config import load_config
from rlvr.data.example import Example
from rlvr.envs.data_params import check_env_examples, env_params, route_env
from rlvr.errors import RlvrError
from rlvr.rewards.builtin import verifier_reward

RLVR = [sys.executable, "-m", "rlvr.cli"]

# A module the attacker hopes rlvr imports: importing it or calling anything in it writes the marker.
HOSTILE = """
import os, pathlib
pathlib.Path(os.environ["RLVR_TEST_MARKER"]).write_text("imported")

def touch(*args, **kwargs):
    pathlib.Path(os.environ["RLVR_TEST_MARKER"]).write_text("called")
    return 1.0
"""


@pytest.fixture
def marker(tmp_path, monkeypatch) -> Path:
    """A planted module ``hostile_mod`` on sys.path (and in workers' PYTHONPATH) and the marker path
    it writes to when imported or called."""
    (tmp_path / "hostile_mod.py").write_text(HOSTILE)
    path = tmp_path / "MARKER"
    monkeypatch.setenv("RLVR_TEST_MARKER", str(path))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    sys.modules.pop("hostile_mod", None)
    return path


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _file_run(data: Path, *extra: str):
    return load_config(
        None,
        [*TINY_RUN, "data.source=file", f"data.path={data}", "data.eval_size=0", "data.few_shot=[]", *extra],
    )


# --------------------------------------------------------------------------- the verifier column


def test_a_rows_verifier_import_path_is_refused_before_anything_is_imported(tmp_path, marker) -> None:
    rows = [
        {"question": "1+1?", "answer": "2"},
        {"question": "2+2?", "answer": "4", "verifier": "hostile_mod:touch"},
    ]
    cfg = _file_run(
        _jsonl(tmp_path / "data.jsonl", rows),
        "rewards.functions=[{name: verifier, params: {default: exact_match}}]",
    )
    with pytest.raises(RlvrError) as caught:
        api.collect(cfg, str(tmp_path / "out.jsonl"), quiet=True)
    message = str(caught.value)
    assert "data.jsonl line 2" in message and "column 'verifier'" in message and "import path" in message
    assert not marker.exists() and "hostile_mod" not in sys.modules
    assert not (tmp_path / "out.jsonl").exists()


def test_a_rows_verifier_must_be_a_registered_reward(tmp_path) -> None:
    rows = [{"question": "1+1?", "answer": "2", "verifier": "no_such_reward"}]
    cfg = _file_run(
        _jsonl(tmp_path / "data.jsonl", rows),
        "rewards.functions=[{name: verifier, params: {default: exact_match}}]",
    )
    with pytest.raises(
        RlvrError, match=r"data.jsonl line 1: column 'verifier' names 'no_such_reward'.*registered"
    ):
        api.collect(cfg, str(tmp_path / "out.jsonl"), quiet=True)


def test_routing_refuses_a_rows_import_path_at_call_time_too(marker) -> None:
    """Defence in depth: an example that reaches the reward without the start-up check (built by
    other code, or by a future source) is still refused when the reward runs."""
    example = Example(
        id="x", prompt=[], reference="2", verifier="hostile_mod:touch", origin="rows.jsonl line 9"
    )
    with pytest.raises(ValueError, match=r"rows.jsonl line 9: column 'verifier' names 'hostile_mod:touch'"):
        verifier_reward("2", example, default="exact_match")
    assert not marker.exists()


def test_an_import_path_the_config_lists_is_routed(marker) -> None:
    """The config is code: an import path it lists (default or reward_params) may be named by rows."""
    example = Example(id="x", prompt=[], reference="2", verifier="hostile_mod:touch")
    assert (
        verifier_reward("2", example, default="exact_match", reward_params={"hostile_mod:touch": {}}) == 1.0
    )
    assert marker.read_text() == "called"


def test_rlvr_reward_refuses_a_completions_file_that_routes_to_an_import_path(tmp_path, marker) -> None:
    completions = _jsonl(
        tmp_path / "c.jsonl",
        [
            {"completion": "2", "answer": "2"},
            {"completion": "import os; os.system('touch x')", "answer": "4", "verifier": "hostile_mod:touch"},
        ],
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [*RLVR, "reward", "--task", "verifier", "--params", '{"verifier": {"default": "exact_match"}}',
         "--completions", str(completions)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "c.jsonl line 2" in proc.stderr and "column 'verifier'" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not marker.exists()


# --------------------------------------------------------------------------- the env column


def test_a_rows_env_import_path_is_refused_before_anything_is_imported(tmp_path, marker) -> None:
    shell = tmp_path / "SHELL_MARKER"
    rows = [
        {"question": "1+1?", "answer": "2"},
        {
            "question": "x",
            "answer": "1",
            "env": "subprocess:getoutput",
            "env_params": {"cmd": f"touch {shell}"},
        },
        {"question": "y", "answer": "1", "env": "hostile_mod:touch"},
    ]
    cfg = _file_run(_jsonl(tmp_path / "data.jsonl", rows), "rewards.functions=[{name: exact_match}]")
    with pytest.raises(RlvrError) as caught:
        api.collect(cfg, str(tmp_path / "out.jsonl"), quiet=True)
    message = str(caught.value)
    assert "data.jsonl line 2" in message and "column 'env'" in message and "import path" in message
    assert not shell.exists() and not marker.exists() and "hostile_mod" not in sys.modules
    assert not (tmp_path / "out.jsonl").exists()


def test_a_rows_env_must_be_registered() -> None:
    example = Example(id="x", prompt=[], metadata={"env": "no_such_env"}, origin="d.jsonl line 4")
    with pytest.raises(
        RlvrError, match=r"d.jsonl line 4: column 'env' names 'no_such_env'.*registered: .*calculator"
    ):
        route_env(example, None)


def test_the_configs_own_environment_may_be_an_import_path() -> None:
    example = Example(id="x", prompt=[], metadata={"env": "mypackage.envs:Maze"})
    assert route_env(example, "mypackage.envs:Maze") == "mypackage.envs:Maze"
    assert route_env(Example(id="y", prompt=[]), "calculator") == "calculator"
    assert route_env(Example(id="z", prompt=[]), None) is None


# --------------------------------------------------------------------------- env_params from rows


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"allow_unsafe_sandbox": True}, "env_params.allow_unsafe_sandbox cannot be set by a data row"),
        ({"timeout_s": 1000}, "env_params.timeout_s cannot be set by a data row"),
        ({"memory_mb": 10**6}, "env_params.memory_mb cannot be set by a data row"),
        ({"max_output_chars": 10**9}, "env_params.max_output_chars must be between 1 and 20000"),
        ({"demonstrate": "yes"}, "env_params.demonstrate must be true or false"),
        ([1, 2], "column 'env_params' must be an object"),
    ],
)
def test_a_row_cannot_reconfigure_the_python_tool(params, needle) -> None:
    example = Example(
        id="x", prompt=[], metadata={"env": "python", "env_params": params}, origin="d.jsonl line 3"
    )
    with pytest.raises(RlvrError, match="d.jsonl line 3: " + needle.replace("(", r"\(")):
        check_env_examples([example], None, {})


def test_a_rows_safe_params_extend_the_configs_which_keep_the_safety_settings() -> None:
    example = Example(id="x", prompt=[], metadata={"env": "python", "env_params": {"demonstrate": False}})
    config = {"timeout_s": 1.5, "allow_unsafe_sandbox": False}
    assert env_params(example, "python", "python", config) == {**config, "demonstrate": False}
    # another environment than the config's gets none of the config's params
    game = Example(id="g", prompt=[], metadata={"env": "frozenlake", "env_params": {"size": 3}})
    assert env_params(game, "frozenlake", "python", config) == {"size": 3}


@pytest.mark.parametrize(
    ("env", "params", "needle"),
    [
        ("frozenlake", {"size": 10**6}, "env_params.size must be between 2 and 16"),
        ("guess_number", {"high": 10**30}, "env_params.high must be between"),
        ("search", {"corpus_size": 10**9}, "env_params.corpus_size must be between 1 and 10000"),
        ("search", {"role": "system"}, "env_params.role must be one of tool, user"),
        ("wordle", {"max_guesses": float("inf")}, "env_params.max_guesses must be an integer"),
        ("calculator", {"tool_error_penalty": float("nan")}, "env_params.tool_error_penalty must be finite"),
    ],
)
def test_a_rows_game_params_stay_in_their_declared_range(env, params, needle) -> None:
    example = Example(id="x", prompt=[], metadata={"env": env, "env_params": params}, origin="g.jsonl line 1")
    with pytest.raises(RlvrError, match="g.jsonl line 1: " + needle):
        check_env_examples([example], None, {})


def test_a_search_rows_corpus_size_is_bounded_when_the_episode_starts() -> None:
    """``metadata.corpus_size`` is read by the search env itself (not an env param): bounded there."""
    import random

    from rlvr.envs import make_env

    example = Example(id="q", prompt=[], reference="a", metadata={"env": "search", "corpus_size": 10**8})
    with pytest.raises(ValueError, match="corpus_size must be 1..10000"):
        make_env("search").reset(example, random.Random(0))


def test_the_collector_builds_episodes_with_the_checked_params(tmp_path, monkeypatch) -> None:
    """Wiring: a row's unsafe env_params fail the run at start, through the file source and the
    collector (not only in the check functions)."""
    rows = [{"question": "2+2?", "answer": "4", "env": "calculator", "env_params": {"max_chars": 10**7}}]
    cfg = _file_run(_jsonl(tmp_path / "data.jsonl", rows), "rewards.functions=[{name: exact_match}]")
    with pytest.raises(
        RlvrError, match=r"data.jsonl line 1: env_params.max_chars must be between 1 and 4000"
    ):
        api.collect(cfg, str(tmp_path / "out.jsonl"), quiet=True)
    assert not (tmp_path / "out.jsonl").exists()


def test_a_completions_file_that_is_not_utf8_is_a_clear_error(tmp_path) -> None:
    from rlvr.rewards.offline import score_file

    completions = tmp_path / "c.jsonl"
    completions.write_bytes(b'{"completion": "\xff\xfe", "answer": "1"}\n')
    with pytest.raises(RlvrError, match=r"c.jsonl: not UTF-8 text"):
        score_file(completions, "exact_match")
