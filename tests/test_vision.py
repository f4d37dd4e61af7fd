"""Vision-language RL: images reach the rollout and every training forward, checkpoints keep the
processor, runs resume exactly (docs/vision.md). On ``tiny-random-vlm`` (Idefics3 on tiny-random's
text side, random SigLIP encoder) and an in-memory tiny Qwen2-VL (multimodal rotary positions)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from tiny import TINY_RUN

from rlvr import api
from rlvr.data.example import Example
from rlvr.data.vision_tasks import vision_count_examples
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl
from rlvr.models.chat import encode_example
from rlvr.models.loading import load_model, load_tokenizer
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.hf_engine import HFEngine
from rlvr.train.learn.batch import build_batch
from rlvr.train.learn.logprobs import completion_logprobs, completion_logprobs_simple
from rlvr.trajectory import Trajectory
from rlvr.vision.prompt import VisionPrompt, copy_prompt
from rlvr.vision.tower import vision_tower

VLM = "tiny-random-vlm"


@pytest.fixture(scope="module")
def vlm() -> tuple[torch.nn.Module, object]:
    return load_model(VLM), load_tokenizer(VLM)


def _text_example() -> Example:
    return Example(id="text", prompt=[{"role": "user", "content": "What is 2 + 2?"}], reference="4")


def _rollout(model, tokenizer, examples, n=2, tokens=6, **engine_kwargs):
    prompts = [encode_example(tokenizer, e) for e in examples]
    engine = HFEngine(model, tokenizer, seed=0, **engine_kwargs)
    groups = engine.generate(prompts, SamplingParams(n=n, temperature=1.0, max_new_tokens=tokens))
    return engine, prompts, groups


def _batch(groups, pad_id):
    rows = [[Trajectory.from_completion(c, i, str(i), 0) for c in g] for i, g in enumerate(groups)]
    return build_batch(rows, [0.0] * sum(len(g) for g in rows), pad_id)


def test_images_reach_the_rollout_and_both_training_forwards_in_a_mixed_batch(vlm) -> None:
    model, tokenizer = vlm
    examples = [*vision_count_examples(2, 0, "train"), _text_example()]
    engine, prompts, groups = _rollout(model, tokenizer, examples)
    assert [type(p) for p in prompts] == [VisionPrompt, VisionPrompt, list]
    image_token = model.config.image_token_id
    assert all(image_token in p for p in prompts[:2]) and image_token not in prompts[2]
    batch = _batch(groups, engine.pad_id)
    assert [v is not None for v in batch.prompt_vision] == [True, True, False]
    mask = batch.completion_mask
    # image tokens are prompt tokens: never in a completion row, so never in the loss mask
    assert not (batch.completion_ids[mask.bool()] == image_token).any()
    for path in (completion_logprobs, completion_logprobs_simple):
        logprobs, _ = path(model, batch)
        assert ((logprobs - batch.sampling_logprobs) * mask).abs().max() < 1e-4, path.__name__
    # the second image prompt's rows and the text prompt's, as micro-batching selects rows: each
    # selected prompt keeps its own images
    rows = torch.arange(2, 6)
    sub = batch.select(rows)
    logprobs, _ = completion_logprobs(model, sub)
    assert ((logprobs - sub.sampling_logprobs) * sub.completion_mask).abs().max() < 1e-4


def test_another_image_changes_the_logprobs(vlm) -> None:
    """The same completions scored under the other example's image: if images never reached the
    forward, both would score alike."""
    model, tokenizer = vlm
    examples = vision_count_examples(2, 0, "train")
    engine, prompts, groups = _rollout(model, tokenizer, examples)
    batch = _batch(groups, engine.pad_id)
    swapped = replace(batch, prompt_vision=batch.prompt_vision[::-1])
    same, _ = completion_logprobs(model, batch)
    other, _ = completion_logprobs(model, swapped)
    assert ((same - other) * batch.completion_mask).abs().max() > 1e-3


def test_a_prompt_that_lost_its_images_is_refused(vlm) -> None:
    model, tokenizer = vlm
    examples = vision_count_examples(1, 0, "train")
    engine, prompts, groups = _rollout(model, tokenizer, examples)
    batch = replace(_batch(groups, engine.pad_id), prompt_vision=None)
    with pytest.raises(RlvrError, match="no image reached the forward"):
        completion_logprobs(model, batch)
    with pytest.raises(RlvrError, match="no image reached the forward"):
        engine.generate([list(prompts[0])], SamplingParams(n=1, max_new_tokens=2))


def test_a_text_model_refuses_a_prompt_with_images() -> None:
    tokenizer = load_tokenizer("tiny-random")
    example = vision_count_examples(1, 0, "train")[0]
    with pytest.raises(RlvrError, match=r"vision_count-train-0.*image.*text-only"):
        encode_example(tokenizer, replace(example, origin=None))


def test_the_fused_decode_step_samples_what_the_vlm_forward_does(vlm) -> None:
    model, tokenizer = vlm
    examples = [*vision_count_examples(2, 1, "train"), _text_example()]
    prompts = [encode_example(tokenizer, e) for e in examples]
    params = SamplingParams(n=2, temperature=0.0, max_new_tokens=8, ignore_eos=True)
    outs = {}
    for mode in ("off", "on"):
        engine = HFEngine(model, tokenizer, seed=0, packed_weights=mode)
        outs[mode] = (engine.decode_path(6, params), engine.generate(prompts, params))
    assert outs["off"][0] == "plain" and outs["on"][0] == "fused"
    for plain, fused in zip(outs["off"][1], outs["on"][1]):
        for a, b in zip(plain, fused):
            assert a.token_ids == b.token_ids
            assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4


def test_qwen2_vl_samples_and_trains_under_its_own_3d_positions() -> None:
    """Qwen2-VL's M-RoPE: the engine and learner log-probs equal the model's own forward, which
    computes the 3-D positions itself (1-D positions give other numbers)."""
    from rlvr.vision.prompt import vision_kwargs
    from rlvr.vision.tiny import tiny_qwen2_vl

    model, processor = tiny_qwen2_vl()
    tokenizer = processor.tokenizer
    examples = [*vision_count_examples(2, 0, "train"), _text_example()]
    engine, prompts, groups = _rollout(model, tokenizer, examples)
    batch = _batch(groups, engine.pad_id)
    logprobs, _ = completion_logprobs(model, batch)
    assert ((logprobs - batch.sampling_logprobs) * batch.completion_mask).abs().max() < 1e-4
    completion = groups[0][0]
    ids = torch.tensor([list(prompts[0]) + completion.token_ids])
    with torch.no_grad():
        out = model(
            input_ids=ids,
            mm_token_type_ids=(ids == model.config.image_token_id).int(),
            **vision_kwargs([prompts[0]]),
        )
    own = torch.log_softmax(out.logits[0, len(prompts[0]) - 1 : -1], dim=-1)
    own = own.gather(-1, torch.tensor(completion.token_ids)[:, None]).squeeze(-1)
    assert (own - torch.tensor(completion.logprobs)).abs().max() < 1e-4


def _run(tmp_path, name: str, *overrides: str, resume: bool = False) -> None:
    steps = [
        *TINY_RUN,
        f"model.name={VLM}",
        "rollout.max_new_tokens=4",
        "train.steps=3",
        "train.save_every=1",
        "optim.lr=1e-2",
        "optim.warmup_steps=0",
        "algo.dynamic_sampling=false",
        f"output_dir={tmp_path}",
        f"name={name}",
        *overrides,
    ]
    api.train(api.load_config("vision_count", steps), resume=resume, quiet=True)


def _train_rows(tmp_path, name: str) -> dict[int, dict]:
    return {r["step"]: r for r in read_jsonl(tmp_path / name / "metrics.jsonl") if r["phase"] == "train"}


@pytest.mark.parametrize(
    ("tower", "text_side"), [("trained", "trained"), ("frozen", "trained"), ("trained", "frozen")]
)
def test_a_vlm_run_trains_and_its_checkpoint_reloads_with_the_processor(tmp_path, tower, text_side) -> None:
    name = f"{tower}-{text_side}"
    _run(tmp_path, name, f"model.vision_tower={tower}", f"model.text_side={text_side}", "train.steps=2")

    saved = tmp_path / name / "checkpoints" / "step-000002" / "model"
    assert (saved / "processor_config.json").is_file()
    tokenizer = load_tokenizer(str(saved))
    example = vision_count_examples(1, 0, "eval")[0]
    assert isinstance(encode_example(tokenizer, example), VisionPrompt)
    start, end = load_model(VLM), load_model(str(saved))

    def moved(part) -> bool:
        before, after = part(start).state_dict(), part(end).state_dict()
        return any(not torch.equal(before[k], after[k]) for k in before)

    assert moved(lambda m: m.model.connector)
    assert moved(lambda m: m.model.text_model) == (text_side == "trained")
    assert moved(vision_tower) == name.startswith("trained")
    # logged samples name their prompt images, written once beside the logs; the report shows them
    run_dir = tmp_path / name
    for log in ("samples.jsonl", "eval_samples.jsonl"):
        rows = [json.loads(line) for line in (run_dir / log).read_text().splitlines()]
        assert rows and all(len(r["images"]) == 1 and (run_dir / r["images"][0]).is_file() for r in rows)
    if name == "trained-trained":
        from rlvr.report.page import write_report

        page = write_report([run_dir]).read_text()
        assert page.count("data:image/png;base64,") == len(list((run_dir / "images").iterdir()))


def test_a_vlm_run_resumes_exactly(tmp_path) -> None:
    _run(tmp_path, "full")
    _run(tmp_path, "cut", "train.time_limit_s=0.001")
    _run(tmp_path, "cut", resume=True)
    full, resumed = _train_rows(tmp_path, "full"), _train_rows(tmp_path, "cut")
    assert sorted(resumed) == [1, 2, 3]
    for step in (2, 3):
        for key in ("reward/mean", "completion/mean_length", "update/loss"):
            assert resumed[step][key] == pytest.approx(full[step][key], rel=1e-5, abs=1e-7), (step, key)


def test_qwen2_vl_plays_episodes_with_image_observations_under_3d_positions() -> None:
    """Image boards in a multi-turn response with M-RoPE: the learner's positions of the response
    come from the whole sequence (each board advances them less than its token count); the engine
    re-prefills such conversations instead of continuing a cache counted in tokens."""
    from rlvr.vision.tiny import tiny_qwen2_vl

    model, processor = tiny_qwen2_vl()
    engine, groups = _image_episodes(model, processor.tokenizer)
    trajectories = [t for g in groups for t in g]
    assert any(t.response_vision is not None for t in trajectories), "no episode got a second board"
    # and an image prompt answered in text: the second turn adds no image, so a cache continued from
    # token counts would place it wrong
    text_replies = _image_episodes(model, processor.tokenizer, env=_TryAgain)[1]
    assert all(len(t.segments) == 3 and t.response_vision is None for g in text_replies for t in g)
    for run in (groups, text_replies):
        batch = build_batch(run, [0.0] * sum(len(g) for g in run), engine.pad_id)
        for path in (completion_logprobs, completion_logprobs_simple):
            logprobs, _ = path(model, batch)
            gap = ((logprobs - batch.sampling_logprobs) * batch.completion_mask).abs().max()
            assert gap < 1e-4, (path.__name__, float(gap))


class _TryAgain:
    """Two turns on the example's own image prompt; the reply between them is text only."""

    stop_strings = ()

    def __init__(self, example) -> None:
        self.turns = 0

    def reset(self, example, rng):
        return list(example.prompt)

    def step(self, text: str):
        from rlvr.envs.base import Step

        self.turns += 1
        return Step([{"role": "user", "content": "Try again."}], done=self.turns >= 2)

    def outcome(self) -> dict:
        return {}


