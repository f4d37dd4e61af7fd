"""Multi-turn episodes: the token ledger across turns, stop strings, environments that fail or stall,
and a training step through the real loop with an environment."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from env_fixtures import TwoTurns  # noqa: F401  (registers the fixture environments)
from tiny import TINY_RUN

from rlvr import api
from rlvr.config import load_config
from rlvr.data.example import Example
from rlvr.envs import Environment, Step, make_env
from rlvr.envs.calculator import Calculator, evaluate_expression, parse_call
from rlvr.errors import RlvrError
from rlvr.models import load_model, load_tokenizer
from rlvr.rollout import Completion, HFEngine, SamplingParams
from rlvr.rollout.chat_ledger import ChatLedger, check_template, render
from rlvr.rollout.episodes import EpisodeLimits, EpisodeStats, run_episodes
from rlvr.trajectory import read_trajectory_groups


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny-random")


QUESTION = [{"role": "user", "content": "What is 123 + 456? Use <calc></calc>."}]


def test_the_ledger_equals_the_template_over_the_whole_conversation(tok) -> None:
    ledger = ChatLedger(tok, QUESTION)
    turn1 = tok("Let me use the tool. <calc>123 + 456</calc>", add_special_tokens=False)["input_ids"]
    ledger.add_model_turn(turn1, [-0.5] * len(turn1), tok.decode(turn1), eos=None)  # cut at a stop string
    ledger.add_messages([{"role": "tool", "content": "<result>579</result>"}])
    turn2 = tok("The answer is <answer>579</answer>", add_special_tokens=False)["input_ids"]
    ledger.add_model_turn(
        [*turn2, tok.eos_token_id], [-0.1] * (len(turn2) + 1), tok.decode(turn2), eos=tok.eos_token_id
    )
    ledger.add_messages([{"role": "user", "content": "Sure?"}])  # after a turn the model ended itself
    turn3 = tok("Yes.", add_special_tokens=False)["input_ids"]
    ledger.add_model_turn([*turn3, tok.eos_token_id], [-0.2] * (len(turn3) + 1), "Yes.", eos=tok.eos_token_id)
    conversation = [
        *QUESTION,
        {"role": "assistant", "content": tok.decode(turn1)},
        {"role": "tool", "content": "<result>579</result>"},
        {"role": "assistant", "content": tok.decode(turn2)},
        {"role": "user", "content": "Sure?"},
        {"role": "assistant", "content": "Yes."},
    ]
    whole = tok(render(tok, conversation, generation_prompt=False), add_special_tokens=False)["input_ids"]
    assert ledger.ids == whole[: len(ledger.ids)] and tok.decode(whole[len(ledger.ids) :]) == "\n"
    kinds = [s.kind for s in ledger.segments]
    assert kinds == ["sampled", "context", "sampled", "context", "sampled"]
    assert (
        tok.decode(ledger.segments[3].token_ids)
        == "\n<|im_start|>user\nSure?<|im_end|>\n<|im_start|>assistant\n"
    )
    context = tok.decode(ledger.segments[1].token_ids)
    assert context == "<|im_end|>\n<|im_start|>tool\n<result>579</result><|im_end|>\n<|im_start|>assistant\n"


def test_a_split_that_re_encoding_would_merge_survives(tok) -> None:
    """The model wrote "hello" letter by letter; the ledger keeps its five ids, never the merged one."""
    digits = [tok.convert_tokens_to_ids(c) for c in "hello"]
    assert tok("hello", add_special_tokens=False)["input_ids"] != digits  # the tokenizer would merge
    ledger = ChatLedger(tok, QUESTION)
    ledger.add_model_turn(digits, [-1.0, -2.0, -3.0, -4.0, -5.0], "hello", eos=None)
    ledger.add_messages([{"role": "user", "content": "and?"}])
    assert ledger.segments[0].token_ids == digits and ledger.segments[0].logprobs == [
        -1.0,
        -2.0,
        -3.0,
        -4.0,
        -5.0,
    ]
    assert ledger.ids[len(ledger.prompt_ids) : len(ledger.prompt_ids) + 5] == digits


def test_stop_strings_end_a_turn_where_they_complete(tok) -> None:
    """The same seeded sampling twice: the second time a string from the first output stops it at
    the token where the string completes; the kept ids and logprobs are a prefix of the first run's."""
    torch.manual_seed(0)
    engine = HFEngine(load_model("tiny-random"), tok, packed_weights="off")
    prompt = tok("Once upon a time", add_special_tokens=False)["input_ids"]
    params = SamplingParams(n=1, temperature=1.0, max_new_tokens=24, ignore_eos=True)
    engine.generator.manual_seed(7)
    full = engine.generate([prompt], params)[0][0]
    # the first token k at which a 4-character string completes that the text before it lacks
    k, stop = next(
        (k, tok.decode(full.token_ids[: k + 1])[-4:])
        for k in range(4, 20)
        if tok.decode(full.token_ids[: k + 1])[-4:] not in tok.decode(full.token_ids[:k])
    )
    engine.generator.manual_seed(7)
    cut = engine.generate([prompt], SamplingParams(**{**params.__dict__, "stop_strings": (stop,)}))[0][0]
    assert cut.finish_reason == "stop_string" and cut.token_ids == full.token_ids[: k + 1]
    assert cut.logprobs == full.logprobs[: k + 1]


