"""Role games (rlvr.roles, docs/roles.md): the cross-role rewards against hand values, which
samples each role's rewards read, the games' prompts, and a run through the trainer where roles'
prompts, rewards, metrics and loss weights stay apart."""

from __future__ import annotations

import pytest
from tiny import TINY_RUN

from rlvr import api
from rlvr.data.code_functions import all_problems, code_function_examples
from rlvr.data.example import Example
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl
from rlvr.rewards import sandbox
from rlvr.rewards.role_rewards import (
    discrimination_reward,
    generated_tests_reward,
    verdict_agreement_reward,
)
from rlvr.roles.base import RoleGroup, RolePrompt, fill
from rlvr.roles.coder_tester import CoderTester
from rlvr.roles.solver_verifier import SolverVerifier
from rlvr.trajectory import SAMPLED, Segment, Trajectory

needs_sandbox = pytest.mark.skipif(sandbox.backend_name() != "bwrap", reason="needs bubblewrap")

TASK = Example(
    id="add_two",
    prompt=[{"role": "user", "content": "Write add_two(x)."}],
    reference="def add_two(x):\n    return x + 2\n",
    metadata={
        "entry_point": "add_two",
        "tests": "assert add_two(1) == 3\n",
        "description": "`add_two(x)` adds 2",
    },
)
RIGHT, PLUS3, TWICE = (
    f"```python\ndef add_two(x):\n    return {body}\n```" for body in ("x + 2", "x + 3", "x * 2")
)


@needs_sandbox
def test_test_discrimination_against_hand_values() -> None:
    example = Example(
        **{
            **TASK.__dict__,
            "metadata": {
                **TASK.metadata,
                "programs": [RIGHT, PLUS3, TWICE],
                "programs_correct": [True, False, False],
            },
        }
    )
    suites = [
        "```python\nassert add_two(1) == 3\nassert add_two(2) == 4\n```",  # valid, rejects both wrong
        "assert add_two(2) == 4",  # valid; x * 2 also gives 4: rejects one of two
        "assert add_two(1) == 4",  # wrong about the function: invalid
        "assert add_two(1) == 3\nassert add_two(1) == 5",  # half right: invalid
        "no code here",  # tests nothing
        "assert add_two(1 ==",  # does not parse
    ]
    got = discrimination_reward(suites, example)
    assert [round(g["score"], 3) for g in got] == [1.0, 0.75, 0.0, 0.25, 0.0, 0.0]
    assert [g["valid"] for g in got] == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    # every program right: a valid suite has nothing to reject and earns the whole reward
    all_right = Example(
        **{**example.__dict__, "metadata": {**example.metadata, "programs_correct": [True] * 3}}
    )
    assert discrimination_reward(suites[:1], all_right)[0]["score"] == 1.0


@needs_sandbox
def test_generated_tests_counts_only_suites_the_reference_passes() -> None:
    valid, invalid = "assert add_two(1) == 3", "assert add_two(1) == 4"
    example = Example(**{**TASK.__dict__, "metadata": {**TASK.metadata, "generated_tests": [valid, invalid]}})
    got = generated_tests_reward([RIGHT, TWICE, PLUS3], example)
    assert [g["score"] for g in got] == [1.0, 0.0, 0.0]  # PLUS3 passes the invalid suite: not counted
    assert all(g["valid_suites"] == 1.0 for g in got)
    only_wrong = Example(**{**TASK.__dict__, "metadata": {**TASK.metadata, "generated_tests": [invalid]}})
    assert generated_tests_reward([PLUS3], only_wrong)[0] == {"score": 0.0, "valid_suites": 0.0}