def _image_episodes(model, tokenizer, reuse_kv: bool = True, env=None):
    """Episodes of FrozenLake with image boards, or of ``env(example)`` on vision_count examples."""
    from concurrent.futures import ThreadPoolExecutor

    from rlvr.envs.frozen_lake import FrozenLake, frozenlake_examples
    from rlvr.rollout.episodes import EpisodeLimits, run_episodes

    if env is None:
        examples = frozenlake_examples(2, 0, "train", demonstrate=False)
        env = lambda e: FrozenLake(demonstrate=False, board="image")  # noqa: E731
    else:
        examples = vision_count_examples(2, 0, "train")
    engine = HFEngine(model, tokenizer, seed=0)
    with ThreadPoolExecutor(2) as threads:
        groups = run_episodes(
            engine,
            tokenizer,
            list(enumerate(examples)),
            env,
            SamplingParams(n=2, max_new_tokens=6),
            EpisodeLimits(max_turns=3, max_tokens=256, reuse_kv=reuse_kv),
            threads,
        )
    return engine, groups


@pytest.mark.parametrize("reuse_kv", [True, False])
def test_a_multi_turn_episode_with_image_observations_keeps_a_token_exact_ledger(vlm, reuse_kv) -> None:
    """A rendered FrozenLake board in every message: the first in the prompt, later ones among the
    response's context tokens (never trained on); the learner's log-probs of the sampled turns equal
    the sampler's, which saw each board (through the KV cache or a re-prefill)."""
    model, tokenizer = vlm
    image_token = model.config.image_token_id
    engine, groups = _image_episodes(model, tokenizer, reuse_kv)
    trajectories = [t for g in groups for t in g]
    assert all(isinstance(t.prompt_ids, VisionPrompt) and t.prompt_ids.images == 1 for t in trajectories)
    multi = [t for t in trajectories if len(t.segments) > 1]
    assert multi, "no episode went past its first turn"
    for t in multi:
        ids = torch.tensor(t.response_ids)
        mask = torch.tensor(t.loss_mask).bool()
        images = int((ids == image_token).sum()) // 4  # 4 image tokens an image (tiny-random-vlm)
        assert images >= 1 and t.response_vision.images == images
        assert not (ids[mask] == image_token).any()  # image tokens are context: never trained on
    batch = build_batch(groups, [0.0] * len(trajectories), engine.pad_id)
    assert batch.completion_vision is not None
    for path in (completion_logprobs, completion_logprobs_simple):
        logprobs, _ = path(model, batch)
        gap = ((logprobs - batch.sampling_logprobs) * batch.completion_mask).abs().max()
        assert gap < 1e-4, (path.__name__, float(gap))
    with pytest.raises(RlvrError, match="no image reached the forward"):
        completion_logprobs(model, replace(batch, completion_vision=None))


