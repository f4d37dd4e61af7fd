"""Prompts with images through the vLLM engine (``make vllm``; marked ``vllm``, run by
``make test-scale``): vLLM expands each image placeholder itself and samples; the trainer, given the
processor's expansion of the same prompt, recomputes the same log-probs; weight pushes reach a
VLM's vLLM copy. On ``tiny-smolvlm`` (Idefics3 on SmolLM2-135M's text side)."""

from __future__ import annotations

import pytest
import torch
from vllm_push import perturbed_and_pushed

from rlvr.data.example import Example
from rlvr.data.vision_tasks import vision_count_examples
from rlvr.errors import RlvrError
from rlvr.models.chat import encode_example
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.vllm_engine import VLLMWeightSync
from rlvr.rollout.vllm_process import find_vllm_python
from rlvr.train.learn.batch import build_batch
from rlvr.train.learn.logprobs import completion_logprobs
from rlvr.vision.prompt import VisionPrompt

MODEL = "tiny-smolvlm"  # vLLM's CPU attention takes no head_dim of 16 (tiny-random-vlm's)
TOLERANCE = 2e-3  # max |vLLM - trainer| logprob per token, fp32 on both sides (tests/test_rollout_vllm.py)


@pytest.fixture(scope="module")
def policy():
    from rlvr.models import load_model, load_tokenizer

    return load_model(MODEL).eval(), load_tokenizer(MODEL)


@pytest.fixture(scope="module")
def engine(policy, tmp_path_factory):
    from rlvr.config import load_config
    from rlvr.rollout.from_config import build_engine

    try:
        find_vllm_python()
    except RlvrError as err:
        pytest.skip(f"vLLM's environment is absent ({err})")
    model, tokenizer = policy
    cfg = load_config(
        None, [f"model.name={MODEL}", "seed=3", "rollout.engine=vllm", "rollout.vllm.max_model_len=512"]
    )
    engine = build_engine(cfg, model, tokenizer, log_dir=tmp_path_factory.mktemp("vllm"))
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def prompts(policy) -> list[list[int]]:
    _, tokenizer = policy
    text = Example(id="text", prompt=[{"role": "user", "content": "What is 2 + 2?"}])
    return [encode_example(tokenizer, e) for e in [*vision_count_examples(2, 0, "train"), text]]


def _gap(model, groups, pad_id: int, temperature: float = 1.0) -> float:
    batch = build_batch(groups, [0.0] * sum(len(g) for g in groups), pad_id)
    with torch.no_grad():
        logprobs, _ = completion_logprobs(model, batch, temperature=temperature)
    return float(((logprobs - batch.sampling_logprobs) * batch.completion_mask).abs().max())


def _greedy(engine, prompts) -> list[list[int]]:
    groups = engine.generate(prompts, SamplingParams(n=1, temperature=0.0, max_new_tokens=8, ignore_eos=True))
    return [g[0].token_ids for g in groups]


@pytest.mark.vllm
def test_vllm_samples_image_prompts_with_the_trainers_logprobs(engine, policy, prompts) -> None:
    model, tokenizer = policy
    groups = engine.generate(prompts, SamplingParams(n=3, temperature=1.0, max_new_tokens=8))
    assert [len(g) for g in groups] == [3, 3, 3]
    assert _gap(model, groups, engine.pad_id) < TOLERANCE
    assert _greedy(engine, prompts) == _greedy(HFEngine(model, tokenizer), prompts)


@pytest.mark.vllm
def test_a_weight_push_reaches_the_vlms_copy_in_vllm(engine, policy, prompts) -> None:
    """Perturb the policy (vision side included) and push it: vLLM's greedy tokens follow the new
    weights as the HF engine's do, and its log-probs stay the trainer's."""
    model, tokenizer = policy
    sync = VLLMWeightSync(engine)
    before = _greedy(engine, prompts)
    with perturbed_and_pushed(model, sync, engine, 0.3):
        after = _greedy(engine, prompts)
        assert after != before and after == _greedy(HFEngine(model, tokenizer), prompts)
        groups = engine.generate(prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=8))
        assert _gap(model, groups, engine.pad_id) < TOLERANCE
    assert _greedy(engine, prompts) == before


@pytest.mark.vllm
def test_a_prompt_without_its_placeholder_form_is_refused(engine, prompts) -> None:
    """vLLM expands images itself: a prompt that holds only the expanded ids cannot go there."""
    expanded_only = VisionPrompt(list(prompts[0]), prompts[0].inputs, 1)
    with pytest.raises(RlvrError, match="without its placeholder form"):
        engine.generate([expanded_only], SamplingParams(n=1, max_new_tokens=2))


@pytest.mark.vllm
def test_vllm_plays_episodes_with_image_observations(engine, policy) -> None:
    """FrozenLake with the board as an image in every message, sampled by vLLM (each turn's prompt
    sent with one placeholder per board): the trainer's log-probs of the sampled turns, with every
    board in its forward, are vLLM's."""
    from concurrent.futures import ThreadPoolExecutor

    from rlvr.envs.frozen_lake import FrozenLake, frozenlake_examples
    from rlvr.rollout.episodes import EpisodeLimits, run_episodes

    model, tokenizer = policy
    examples = frozenlake_examples(2, 0, "train", demonstrate=False)
    with ThreadPoolExecutor(2) as threads:
        groups = run_episodes(
            engine,
            tokenizer,
            list(enumerate(examples)),
            lambda e: FrozenLake(demonstrate=False, board="image"),
            SamplingParams(n=2, max_new_tokens=12),
            EpisodeLimits(max_turns=3, max_tokens=256),
            threads,
        )
    trajectories = [t for g in groups for t in g]
    assert any(t.response_vision is not None for t in trajectories), "no episode got a second board"
    assert _gap(model, groups, engine.pad_id) < TOLERANCE
