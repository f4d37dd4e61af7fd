"""Exploration at rollout time (the algorithm zoo's second wave): an adaptive temperature (E3, seeds
003:26), intent-factored generation (IFG, seeds 002:19) and parameter noise (AQN, seeds 003:64).

Each rule against numbers worked out by hand; the engine's per-row temperature against a
teacher-forced forward; then the trainer wiring through real tiny runs: the adapted temperature
reaches the learner and resumes bit for bit, IFG trains, and AQN's noise never outlives a rollout
nor reaches an evaluation.
"""

from __future__ import annotations

import math

import pytest
import torch
from tiny import TINY_RUN

from rlvr import api
from rlvr.config import load_config
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl
from rlvr.models import load_model, load_tokenizer
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.exploration import (
    TemperatureController,
    next_temperature,
    noise_generator,
    noise_std,
    norm_weights,
    parameter_noise,
    sampled_entropy,
)
from rlvr.rollout.hf_engine import _tail_tokens
from rlvr.rollout.sampling import sample_next
from rlvr.trajectory import GIVEN, SAMPLED, Segment, Trajectory, TrajectoryGroup

LN2 = math.log(2.0)


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-random"), load_tokenizer("tiny-random")


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ------------------------------------------------------------------------- adaptive temperature
def test_next_temperature_steps_towards_the_target_and_clamps() -> None:
    assert next_temperature(1.0, 0.3, 0.5, 0.05, 0.6, 1.4) == pytest.approx(1.05)  # too cold: up
    assert next_temperature(1.0, 0.7, 0.5, 0.05, 0.6, 1.4) == pytest.approx(0.95)  # too hot: down
    assert next_temperature(1.0, 0.5, 0.5, 0.05, 0.6, 1.4) == 1.0  # on target: stays
    assert next_temperature(1.38, 0.1, 0.5, 0.05, 0.6, 1.4) == 1.4  # clamped above
    assert next_temperature(0.62, 0.9, 0.5, 0.05, 0.6, 1.4) == 0.6  # clamped below


def test_sampled_entropy_is_the_mean_negative_logprob_of_sampled_tokens() -> None:
    a = Trajectory(
        prompt_ids=[1],
        segments=[Segment(SAMPLED, [5, 6], [-1.0, -2.0]), Segment(GIVEN, [7])],
        finish_reason="stop",
    )
    b = Trajectory(prompt_ids=[1], segments=[Segment(SAMPLED, [8], [-0.5])], finish_reason="stop")
    groups = [TrajectoryGroup(0, [a]), TrajectoryGroup(1, [b])]
    assert sampled_entropy(groups) == pytest.approx((1.0 + 2.0 + 0.5) / 3)  # the given token is out
    assert sampled_entropy([]) is None


def test_temperature_controller_moves_once_a_step_and_keeps_its_state() -> None:
    cfg = load_config(None, ["rollout.temperature_control.target=0.5"]).rollout.temperature_control
    ctl = TemperatureController(cfg, 1.0)
    ctl.observe(0.2)
    ctl.observe(0.2)
    assert ctl.temperature == pytest.approx(1.1)
    ctl.observe(None)  # a step that sampled nothing leaves it
    again = TemperatureController(cfg, 1.0)
    again.load_state(ctl.state())
    assert again.temperature == ctl.temperature


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["rollout.temperature_control.target=0.5", "rollout.temperature=2.0"], "rollout.temperature="),
        (["rollout.temperature_control.min=1.5", "rollout.temperature_control.max=1.0"], "min="),
        (["rollout.temperature_control.step=0"], "rollout.temperature_control.step"),
        (["rollout.ifg.temperature=1.5", "rollout.engine=vllm"], "rollout.ifg.temperature"),
        (["rollout.ifg.temperature=1.5", "rollout.temperature=0"], "rollout.ifg.temperature"),
        (["rollout.ifg.end="], "rollout.ifg.end"),
        (["rollout.param_noise.std=0.01", "rollout.engine=vllm"], "rollout.param_noise.std"),
        (["rollout.param_noise.decay=1.5"], "rollout.param_noise.decay"),
        (["rollout.param_noise.std=0.01", "rollout.param_noise.min_std=0.1"], "min_std"),
    ],
)
def test_bad_exploration_settings_are_refused_naming_the_key(overrides: list[str], key: str) -> None:
    with pytest.raises(RlvrError, match=key.replace(".", r"\.")):
        load_config(None, overrides)