def test_lora_on_a_vlm_adapts_the_language_side_only() -> None:
    from rlvr.config.schema import LoraConfig
    from rlvr.models.lora import apply_lora

    model = apply_lora(load_model(VLM), LoraConfig(r=4, alpha=8))
    trained = [name for name, p in model.named_parameters() if p.requires_grad]
    assert trained and all("lora_" in name for name in trained)
    assert all("text_model" in name for name in trained), [n for n in trained if "text_model" not in n][:3]


def test_a_run_with_image_observations_logs_every_board_it_showed(tmp_path) -> None:
    """FrozenLake with the board as an image: each logged sample names the PNG of every board its
    episode showed (the opening one and one per later turn), written once each; the report embeds
    them."""
    from rlvr.report.page import write_report

    overrides = [
        *TINY_RUN,
        f"model.name={VLM}",
        "env.params.board=image",
        "data.task_config.demonstrate=false",
        "env.max_turns=3",
        "algo.dynamic_sampling=false",
        "train.steps=1",
        f"output_dir={tmp_path}",
        "name=boards",
    ]
    api.train(api.load_config("frozenlake", overrides), quiet=True)
    run_dir = tmp_path / "boards"
    rows = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert rows
    for r in rows:  # the opening board, and one after each step that did not end the episode
        turns = len(r["turn_rewards"])
        assert turns <= len(r["images"]) <= turns + 1, (turns, r["images"], r["finish_reason"])
        assert all((run_dir / path).is_file() for path in r["images"])
    assert max(len(r["images"]) for r in rows) >= 2, "no episode showed a second board"
    files = list((run_dir / "images").iterdir())
    page = write_report([run_dir]).read_text()
    assert page.count("data:image/png;base64,") == len(files)


def test_a_datasets_prompts_hold_no_pixel_tensors_until_drawn(vlm) -> None:
    """The collector keeps every training prompt: their pixel tensors (fp32, several times an image's
    size) are made when a prompt is drawn, for that call only."""
    _, tokenizer = vlm
    prompt = encode_example(tokenizer, vision_count_examples(1, 0, "train")[0])
    assert prompt._inputs is None
    copy = copy_prompt(prompt)
    assert copy._inputs is not None and prompt._inputs is None
    assert all(torch.equal(copy.inputs[k], prompt.inputs[k]) for k in copy.inputs)
