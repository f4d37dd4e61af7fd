"""KV reuse across turns: a turn continued from an episode's cached keys and values computes what a
prefill of the whole conversation computes, through the engine and through the episode loop.

Tolerances: logprobs of the same tokens agree within 1e-5 on tiny-random and 1e-4 on SmolLM2 (fp32:
the continuation sums attention over the same keys in another order and with masked holes)."""

from __future__ import annotations

import gc
import logging
import weakref
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
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


def _continued_vs_full(engine: HFEngine, atol: float) -> None:
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


# (decode path, engine settings, attention): transformers' decode step, the fused Llama step, the
# packed nn.Linear copies; and transformers' eager attention instead of rlvr_sdpa for the prefills
PATHS = [
    ("plain", {"packed_weights": "off"}, None),
    ("fused", {"packed_weights": "on"}, None),
    ("packed", {"packed_weights": "on", "fuse_layers": False}, None),
    ("plain", {"packed_weights": "off"}, "eager"),
]


@pytest.mark.parametrize(("path", "settings", "attention"), PATHS, ids=["plain", "fused", "packed", "eager"])
def test_a_continued_turn_equals_a_full_prefill(path, settings, attention):
    """Fails if the continuation's positions, mask or cache layout are off by one anywhere."""
    model, tok = load_model("tiny-random"), load_tokenizer("tiny-random")
    if attention is not None:
        model.set_attn_implementation(attention)
    engine = HFEngine(model, tok, seed=0, **settings)
    if engine.decode_path(4, GREEDY) != path:
        pytest.skip(f"the {path} decode path is not available here (needs MKL, fp32, CPU)")
    _continued_vs_full(engine, 1e-5)


def test_a_continued_turn_equals_a_full_prefill_on_the_real_model():
    name = "smollm2-135m-instruct"
    _continued_vs_full(HFEngine(load_model(name), load_tokenizer(name), seed=0), 1e-4)


def test_states_from_older_weights_are_prefilled_again():
    """After a weight sync between turns, a kept cache is what the old weights computed: the engine
    must re-prefill (equal to a full prefill under the new weights), not continue it."""
    model, tok = load_model("tiny-random"), load_tokenizer("tiny-random")
    engine = HFEngine(model, tok, packed_weights="off", seed=0)
    prompt = [1, 5, 9, 13, 17, 21]
    [[first]], [[state]] = engine.generate_with_states(
        [prompt], SamplingParams(temperature=0.0, max_new_tokens=4)
    )
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    engine.policy_version += 1
    ids = prompt + first.token_ids + [3, 4]
    [[continued]], [[kept]] = engine.generate_with_states([ids], GREEDY, [state])
    [[full]] = engine.generate([ids], GREEDY)
    assert continued.token_ids == full.token_ids
    assert continued.logprobs == pytest.approx(full.logprobs, abs=1e-5)
    assert kept.version == engine.policy_version


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
    # the prompts share their chat template's head: without share_prefix=False every first turn (and
    # every turn without reuse) would continue from that prefix too (tests/test_rollout_prefix.py)
    engine = HFEngine(model, tok, seed=0, share_prefix=False)
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


class Staggered(Environment):
    """Episode k (in creation order) ends after 1 + k % 4 model turns and answers each turn with a
    message of its own length, so live episodes, within a group too, differ in length and end at
    different turns. Turns end at a stop string, so they differ in length as well."""

    created = 0
    stop_strings = ("e",)

    def __init__(self) -> None:
        self.k, self.turns = Staggered.created, 0
        Staggered.created += 1

    def step(self, text: str) -> Step:
        self.turns += 1
        if self.turns > self.k % 4:
            return Step(done=True)
        return Step([{"role": "user", "content": "more " * (1 + (3 * self.k + self.turns) % 7)}])


def _staggered_runs(engines, tok, examples, params: SamplingParams, reuse_kv=(True, False)) -> dict:
    """The same episodes played with each ``reuse_kv`` setting (``engines()``: a fresh engine per
    run, so sampled runs start from the same generator state)."""
    runs = {}
    for reuse in reuse_kv:
        Staggered.created = 0
        with ThreadPoolExecutor(2) as threads:
            groups = run_episodes(
                engines(),
                tok,
                examples,
                lambda e: Staggered(),
                params,
                EpisodeLimits(max_turns=5, max_tokens=200, reuse_kv=reuse),
                threads,
            )
        runs[reuse] = [t for g in groups for t in g]
    return runs


class _Engines:
    def __init__(self, name: str, seed: int = 0, **settings) -> None:
        self.model, self.tokenizer = load_model(name), load_tokenizer(name)
        self.seed, self.settings = seed, settings

    def __call__(self) -> HFEngine:
        return HFEngine(self.model, self.tokenizer, seed=self.seed, **self.settings)


def _examples(count: int) -> list[tuple[int, Example]]:
    words = ["Hi", "Tell me a long story about the sea", "Count"]
    return [
        (i, Example(id=f"q{i}", prompt=[{"role": "user", "content": words[i % 3]}])) for i in range(count)
    ]