def test_a_template_that_rewrites_history_is_refused(tok) -> None:
    check_template(tok)
    rewriting = tok.__class__.from_pretrained(tok.name_or_path)
    rewriting.chat_template = (
        "{% for m in messages %}{% if m['role'] != 'assistant' or loop.last %}"
        "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
    with pytest.raises(RlvrError, match="not prefix-preserving"):
        check_template(rewriting)


class ScriptedEngine:
    """Writes the given texts, one per turn, tokenized (EOS unless cut at a stop string)."""

    def __init__(self, tok, turns: list[str]) -> None:
        self.tok, self.turns, self.calls = tok, turns, []
        self.generator, self.pad_id, self.policy_version = torch.Generator(), 2, 0
        self.stop_token_ids = [tok.eos_token_id]

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        self.calls.append((len(prompts), params.n, params.stop_strings))
        out = []
        for p, prompt in enumerate(prompts):
            turn = sum(1 for t in prompt if t == self.tok.convert_tokens_to_ids("<|im_start|>")) - 3
            text = self.turns[min(max(turn, 0), len(self.turns) - 1)]
            ids = self.tok(text, add_special_tokens=False)["input_ids"]
            cut = any(text.endswith(s) for s in params.stop_strings)
            ids = ids if cut else [*ids, self.tok.eos_token_id]
            reason = "stop_string" if cut else "stop"
            out.append([Completion(p, prompt, ids, [-0.5] * len(ids), reason, text) for _ in range(params.n)])
        return out

    def sync_weights(self, model) -> None: ...


def _example(i: int) -> Example:
    return Example(id=f"q{i}", prompt=QUESTION, reference="579", metadata={"seed": i})


def test_a_calculator_episode_end_to_end(tok) -> None:
    engine = ScriptedEngine(tok, ["<calc>123 + 456</calc>", "<answer>579</answer>"])
    stats = EpisodeStats()
    with ThreadPoolExecutor(4) as threads:
        groups = run_episodes(
            engine,
            tok,
            [(0, _example(0)), (1, _example(1))],
            lambda e: Calculator(demonstrate=False),
            SamplingParams(n=3, max_new_tokens=32),
            EpisodeLimits(),
            threads,
            stats,
        )
    assert [len(g) for g in groups] == [3, 3]
    t = groups[0][0]
    assert [s.kind for s in t.segments] == ["sampled", "context", "sampled"]
    assert "<result>579</result>" in tok.decode(t.segments[1].token_ids)
    assert t.text == "<answer>579</answer>" and t.finish_reason == "stop"
    assert t.rewards == {"env/used_tool": 1.0, "env/tool_ok": 1.0}
    assert stats.counters["turns"] == 12 and stats.counters["tool_calls"] == 6
    # the first round shares each group's prompt (n=3); later rounds decode episodes one by one
    assert engine.calls[0] == (2, 3, ("</calc>", "</tool_call>")) and engine.calls[1][1] == 1


def test_max_turns_and_the_token_budget_end_episodes(tok) -> None:
    engine = ScriptedEngine(tok, ["<calc>1+1</calc>"])  # never answers
    with ThreadPoolExecutor(2) as threads:
        by_turns = run_episodes(
            engine,
            tok,
            [(0, _example(0))],
            lambda e: Calculator(demonstrate=False),
            SamplingParams(n=1, max_new_tokens=8),
            EpisodeLimits(max_turns=3),
            threads,
        )[0][0]
        by_tokens = run_episodes(
            engine,
            tok,
            [(0, _example(0))],
            lambda e: Calculator(demonstrate=False),
            SamplingParams(n=1, max_new_tokens=8),
            EpisodeLimits(max_turns=50, max_tokens=40),
            threads,
        )[0][0]
    assert by_turns.finish_reason == "max_turns" and sum(s.kind == "sampled" for s in by_turns.segments) == 3
    assert by_tokens.finish_reason == "length" and len(by_tokens.response_ids) <= 40 + 16
    stats = EpisodeStats()
    with ThreadPoolExecutor(2) as threads:
        (by_tokens,) = run_episodes(
            engine,
            tok,
            [(0, _example(0))],
            lambda e: Calculator(demonstrate=False),
            SamplingParams(n=2, max_new_tokens=8),
            EpisodeLimits(max_turns=50, max_tokens=40),
            threads,
            stats,
        )[0][:1]
    assert stats.counters["truncated"] == 2.0  # both episodes of the group were cut

    class Slow(Environment):
        def step(self, text: str) -> Step:
            time.sleep(0.2)
            return Step([{"role": "tool", "content": "wait"}])

    stats = EpisodeStats()
    with ThreadPoolExecutor(2) as threads:
        (timed_out,) = run_episodes(
            engine,
            tok,
            [(0, _example(0))],
            lambda e: Slow(),
            SamplingParams(n=1, max_new_tokens=8),
            EpisodeLimits(max_turns=1000, max_tokens=100_000, episode_timeout_s=0.5),
            threads,
            stats,
        )[0]
    # ended by the clock well before its turn or token budget, counted, cut like a token overflow
    assert timed_out.finish_reason == "length" and stats.counters["episode_timeouts"] == 1.0
    assert stats.counters["truncated"] == 1.0 and 1 <= stats.counters["turns"] < 100


class Failing(Environment):
    def step(self, text: str) -> Step:
        raise RuntimeError("tool server down")


class Rendezvous(Environment):
    """Finishes only if all episodes of the batch are stepped at the same time."""

    barrier = threading.Barrier(4, timeout=20)

    def step(self, text: str) -> Step:
        self.barrier.wait()
        return Step(done=True, reward=1.0)


def test_environment_failures_end_the_episode_with_an_error(tok) -> None:
    engine = ScriptedEngine(tok, ["hello"])
    with ThreadPoolExecutor(2) as threads:
        t = run_episodes(
            engine,
            tok,
            [(0, _example(0))],
            lambda e: Failing(),
            SamplingParams(n=1),
            EpisodeLimits(),
            threads,
        )[0][0]
    assert t.errors == {"env": "environment raised RuntimeError: tool server down"}


def test_environment_steps_run_concurrently(tok) -> None:
    engine = ScriptedEngine(tok, ["hello"])
    with ThreadPoolExecutor(4) as threads:
        groups = run_episodes(
            engine,
            tok,
            [(0, _example(0)), (1, _example(1))],
            lambda e: Rendezvous(),
            SamplingParams(n=2),
            EpisodeLimits(),
            threads,
        )
    assert all(t.turn_rewards == [1.0] and not t.errors for g in groups for t in g)


class Stuck(Environment):
    """A step that blocks until the environment is closed; records what the rollout told it."""

    def __init__(self) -> None:
        self.closed, self.limits = threading.Event(), []

    def limit_step(self, seconds: float) -> None:
        self.limits.append(seconds)

    def step(self, text: str) -> Step:
        self.closed.wait(60)
        return Step([{"role": "tool", "content": "late"}])

    def close(self) -> None:
        self.closed.set()


class Quick(Stuck):
    def step(self, text: str) -> Step:
        return Step(done=True)


def test_a_step_past_its_time_is_closed_and_the_episode_time_bounds_a_step(tok) -> None:
    engine = ScriptedEngine(tok, ["hello"])
    envs: list[Stuck] = []

    def make(kind):
        return lambda e: envs.append(kind()) or envs[-1]

    def play(kind, limits: EpisodeLimits, stats: EpisodeStats | None = None):
        return run_episodes(
            engine, tok, [(0, _example(0))], make(kind), SamplingParams(n=1), limits, threads, stats
        )

    with ThreadPoolExecutor(2) as threads:
        start = time.monotonic()
        (t,) = play(Stuck, EpisodeLimits(step_timeout_s=0.5))[0]
        assert time.monotonic() - start < 2.0  # not the 60 s the step would block
        assert t.errors == {"env": "environment step timed out after 0.5s"}
        # told its time before the step, and closed (which here unblocks it) when that ran out
        assert envs[0].closed.is_set() and envs[0].limits == [pytest.approx(0.5, abs=0.2)]
        # the episode's own limit bounds a step too, not only the time between turns
        stats, start = EpisodeStats(), time.monotonic()
        (t,) = play(Stuck, EpisodeLimits(step_timeout_s=30.0, episode_timeout_s=0.5), stats)[0]
        assert time.monotonic() - start < 2.0
        assert t.finish_reason == "length" and not t.errors and stats.counters["episode_timeouts"] == 1.0
        assert envs[1].closed.is_set() and envs[1].limits[0] <= 0.5
        # an episode that ends normally is closed as well, when its batch is over
        (t,) = play(Quick, EpisodeLimits())[0]
        assert t.finish_reason == "stop" and envs[2].closed.is_set()


def test_calculator_tool() -> None:
    assert evaluate_expression("12 + 34 * 5") == "182" and evaluate_expression("7 / 2") == "3.5"
    for bad in ("__import__('os')", "1/0", "9**9**9", "x + 1", "1" * 300):
        with pytest.raises(ValueError):
            evaluate_expression(bad)
    assert parse_call("no call") == (None, None)
    assert parse_call('<tool_call>{"name": "search", "arguments": {}}</tool_call>')[1].startswith(
        "unknown tool"
    )
    env = Calculator()
    step = env.step("<calc>1/0</calc>")
    assert step.messages == [{"role": "tool", "content": "<result>error: division by zero</result>"}]
    assert step.info == {"tool_calls": 1.0, "tool_errors": 1.0} and not step.done
    assert env.step("<answer>3</answer>").done


def test_an_unknown_environment_is_refused_before_training(tmp_path) -> None:
    cfg = load_config(None, [*TINY_RUN, f"output_dir={tmp_path}", "env.name=no_such_env"])
    with pytest.raises(RlvrError, match="unknown environment 'no_such_env'"):
        api.train(cfg, quiet=True)


def test_a_training_step_over_two_turns(tmp_path) -> None:
    """The real loop with tiny-random: episodes of two model turns, the environment's reply as
    context, turn rewards in the total, the learner trains, and the context is never trained on."""
    cfg = load_config(
        None,
        [
            *TINY_RUN,
            f"output_dir={tmp_path}",
            "name=mt",
            "train.steps=2",
            "env.name=fixture_two_turns",
            "train.log_trajectories=true",
            "optim.lr=1e-3",
        ],
    )
    api.train(cfg, quiet=True)
    pairs = read_trajectory_groups(tmp_path / "mt" / "trajectories.jsonl")
    trajectories = [t for g, _ in pairs for t in g.trajectories]
    assert all([s.kind for s in t.segments] == ["sampled", "context", "sampled"] for t in trajectories)
    assert all(len(t.turn_rewards) == 2 for t in trajectories)
    for t in trajectories:  # the total is the reward function's plus the environment's turn rewards
        assert t.reward == pytest.approx(t.rewards["reward_fixtures:scaled_len"] + sum(t.turn_rewards))
    from rlvr.log import read_jsonl

    rows = [r for r in read_jsonl(tmp_path / "mt" / "metrics.jsonl") if r["phase"] == "train"]
    assert rows[0]["env/turns"] == 2 * 2 * 4 and "update/loss" in rows[0]
    before = load_model("tiny-random")
    after = load_model(str(tmp_path / "mt" / "checkpoints" / "step-000002" / "model"))
    assert any(not torch.equal(a, b) for a, b in zip(before.parameters(), after.parameters()))
    assert make_env("fixture_two_turns").step("x").messages == [{"role": "user", "content": "Go on."}]
    assert make_env("env_fixtures:TwoTurns").step("x").messages == [{"role": "user", "content": "Go on."}]
    samples = read_jsonl(tmp_path / "mt" / "samples.jsonl")
    assert samples and all(len(r["turn_rewards"]) == 2 for r in samples)
    for r in samples:  # the whole conversation, segment by segment, with what was trained
        assert [c["trained"] for c in r["conversation"]] == [True, False, True]
        assert "Go on." in r["conversation"][1]["text"]
    evals = [r for r in read_jsonl(tmp_path / "mt" / "metrics.jsonl") if r["phase"] != "train"]
    assert [r["eval/turns"] for r in evals] == [2.0, 2.0]  # held-out episodes play out too


def test_an_environment_dataset_source(tmp_path) -> None:
    from rlvr.data.from_config import build_datasets

    cfg = load_config("recipes/search_agent.yaml", ["data.train_size=40", "data.eval_size=10"])
    train, held_out = build_datasets(cfg.data)
    assert len(train) == 40 and len(held_out) == 10
    assert {e.question for e in train}.isdisjoint(e.question for e in held_out)
    assert all(e.metadata["env"] == "search" for e in (*train, *held_out))
    with pytest.raises(RlvrError, match="data.task: unknown environment dataset 'nope'"):
        build_datasets(load_config(None, ["data.source=env", "data.task=nope"]).data)
    with pytest.raises(RlvrError, match="data.task_config for 'search'"):
        build_datasets(load_config(None, ["data.source=env", "data.task=search"]).data)  # chain_sum's config


def test_one_turn_episodes_train_exactly_like_single_turn(tmp_path) -> None:
    """The single-turn task is the one-turn case of the same rollout: an environment that ends at the
    first turn gives the same samples, rewards, advantages, losses and weights, bit for bit. Fails if
    the episode path samples differently (another prompt, RNG use or stop handling), lays the ledger
    out differently, or scores or trains it differently."""
    from rlvr.log import read_jsonl

    common = [*TINY_RUN, f"output_dir={tmp_path}", "train.steps=2", "optim.lr=1e-3", "data.eval_size=0"]
    api.train(load_config(None, [*common, "name=single"]), quiet=True)
    api.train(load_config(None, [*common, "name=episode", "env.name=fixture_one_turn"]), quiet=True)

    def rows(name: str, log: str) -> list[dict]:
        drop = ("time/", "throughput/", "env/")  # wall clock, and the episode counters
        return [
            {k: v for k, v in r.items() if not k.startswith(drop)} for r in read_jsonl(tmp_path / name / log)
        ]

    for log in ("metrics.jsonl", "samples.jsonl"):
        single, episode = rows("single", log), rows("episode", log)
        assert single and [sorted(r) for r in single] == [sorted(r) for r in episode], log
        assert single == episode, log
    a = load_model(str(tmp_path / "single" / "checkpoints" / "step-000002" / "model"))
    b = load_model(str(tmp_path / "episode" / "checkpoints" / "step-000002" / "model"))
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


class Verbose(Environment):
    """Answers the first turn with a 300-word message, then ends."""

    def __init__(self) -> None:
        self.turns = 0

    def step(self, text: str) -> Step:
        self.turns += 1
        if self.turns == 2:
            return Step(done=True)
        return Step([{"role": "tool", "content": " ".join(f"w{i}" for i in range(300))}])


def test_long_observations_are_cut_marked_and_counted(tok) -> None:
    engine = ScriptedEngine(tok, ["look", "done"])
    runs = {}
    for cap in (None, 12):
        stats = EpisodeStats()
        with ThreadPoolExecutor(2) as threads:
            runs[cap] = run_episodes(
                engine,
                tok,
                [(0, _example(0))],
                lambda e: Verbose(),
                SamplingParams(n=1, max_new_tokens=8),
                EpisodeLimits(max_turns=3, max_tokens=4096, max_observation_tokens=cap),
                threads,
                stats,
            )[0][0]
        runs[cap, "stats"] = stats.counters
    full, cut = (len([s for s in runs[c].segments if s.kind == "context"][0].token_ids) for c in (None, 12))
    assert full > 300 and cut < 40  # 12 tokens of the message, the mark and the template's boundary
    text = tok.decode([s for s in runs[12].segments if s.kind == "context"][0].token_ids)
    assert "w0" in text and "w299" not in text and "[...]" in text
    assert runs[12, "stats"]["observation_truncated"] == 1.0
    assert "observation_truncated" not in runs[None, "stats"]


def test_the_final_eval_is_budgeted_for_the_turns_episodes_now_take() -> None:
    """A policy that learned to call a tool takes two turns where the evaluation before training saw
    one: the time budget must reserve twice the eval time (it reserved the old time and overran)."""
    from types import SimpleNamespace

    from rlvr.collect.collector import Collector

    def estimate(eval_turns: float, train_turns: float) -> float:
        state = SimpleNamespace(eval_s=30.0, _eval_turns=eval_turns, _train_turns=train_turns)
        return Collector.final_eval_s.fget(state)

    assert estimate(1.0, 2.0) == 60.0
    assert estimate(2.0, 1.0) == 30.0  # fewer turns now: keep the measured time (never less)
    assert estimate(0.0, 2.0) == 30.0  # single-turn runs: the measured time