def test_adaptive_temperature_reaches_the_trainer_and_resumes_bit_for_bit(tmp_path) -> None:
    """The temperature climbs 1.0, 1.1, 1.2, 1.3 (the target is out of reach); the learner recomputes
    log-probs at the step's temperature (the engine and trainer agree to rounding, where the fixed
    1.0 would differ by tenths of a nat); 4 steps straight equal 1, a stop, a resume and 3 more."""
    base = [
        *TINY_RUN,
        "data.train_size=4",
        "data.eval_size=0",
        "eval.before=false",
        "train.steps=4",
        "train.save_every=2",
        "algo.dynamic_sampling=false",
        "rollout.temperature_control.target=50",
        "rollout.temperature_control.step=0.1",
        "rollout.temperature_control.max=2.0",
    ]

    def cfg(name: str, *extra: str):
        return load_config(None, [*base, f"output_dir={tmp_path}", f"name={name}", *extra])

    api.train(cfg("full"), quiet=True)
    api.train(cfg("cut", "train.time_limit_s=0.001"), quiet=True)  # stops after step 1, checkpointed
    api.train(cfg("cut"), resume=True, quiet=True)

    def rows(name: str) -> list[dict]:
        train = [r for r in read_jsonl(tmp_path / name / "metrics.jsonl") if r["phase"] == "train"]
        return [{k: v for k, v in r.items() if not k.startswith(("time/", "throughput/"))} for r in train]

    full = rows("full")
    assert [r["rollout/temperature"] for r in full] == pytest.approx([1.0, 1.1, 1.2, 1.3])
    assert all(r["mismatch/logprob_diff_max"] < 1e-4 for r in full)
    assert all(r["rollout/sampled_entropy"] > 0 for r in full)
    assert [r["step"] for r in rows("cut")] == [1, 2, 3, 4]
    assert rows("cut") == full


def test_the_adapted_temperature_is_what_the_engine_samples_at_and_the_trainer_reads(tmp_path) -> None:
    from rlvr.train.loop.orchestrator import Orchestrator

    cfg = load_config(
        None,
        [*TINY_RUN, f"output_dir={tmp_path}", "rollout.temperature_control.target=50",
         "rollout.temperature_control.step=0.25", "rollout.temperature_control.max=1.4"],
    )  # fmt: skip
    orch = Orchestrator(cfg, quiet=True)
    try:
        engine, used = orch.collector.engine, []
        generate = engine.generate
        engine.generate = lambda prompts, params: used.append(params.temperature) or generate(prompts, params)
        for expected in (1.0, 1.25, 1.4, 1.4):
            collection = orch.collector.collect()
            assert collection.metrics["rollout/temperature"] == expected
            assert cfg.rollout.temperature == expected  # what the learner recomputes log-probs with
        assert used == [1.0, 1.25, 1.4, 1.4]
    finally:
        orch.close()


def test_adaptive_temperature_refuses_asynchronous_collection(tmp_path) -> None:
    c = load_config(
        None,
        [*TINY_RUN, "train.steps=1", "train.max_staleness=1", "rollout.temperature_control.target=1",
         f"output_dir={tmp_path}"],
    )  # fmt: skip
    with pytest.raises(RlvrError, match=r"train\.max_staleness"):
        api.train(c, quiet=True)