def test_verdict_agreement_reads_the_last_score_line_and_needs_one() -> None:
    def score(reply: str, truth: bool) -> dict[str, float]:
        meta = {"answer_correct": truth}
        return verdict_agreement_reward(reply, Example(id="v", prompt=[], metadata=meta))

    assert score("17 is right.\nScore: 1", True)["score"] == 1.0
    assert score("Score: 1", False)["score"] == 0.0
    assert score("Score: 1 ... no, Score: 0", False)["score"] == 1.0
    assert score("the answer is 1", True) == {"score": 0.0, "verdict_given": 0.0, "says_correct": 0.0}
    with pytest.raises(ValueError, match="answer_correct"):
        verdict_agreement_reward("Score: 1", Example(id="v", prompt=[]))


def trajectory(text: str, rewards: dict[str, float], errors: dict[str, str] | None = None) -> Trajectory:
    t = Trajectory([1], [Segment(SAMPLED, [2], [0.0])], "stop", text=text, rewards=rewards)
    t.errors = errors or {}
    return t


def test_the_test_writer_reads_the_coders_scored_programs_of_its_own_problem() -> None:
    game = CoderTester(correctness="code")
    coder = RoleGroup(
        "coder",
        0,
        RolePrompt(TASK.prompt),
        [
            trajectory("a", {"code": 1.0}),
            trajectory("b", {"code": 0.0}),
            trajectory("c", {}, {"code": "timeout"}),
        ],
    )
    tester = RoleGroup("tester", 0, RolePrompt([]), [trajectory("assert add_two(1) == 3", {})])
    played = {"coder": [coder], "tester": [tester]}
    info = game.scoring_info("tester", tester, TASK, played)
    assert info == {"programs": ["a", "b"], "programs_correct": [True, False]}  # the errored one left out
    assert game.scoring_info("coder", coder, TASK, played) == {"generated_tests": ["assert add_two(1) == 3"]}
    (prompt,) = game.prompts("tester", TASK, {}, None)
    assert (
        "`add_two`" in prompt.messages[0]["content"]
        and "`add_two(x)` adds 2" in prompt.messages[0]["content"]
    )
    with pytest.raises(ValueError, match="entry_point"):
        game.prompts("tester", Example(id="q", prompt=[]), {}, None)


def test_the_verifier_is_shown_a_wrong_and_a_right_answer_first() -> None:
    game = SolverVerifier(answers=3, correctness="acc")
    solver = RoleGroup(
        "solver",
        0,
        RolePrompt([]),
        [
            trajectory("<answer>17</answer>", {"acc": 1.0}),
            trajectory("<answer>17</answer>", {"acc": 1.0}),  # a repeat: shown once
            trajectory("<answer>18</answer>", {"acc": 0.0}),
            trajectory("<answer>19</answer>", {}, {"acc": "crash"}),  # unscored: never shown
            trajectory("<answer>20</answer>", {"acc": 0.0}),
        ],
    )
    example = Example(id="q", prompt=[{"role": "user", "content": "12 + 5 ="}], reference="17")
    prompts = game.prompts("verifier", example, {"solver": [solver]}, "Q: {question} A: {answer}")
    shown = [(p.messages[0]["content"], p.info["answer_correct"]) for p in prompts]
    assert shown == [
        ("Q: 12 + 5 = A: <answer>18</answer>", False),
        ("Q: 12 + 5 = A: <answer>17</answer>", True),
        ("Q: 12 + 5 = A: <answer>20</answer>", False),
    ]


def test_templates_accept_only_the_games_placeholders() -> None:
    assert fill("{question}!", {"question": "q"}, "k") == "q!"
    for bad in ("{nope}", "{question.__class__}", "{question!r}"):
        with pytest.raises(ValueError, match="k: unknown placeholder"):
            fill(bad, {"question": "q"}, "k")


