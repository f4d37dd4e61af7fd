"""KV reuse across turns: a turn continued from an episode's cached keys and values computes what a
prefill of the whole conversation computes, through the engine and through the episode loop."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from env_fixtures import TwoTurns  # noqa: F401  (registers the fixture environments)
from tiny import TINY_RUN

from rlvr import api
from rlvr.config import load_config
from rlvr.data.example import Example
from rlvr.envs import Environment, Step
from rlvr.log import read_jsonl
from rlvr.models import load_model, load_tokenizer
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.episodes import EpisodeLimits, run_episodes

GREEDY = SamplingParams(n=1, temperature=0.0, max_new_tokens=5, ignore_eos=True)


def _continued_vs_full(model, tok, packed: str, atol: float) -> None:
    engine = HFEngine(model, tok, packed_weights=packed, seed=0)
    prompts = [[1, 5, 9, 13, 17, 21], [1, 7, 11]]
    first, states = engine.generate_with_states(
        prompts, SamplingParams(n=2, temperature=0.0, max_new_tokens=6)
    )
    continued, cached = [], []
    for p, group, kept in zip(prompts, first, states):
        for k, (c, state) in enumerate(zip(group, kept)):
            # the cache covers the prompt and the sampled tokens but the last (never fed)
            assert state.length == len(p) + len(c.token_ids) - 1
            continued.append(p + c.token_ids + [3, 4, 5, 6][: 1 + k + len(continued)])  # ragged
            cached.append(state)
    continued.append([1, 9, 9, 9, 2])  # a conversation with no cache yet, in the same batch
    cached.append(None)
    reused, _ = engine.generate_with_states(continued, GREEDY, cached)
    full = engine.generate(continued, GREEDY)
    for a, b in zip(reused, full, strict=True):
        assert a[0].token_ids == b[0].token_ids
        assert a[0].logprobs == pytest.approx(b[0].logprobs, abs=atol)


@pytest.mark.parametrize("packed", ["off", "on"])  # transformers' decode step, the fused one
def test_a_continued_turn_equals_a_full_prefill(packed):
    """Fails if the continuation's positions, mask or cache layout are off by one anywhere."""
    _continued_vs_full(load_model("tiny-random"), load_tokenizer("tiny-random"), packed, 1e-5)


def test_a_continued_turn_equals_a_full_prefill_on_the_real_model():
    name = "smollm2-135m-instruct"
    _continued_vs_full(load_model(name), load_tokenizer(name), "auto", 1e-4)


class ThreeTurns(Environment):
    """Replies twice with a message of its own, then ends."""

    def __init__(self) -> None:
        self.turns = 0

    def step(self, text: str) -> Step:
        self.turns += 1
        if self.turns == 3:
            return Step(done=True)
        return Step([{"role": "user", "content": f"Turn {self.turns} done. Continue with more detail."}])


def test_episodes_with_kv_reuse_equal_episodes_without(monkeypatch):
    tok, model = load_tokenizer("tiny-random"), load_model("tiny-random")
    engine = HFEngine(model, tok, seed=0)
    continued = []
    original = HFEngine._continuation_inputs

    def counting(self, prompts, states):
        continued.append(sum(len(p) - s.length for p, s in zip(prompts, states) if s is not None))
        return original(self, prompts, states)

    monkeypatch.setattr(HFEngine, "_continuation_inputs", counting)
    examples = [
        (i, Example(id=f"q{i}", prompt=[{"role": "user", "content": "Hi " * (i + 1)}])) for i in range(3)
    ]
    params = SamplingParams(n=2, temperature=0.0, max_new_tokens=6)
    runs = {}
    for reuse in (True, False):
        with ThreadPoolExecutor(2) as threads:
            runs[reuse] = run_episodes(
                engine, tok, examples, lambda e: ThreeTurns(), params, EpisodeLimits(reuse_kv=reuse), threads
            )
    flat = {k: [t for g in v for t in g] for k, v in runs.items()}
    assert [len(t.segments) for t in flat[True]] == [5] * 6
    for a, b in zip(flat[True], flat[False], strict=True):
        assert [s.token_ids for s in a.segments] == [s.token_ids for s in b.segments]
        assert a.sampling_logprobs == pytest.approx(b.sampling_logprobs, abs=1e-5)
    # turns 2 and 3 were continued (once each), prefilling only what each episode gained
    assert len(continued) == 2
    whole = sum(len(t.prompt_ids) + len(t.response_ids) for t in flat[True])
    assert 0 < sum(continued) < whole / 2


def test_environment_settings_reach_the_episodes(tmp_path):
    """env.max_observation_tokens and env.reuse_kv go from the YAML to the episode loop."""
    cfg = load_config(
        None,
        [
            *TINY_RUN,
            f"output_dir={tmp_path}",
            "name=obs",
            "train.steps=1",
            "data.eval_size=0",
            "env.name=fixture_two_turns",
            "env.max_observation_tokens=1",
            "env.reuse_kv=false",
            "train.log_samples=-1",
        ],
    )
    calls = []
    original = HFEngine.generate

    def spy(self, prompts, params):
        calls.append(len(prompts))
        return original(self, prompts, params)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(HFEngine, "generate", spy)
        api.train(cfg, quiet=True)
    samples = read_jsonl(tmp_path / "obs" / "samples.jsonl")
    assert all("[...]" in r["conversation"][1]["text"] for r in samples)
    assert calls  # reuse_kv=false: every turn went through the plain generate
    rows = [r for r in read_jsonl(tmp_path / "obs" / "metrics.jsonl") if r["phase"] == "train"]
    assert rows[0]["env/observation_truncated"] == len(samples)