# ------------------------------------------------------------------------- IFG
def test_sample_next_takes_each_rows_own_temperature() -> None:
    """Logits (0, 2 ln 2): at T=2 the probabilities are (1/3, 2/3), at T=1 (1/5, 4/5)."""
    logits = torch.tensor([[0.0, 2 * LN2], [0.0, 2 * LN2]]).repeat(2_000, 1)
    temps = torch.tensor([2.0, 1.0]).repeat(2_000)
    tokens, logprobs = sample_next(
        logits, SamplingParams(temperature=0.5), torch.Generator().manual_seed(0), temps
    )
    expected = torch.tensor([[1 / 3, 2 / 3], [1 / 5, 4 / 5]]).log().repeat(2_000, 1)
    assert torch.allclose(logprobs, expected.gather(1, tokens[:, None]).squeeze(1), atol=1e-6)
    hot = tokens[0::2].float().mean().item()  # the share of token 1 in the T=2 rows
    cold = tokens[1::2].float().mean().item()
    assert hot == pytest.approx(2 / 3, abs=0.03) and cold == pytest.approx(4 / 5, abs=0.03)


def _intent_length(tokenizer, ids: list[int], end: str, limit: int | None) -> int:
    """Tokens in the intent by the rule: up to the first token at which ``end`` shows in the tail."""
    tail = _tail_tokens((end,))
    for i in range(len(ids)):
        if limit is not None and i + 1 >= limit:
            return i + 1
        if end in tokenizer.decode(ids[max(0, i + 1 - tail) : i + 1], skip_special_tokens=False):
            return i + 1
    return len(ids)


@pytest.mark.parametrize("end, limit", [("e", None), ("\n", 3)])
def test_ifg_samples_the_intent_hot_and_records_each_tokens_logprob(
    tiny, end: str, limit: int | None
) -> None:
    """Per sequence, the tokens up to the one that completes ``end`` (or ``limit`` tokens) carry the
    intent temperature, the rest the answer temperature; every recorded logprob is the token's
    log-probability under the temperature it was drawn at, recomputed by a teacher-forced forward."""
    model, tokenizer = tiny
    prompts = [[11, 12, 13], [40, 41, 42, 43, 44]]
    params = SamplingParams(
        n=4,
        temperature=0.6,
        max_new_tokens=10,
        intent_temperature=1.7,
        intent_end=end,
        intent_max_tokens=limit,
    )
    groups = HFEngine(model, tokenizer, seed=4).generate(prompts, params)
    lengths = set()
    for prompt, group in zip(prompts, groups):
        for c in group:
            k = _intent_length(tokenizer, c.token_ids, end, limit)
            lengths.add(k)
            assert c.temperatures == [1.7] * k + [0.6] * (len(c.token_ids) - k)
            with torch.no_grad():
                logits = model(torch.tensor([prompt + c.token_ids])).logits[0, len(prompt) - 1 : -1]
            temps = torch.tensor(c.temperatures)[:, None]
            expected = torch.log_softmax(logits / temps, -1).gather(1, torch.tensor(c.token_ids)[:, None])
            assert c.logprobs == pytest.approx(expected.squeeze(1).tolist(), abs=1e-4)
    assert len(lengths) > 1 or limit is not None  # the switch is per sequence
    plain = HFEngine(model, tokenizer, seed=4).generate(prompts, SamplingParams(n=2, max_new_tokens=4))
    assert all(c.temperatures is None for g in plain for c in g)


def test_ifg_trains_and_logs_its_intents(tmp_path) -> None:
    c = load_config(
        None,
        [*TINY_RUN, "train.steps=2", "eval.before=false", "data.eval_size=0", f"output_dir={tmp_path}",
         "rollout.temperature=0.7", "rollout.ifg.temperature=1.3", "rollout.ifg.max_tokens=3",
         "algo.loss=tis", "algo.dynamic_sampling=false"],
    )  # fmt: skip
    api.train(c, quiet=True)
    rows = [r for r in read_jsonl(tmp_path / c.name / "metrics.jsonl") if r["phase"] == "train"]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:  # tiny-random rarely says "\n": most intents run to the 3-token cap
        assert 1 <= r["rollout/intent_tokens"] <= 3 and 0 <= r["rollout/intent_ended"] <= 1
        assert math.isfinite(r["update/loss"]) and r["mismatch/logprob_diff_max"] > 0.01  # hot intents