def test_code_functions_splits_are_disjoint_and_the_references_pass_their_tests() -> None:
    train, held_out = code_function_examples(1000, 0, "train"), code_function_examples(1000, 0, "eval")
    assert len(train) + len(held_out) == len(all_problems()) and not {e.id for e in train} & {
        e.id for e in held_out
    }
    assert {e.id for e in code_function_examples(1000, 5, "eval")} == {e.id for e in held_out}  # any seed
    for example in all_problems()[::20]:  # the hidden tests hold for the reference (run here: our own code)
        namespace: dict = {}
        exec(example.reference + example.metadata["tests"], namespace)


PROBE = "{name: 'reward_fixtures:programs_seen', label: programs_seen}"
ROLE_RUN = [
    *TINY_RUN,
    "data.source=env",
    "data.task=code_functions",
    "data.task_config={}",
    "data.few_shot=[]",
    "roles.game=coder_tester",
    "roles.eval_size=2",
    "data.eval_size=2",
    "train.log_samples=-1",
    "algo.dynamic_sampling=false",
    "roles.settings={tester: {group_size: 3, max_new_tokens: 6, rewards: [" + PROBE + "]}}",
]


def test_a_role_run_keeps_each_roles_prompts_rewards_and_metrics_apart(tmp_path) -> None:
    cfg = api.load_config("grpo", [*ROLE_RUN, "train.steps=2", f"output_dir={tmp_path}", "name=r"])
    api.train(cfg, quiet=True)
    rows = read_jsonl(tmp_path / "r" / "samples.jsonl")
    coder = [r for r in rows if r["role"] == "coder"]
    tester = [r for r in rows if r["role"] == "tester"]
    assert len(coder) == 2 * 2 * 4 and len(tester) == 2 * 2 * 3  # steps x prompts x group size
    assert all(r["prompt"].startswith("Write a Python function") for r in coder)
    assert all(r["prompt"].startswith("You write unit tests.") for r in tester)
    assert all(r["tokens"] <= 6 for r in tester)
    for r in tester:  # its reward read the coder's programs of the same problem, at the same step
        programs = [
            c["completion"] for c in coder if c["example_id"] == r["example_id"] and c["step"] == r["step"]
        ]
        assert r["rewards"]["programs_seen/n"] == len(programs) == 4
        assert r["rewards"]["programs_seen/chars"] == sum(len(p) for p in programs)
    assert all("generated_tests/score" not in r["rewards"] for r in tester)
    metrics = read_jsonl(tmp_path / "r" / "metrics.jsonl")
    train = [m for m in metrics if m["phase"] == "train"]
    assert all(m["role/tester/samples"] == 6 and m["role/coder/samples"] == 8 for m in train)
    after = [m for m in metrics if m["phase"] == "after"][-1]
    assert after["eval/role/tester/programs_seen/n"] == 4 and after["eval/role/coder/samples"] == 2 * 4


def test_a_roles_loss_weight_scales_its_advantages_and_zero_leaves_it_untrained(tmp_path) -> None:
    weighted = (
        "roles.settings={tester: {group_size: 3, max_new_tokens: 6, weight: %s, rewards: [" + PROBE + "]}}"
    )
    advantages = {}
    for weight in ("0.0", "1.0"):
        overrides = [
            *ROLE_RUN,
            weighted % weight,
            "train.steps=1",
            "data.eval_size=0",
            f"output_dir={tmp_path}",
            f"name=w{weight}",
        ]
        api.train(api.load_config("grpo", overrides), quiet=True)
        advantages[weight] = {
            role: [
                r["advantage"]
                for r in read_jsonl(tmp_path / f"w{weight}" / "samples.jsonl")
                if r["role"] == role
            ]
            for role in ("coder", "tester")
        }
    assert all(a == 0.0 for a in advantages["0.0"]["tester"])
    assert any(a != 0.0 for a in advantages["1.0"]["tester"])
    assert advantages["0.0"]["coder"] == pytest.approx(advantages["1.0"]["coder"])  # the coder's untouched


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("roles.game=chess", "roles.game"),
        ("roles.settings={judge: {weight: 1.0}}", "roles.settings.judge"),
        ("roles.settings={coder: {prompt: 'x'}}", "roles.settings.coder"),
        (
            "roles.settings={tester: {prompt: 'Test {secret}'}}",
            "roles.settings.tester.prompt: unknown placeholder",
        ),
        ("roles.params={asserts: 0}", "roles.params"),
        ("data.replay.kind=share", "data.replay"),
    ],
)
def test_bad_role_configs_are_refused_naming_the_key(tmp_path, override: str, message: str) -> None:
    cfg = api.load_config(
        "grpo", [*ROLE_RUN, override, "train.steps=1", f"output_dir={tmp_path}", "name=bad"]
    )
    with pytest.raises(RlvrError, match=message):
        api.train(cfg, quiet=True)