def _assert_same_episodes(runs: dict, atol: float) -> None:
    for a, b in zip(runs[True], runs[False], strict=True):
        assert [(s.kind, s.token_ids) for s in a.segments] == [(s.kind, s.token_ids) for s in b.segments]
        assert a.finish_reason == b.finish_reason
        assert a.sampling_logprobs == pytest.approx(b.sampling_logprobs, abs=atol)


def test_staggered_episodes_with_kv_reuse_equal_the_naive_loop(monkeypatch):
    """Greedy, groups of 3, episodes of different lengths ending at turns 1 to 4: the same tokens,
    logprobs within 1e-5; and an ended episode's cache is freed (memory follows live episodes)."""
    engines = _Engines("tiny-random", packed_weights="off")
    states, passed = [], []
    original = HFEngine.generate_with_states

    def spy(self, prompts, params, kept=None):
        gc.collect()
        held = sum(ref() is not None for ref in states)
        passed.append((held, sum(k is not None for k in kept or [])))
        out, new = original(self, prompts, params, kept)
        states.extend(weakref.ref(k) for g in new for k in g)
        return out, new

    monkeypatch.setattr(HFEngine, "generate_with_states", spy)
    runs = _staggered_runs(
        engines, engines.tokenizer, _examples(3), SamplingParams(n=3, temperature=0.0, max_new_tokens=6)
    )
    _assert_same_episodes(runs, 1e-5)
    turns = [sum(s.kind == "sampled" for s in t.segments) for t in runs[True]]
    assert sorted(set(turns)) == [1, 2, 3, 4]  # the schedule ran: episodes ended at every turn
    # every round after the first continued its live episodes, and only theirs are held
    assert len(passed) == 4 and passed[0] == (0, 0)
    assert all(held == live > 0 for held, live in passed[1:])
    assert [live for _, live in passed[1:]] == [sum(t >= r for t in turns) for r in (2, 3, 4)]


def test_sampled_episodes_with_kv_reuse_equal_the_naive_loop():
    """Temperature 0.9, top-p 0.95, same seed: the same tokens; their logprobs within 1e-4 of the
    naive loop's and of a full forward over the whole conversation (what the trainer recomputes)."""
    engines = _Engines("tiny-random", seed=5)
    params = SamplingParams(n=2, temperature=0.9, top_p=0.95, max_new_tokens=6)
    runs = _staggered_runs(engines, engines.tokenizer, _examples(2), params)
    _assert_same_episodes(runs, 1e-4)
    sampled_turns = [s for t in runs[True] for s in t.segments if s.kind == "sampled"]
    assert len({len(s.token_ids) for s in sampled_turns}) > 1  # turns cut at the stop string: ragged
    for t in runs[True]:
        ids = torch.tensor([t.prompt_ids + t.response_ids])
        with torch.no_grad():
            logits = engines.model(input_ids=ids).logits[0].float() / params.temperature
        full = torch.log_softmax(logits, -1)[len(t.prompt_ids) - 1 : -1].gather(
            -1, ids[0, len(t.prompt_ids) :, None]
        )
        sampled = torch.tensor(t.loss_mask).bool()
        got = torch.tensor(t.sampling_logprobs)[sampled]
        assert torch.allclose(got, full.squeeze(-1)[sampled], atol=1e-4)


class GenerateOnly:
    """An engine with the :class:`~rlvr.rollout.base.RolloutEngine` protocol and nothing more."""

    def __init__(self, inner: HFEngine) -> None:
        self.inner, self.generator, self.pad_id = inner, inner.generator, inner.pad_id
        self.policy_version, self.stop_token_ids = 0, inner.stop_token_ids

    def generate(self, prompts, params):
        return self.inner.generate(prompts, params)

    def sync_weights(self, model) -> None: ...


def test_an_engine_without_kept_states_prefills_every_turn_and_says_so_once(monkeypatch, caplog):
    from rlvr.rollout import episodes

    monkeypatch.setattr(episodes, "_told_no_kv_reuse", set())
    engines = _Engines("tiny-random", packed_weights="off")
    expected = _staggered_runs(engines, engines.tokenizer, _examples(2), GREEDY, reuse_kv=(False,))[False]
    with caplog.at_level(logging.WARNING, logger="rlvr.rollout.episodes"):
        for _ in range(2):
            runs = _staggered_runs(
                lambda: GenerateOnly(engines()), engines.tokenizer, _examples(2), GREEDY, reuse_kv=(True,)
            )
    told = [r for r in caplog.records if "reuse_kv" in r.getMessage()]
    assert len(told) == 1 and "GenerateOnly" in told[0].getMessage()
    assert [t.response_ids for t in runs[True]] == [t.response_ids for t in expected]


def test_real_model_episodes_with_kv_reuse_equal_the_naive_loop():
    engines = _Engines("smollm2-135m-instruct")
    runs = _staggered_runs(
        engines, engines.tokenizer, _examples(2), SamplingParams(n=2, temperature=0.0, max_new_tokens=8)
    )
    _assert_same_episodes(runs, 1e-4)
    assert max(sum(s.kind == "sampled" for s in t.segments) for t in runs[True]) >= 3


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