# ------------------------------------------------------------------------- AQN
def test_noise_std_decays_geometrically_to_its_floor() -> None:
    cfg = load_config(None, ["rollout.param_noise.std=0.01", "rollout.param_noise.decay=0.5",
                             "rollout.param_noise.min_std=0.002"]).rollout.param_noise  # fmt: skip
    assert [noise_std(cfg, k) for k in (1, 2, 3, 4, 5)] == pytest.approx([0.01, 0.005, 0.0025, 0.002, 0.002])
    assert noise_std(load_config(None, []).rollout.param_noise, 3) == 0.0


def test_parameter_noise_perturbs_the_norm_weights_and_restores_them_bit_for_bit(tiny) -> None:
    model, _ = tiny
    before = _state(model)
    norms = {id(w) for w in norm_weights(model)}
    assert len(norms) == 5  # tiny-random: two layers' two RMSNorms and the final one
    with parameter_noise(model, 0.1, noise_generator(0, 1)) as count:
        assert count == 5
        draw = noise_generator(0, 1)  # the same draws, in the same order
        for name, p in model.named_parameters():
            if id(p) in norms:
                noise = torch.randn(p.shape, generator=draw) * 0.1
                assert torch.allclose(p - before[name], noise, atol=1e-6)
            else:
                assert torch.equal(p, before[name])
    assert _same(_state(model), before)
    with pytest.raises(RuntimeError), parameter_noise(model, 0.1, noise_generator(0, 2)):
        raise RuntimeError("a failed rollout")
    assert _same(_state(model), before)


AQN_RUN = [*TINY_RUN, "data.train_size=8", "algo.dynamic_sampling=false", "optim.lr=1e-3"]


def test_aqn_rollouts_see_the_noise_and_updates_and_evaluations_do_not(tmp_path) -> None:
    """Through the trainer: every training rollout samples from noisy norm weights, every
    evaluation from the clean ones; after a step's rollout the weights are bit for bit those before
    it, and the update from there equals, bit for bit, a noise-free learner's update on the same
    groups."""
    from rlvr.train.loop.orchestrator import Orchestrator

    def orchestrator(name: str, *extra: str) -> Orchestrator:
        cfg = load_config(None, [*AQN_RUN, f"output_dir={tmp_path}", f"name={name}", *extra])
        return Orchestrator(cfg, quiet=True)

    noisy = orchestrator("noisy", "rollout.param_noise.std=0.5", "rollout.param_noise.decay=0.5")
    clean = orchestrator("clean")
    try:
        engine, model = noisy.collector.engine, noisy.learner.model
        assert engine.model is model  # one module: the noise must leave it before the update
        seen = []  # (sampling?, norm weights perturbed?) of every generate call
        generate = engine.generate

        def spy(prompts, params):
            original = dict(clean.learner.model.named_parameters())
            perturbed = any(not torch.equal(p, original[n]) for n, p in model.named_parameters())
            seen.append((params.temperature > 0, perturbed))
            return generate(prompts, params)

        engine.generate = spy
        for step in (1, 2):
            before = _state(model)
            assert _same(before, _state(clean.learner.model))
            collection = noisy.collector.collect()
            assert collection.metrics["rollout/param_noise_std"] == 0.5**step
            assert _same(_state(model), before)  # the rollout left no trace
            noisy.learner.update(collection.kept, collection.seen)
            clean.learner.update(collection.kept, collection.seen)
            assert _same(_state(model), _state(clean.learner.model))
            assert not _same(_state(model), before)  # the update did change them
            noisy.run_eval("periodic")
        assert seen and all(perturbed == sampling for sampling, perturbed in seen)
        assert {s for s, _ in seen} == {True, False}  # both rollouts and evaluations were watched
    finally:
        noisy.close()
        clean.close()


def test_aqn_trains_and_logs_its_std(tmp_path) -> None:
    c = load_config(
        None,
        [*AQN_RUN, "train.steps=2", f"output_dir={tmp_path}", "rollout.param_noise.std=0.02",
         "rollout.param_noise.decay=0.5"],
    )  # fmt: skip
    api.train(c, quiet=True)
    rows = [r for r in read_jsonl(tmp_path / c.name / "metrics.jsonl") if r["phase"] == "train"]
    assert [r["rollout/param_noise_std"] for r in rows] == [0.02, 0.01]