@pytest.mark.parametrize("recipe", ["coder_tester", "solver_verifier"])
def test_the_games_own_rewards_score_a_training_step(recipe: str, tmp_path) -> None:
    """The recipes' real cross-role rewards (the sandboxed ones need bubblewrap) run in the pool
    through the trainer without a reward error, each role scored by its own."""
    if recipe == "coder_tester" and sandbox.backend_name() != "bwrap":
        pytest.skip("the code rewards refuse to run without bubblewrap")
    keep = [
        o for o in TINY_RUN if not o.startswith(("rewards.functions=", "data.train_size", "data.eval_size"))
    ]
    overrides = [
        *keep,
        "train.steps=1",
        "data.eval_size=0",
        "train.log_samples=-1",
        f"output_dir={tmp_path}",
        "name=g",
    ]
    if recipe == "solver_verifier":
        overrides += ["data.train_size=16", "algo.dynamic_sampling=false"]
    api.train(api.load_config(recipe, overrides), quiet=True)
    (step,) = [m for m in read_jsonl(tmp_path / "g" / "metrics.jsonl") if m["phase"] == "train"]
    assert step["reward/errors"] == 0 and not any(
        v for k, v in step.items() if k.startswith("reward_errors/")
    )
    rows = read_jsonl(tmp_path / "g" / "samples.jsonl")
    second = {
        "coder_tester": ("tester", "test_discrimination/score"),
        "solver_verifier": ("verifier", "verdict_agreement/score"),
    }
    role, component = second[recipe]
    assert rows and all(component in r["rewards"] for r in rows if r["role"] == role)
    if recipe == "coder_tester":
        assert all(
            "generated_tests/score" in r["rewards"] and "code" in r["rewards"]
            for r in rows
            if r["role"] == "coder"
        )


def full_and_resumed(tmp_path, steps: list[str]) -> tuple[dict[int, dict], dict[int, dict]]:
    """The train rows of run ``full`` and of run ``cut``, stopped after its first step and resumed."""
    api.train(api.load_config("grpo", [*steps, "name=full"]), quiet=True)
    api.train(api.load_config("grpo", [*steps, "name=cut", "train.time_limit_s=0.001"]), quiet=True)
    api.train(api.load_config("grpo", [*steps, "name=cut"]), resume=True, quiet=True)

    def rows(name: str) -> dict[int, dict]:
        return {r["step"]: r for r in read_jsonl(tmp_path / name / "metrics.jsonl") if r["phase"] == "train"}

    return rows("full"), rows("cut")


def test_a_role_run_resumes_exactly(tmp_path) -> None:
    steps = [
        *ROLE_RUN,
        "data.eval_size=0",
        "train.steps=3",
        "train.save_every=1",
        "optim.lr=1e-3",
        f"output_dir={tmp_path}",
    ]
    full, resumed = full_and_resumed(tmp_path, steps)
    assert sorted(resumed) == [1, 2, 3]
    for step in (2, 3):
        for key in ("role/coder/reward", "role/tester/reward", "role/tester/mean_length", "update/loss"):
            assert resumed[step][key] == pytest.approx(full[step][key], rel=1e-5, abs=1e-7), (step, key)
