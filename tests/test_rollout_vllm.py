"""The vLLM engine for real: a vLLM server process in its own environment (``make vllm``), the
bundled SmolLM2-135M, weights pushed through vLLM's weight-transfer API.

Tests marked ``vllm`` need ``.venv-vllm`` and are skipped, with that reason, where it is absent.
They share one server (about 30-60 s to start on the 2-core CPU); the GRPO run reaches it by URL.
Measured here (CPU, fp32 on both sides, 2026-11-24): vLLM's sampling logprobs and the trainer's
recomputation of the same tokens differ by at most 5.6e-5 (mean 1e-5); the tolerance is 2e-3, the
one the HF engine's own test uses.
"""

from __future__ import annotations

import ast
import copy
import os
import signal
import sys
from pathlib import Path

import pytest
import torch
from tiny import SMOLLM_RUN
from vllm_push import perturbed_and_pushed

from rlvr.errors import RlvrError
from rlvr.models.chat import encode_prompt
from rlvr.rollout import HFEngine, SamplingParams, vllm_process
from rlvr.rollout.vllm_engine import VLLMWeightSync
from rlvr.rollout.vllm_process import VLLMServer, VLLMServerError, find_vllm_python

MODEL = "smollm2-135m-instruct"
TOLERANCE = 2e-3  # max |vLLM - trainer| logprob per token, fp32 on both sides
LORA_RANK = 8
QUESTIONS = ["What is 17 + 25? Answer with a number.", "Name three colours."]


def _vllm_python() -> Path:
    try:
        return find_vllm_python()
    except RlvrError as err:
        pytest.skip(f"vLLM's environment is absent ({err})")


# ----------------------------------------------------------------------------- without vLLM
def test_server_imports_only_vllm_torch_and_the_standard_library() -> None:
    """The server runs in vLLM's environment, where rlvr's dependencies (its transformers) are not
    the ones rlvr pins: it may import the standard library, torch and vllm, and PIL (a dependency of
    vLLM itself, which takes images as PIL images), nothing else."""
    tree = ast.parse(vllm_process.SERVER_FILE.read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            roots.add(node.module.split(".")[0])
    allowed = set(sys.stdlib_module_names) | {"torch", "vllm", "PIL", "__future__"}
    assert roots - allowed == set()
    assert {"torch", "vllm"} <= roots


def test_missing_environment_says_run_make_vllm(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("RLVR_VLLM_PYTHON", raising=False)
    monkeypatch.setattr(vllm_process, "candidate_venvs", lambda: [tmp_path / ".venv-vllm"])
    with pytest.raises(RlvrError, match=r"run `make vllm`"):
        find_vllm_python()
    with pytest.raises(RlvrError, match="rollout.vllm.python"):
        find_vllm_python(str(tmp_path / "nope" / "python"))


def test_a_server_that_fails_to_start_is_an_error_with_its_log(tmp_path) -> None:
    """This interpreter has no vllm: the server exits at its first import, and the error says so."""
    with pytest.raises(
        VLLMServerError, match=r"exited with code 1 while starting(.|\n)*No module named 'vllm'"
    ):
        VLLMServer.start(Path(sys.executable), ["--model", str(tmp_path)], tmp_path, startup_timeout_s=120)


def test_config_takes_lora_with_vllm_up_to_vllms_largest_rank() -> None:
    from rlvr.config import load_config

    cfg = load_config(None, ["rollout.engine=vllm", "model.lora.r=8"])
    assert cfg.rollout.vllm.lora_sync == "adapter"
    with pytest.raises(Exception, match="rollout.vllm.lora_sync=merged"):
        load_config(None, ["rollout.engine=vllm", "model.lora.r=1024"])
    assert load_config(None, ["rollout.engine=vllm", "model.lora.r=1024", "rollout.vllm.lora_sync=merged"])


def test_config_takes_one_gpu_id_from_the_command_line_and_torchrun_refuses_a_shared_url() -> None:
    from rlvr.config import load_config
    from rlvr.train.scale.distributed import check_distributed

    assert load_config(None, ["rollout.vllm.gpus=1"]).rollout.vllm.gpus == "1"
    assert load_config(None, ["rollout.vllm.gpus='0,1'"]).rollout.vllm.gpus == "0,1"
    cfg = load_config(None, ["rollout.engine=vllm", "rollout.vllm.url=http://127.0.0.1:8000"])
    check_distributed(cfg, 1)  # one rank: its own server by URL
    with pytest.raises(RlvrError, match="every rank pushes its weights"):
        check_distributed(cfg, 2)


def test_a_server_removes_the_hand_over_files_named_after_it(tmp_path) -> None:
    """A trainer killed while writing weights or an adapter leaves them in /dev/shm; the server they
    were meant for removes them when it stops, and only them."""
    from rlvr.rollout import vllm_server

    mine = [tmp_path / "rlvr-vllm-s41-7-0.tmp", tmp_path / "rlvr-vllm-s41-7-1.lora"]
    other = tmp_path / "rlvr-vllm-s42-7-0.pt"
    mine[0].write_bytes(b"x")
    (mine[1] / "adapter_config.json").parent.mkdir()
    (mine[1] / "adapter_config.json").write_text("{}")
    other.write_bytes(b"x")
    removed = vllm_server.remove_leftovers({str(tmp_path), str(tmp_path / "absent")}, 41)
    assert sorted(removed) == sorted(map(str, mine))
    assert not any(p.exists() for p in mine) and other.exists()


# ----------------------------------------------------------------------------- with vLLM
@pytest.fixture(scope="module")
def policy():
    from rlvr.models import load_model, load_tokenizer

    model = load_model(MODEL).eval()
    return model, load_tokenizer(MODEL)


@pytest.fixture(scope="module")
def engine(policy, tmp_path_factory):
    from rlvr.config import load_config
    from rlvr.rollout.from_config import build_engine

    _vllm_python()
    model, tokenizer = policy
    # model.lora.r starts the server with LoRA on (--max-lora-rank), so the adapter tests share it;
    # the full-weight tests push a model without adapters, which drops any adapter the server holds
    overrides = [f"model.name={MODEL}", "seed=3", "rollout.engine=vllm", "rollout.vllm.max_model_len=512"]
    cfg = load_config(None, [*overrides, f"model.lora.r={LORA_RANK}"])
    engine = build_engine(cfg, model, tokenizer, log_dir=tmp_path_factory.mktemp("vllm"))
    yield engine
    engine.close()
    assert engine.server.process is None  # stopped


@pytest.fixture(scope="module")
def adapted(policy):
    """The policy under LoRA adapters whose B matrices are random (PEFT starts them at zero): a
    policy whose greedy answers differ from the base model's."""
    from rlvr.config.schema import LoraConfig
    from rlvr.models.lora import apply_lora

    model, _ = policy
    peft_model = apply_lora(copy.deepcopy(model), LoraConfig(r=LORA_RANK, alpha=16.0))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.3)
    return peft_model.eval()


@pytest.fixture(scope="module")
def prompts(policy) -> list[list[int]]:
    _, tokenizer = policy
    return [encode_prompt(tokenizer, [{"role": "user", "content": q}]) for q in QUESTIONS]


@pytest.fixture(scope="module")
def long_prompt(policy) -> list[int]:
    """Longer than two of vLLM's CPU KV blocks (128 tokens): its prefix is cached between calls."""
    _, tokenizer = policy
    numbers = ", ".join(str(i) for i in range(100))
    ids = encode_prompt(tokenizer, [{"role": "user", "content": f"{numbers}. What comes next?"}])
    assert len(ids) > 256
    return ids


def _trainer_logprobs(model, groups, pad_id: int, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(engine logprobs, trainer logprobs) of every sampled token, flat."""
    from rlvr.train.learn.batch import build_batch
    from rlvr.train.learn.logprobs import completion_logprobs

    batch = build_batch(groups, [0.0] * sum(len(g) for g in groups), pad_id)
    with torch.no_grad():
        logprobs, _ = completion_logprobs(model, batch, temperature=temperature)
    mask = batch.completion_mask.bool()
    return batch.sampling_logprobs[mask], logprobs[mask]


def _greedy(engine, prompts, tokens: int = 10) -> list[list[int]]:
    groups = engine.generate(prompts, SamplingParams(n=1, temperature=0.0, max_new_tokens=tokens))
    return [g[0].token_ids for g in groups]


@pytest.mark.vllm
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_vllm_logprobs_match_the_trainers(engine, policy, prompts, temperature) -> None:
    """vLLM samples; the trainer recomputes the same tokens' logprobs (at the same temperature)."""
    model, _ = policy
    groups = engine.generate(prompts, SamplingParams(n=4, temperature=temperature, max_new_tokens=16))
    assert [len(g) for g in groups] == [4, 4]
    for g in groups:
        for c in g:
            assert len(c.token_ids) == len(c.logprobs) > 0
            assert c.finish_reason in ("stop", "length")
            assert (c.finish_reason == "stop") == (c.token_ids[-1] in engine.stop_token_ids)
    sampled, trainer = _trainer_logprobs(model, groups, engine.pad_id, temperature)
    diff = (sampled - trainer).abs()
    print(f"T={temperature}: {diff.numel()} tokens, max |diff| {diff.max():.2e}, mean {diff.mean():.2e}")
    assert diff.max() < TOLERANCE


@pytest.mark.vllm
def test_greedy_tokens_match_the_hf_engine(engine, policy, prompts) -> None:
    model, tokenizer = policy
    hf = HFEngine(model, tokenizer)
    greedy = _greedy(engine, prompts)
    assert greedy == _greedy(hf, prompts)
    # vLLM takes n = 1 only for greedy sampling: n greedy completions are n requests
    groups = engine.generate(prompts, SamplingParams(n=2, temperature=0.0, max_new_tokens=10))
    assert [[c.token_ids for c in g] for g in groups] == [[ids, ids] for ids in greedy]
    # ... and each request's logprobs, not only its tokens, are the trainer's (greedy: temperature 1,
    # the HF engine's convention), both copies in each group
    sampled, trainer = _trainer_logprobs(model, groups, engine.pad_id, 1.0)
    assert (sampled - trainer).abs().max() < TOLERANCE
    assert all(g[0].logprobs == g[1].logprobs for g in groups)
    hf_logprobs = [
        g[0].logprobs for g in hf.generate(prompts, SamplingParams(n=1, temperature=0.0, max_new_tokens=10))
    ]
    for g, expected in zip(groups, hf_logprobs):
        assert torch.allclose(torch.tensor(g[1].logprobs), torch.tensor(expected), atol=TOLERANCE)


@pytest.mark.vllm
def test_weight_update_changes_vllm_as_it_changes_the_policy(engine, policy, prompts, long_prompt) -> None:
    """Perturb the policy, push it: vLLM's greedy tokens and logprobs follow the new weights (the
    same prompts again, one long enough for vLLM's prefix cache: a stale cache would answer from the
    old weights); push the old weights back: the old tokens return."""
    model, tokenizer = policy
    prompts = [prompts[0], long_prompt]
    hf = HFEngine(model, tokenizer)
    sync = VLLMWeightSync(engine)
    before = _greedy(engine, prompts)
    with perturbed_and_pushed(model, sync, engine, 0.1) as version:
        assert sync.version == engine.policy_version == version
        assert engine.server.health()["version"] == version
        after = _greedy(engine, prompts)
        assert after != before
        assert after == _greedy(hf, prompts)
        groups = engine.generate(prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=10))
        sampled, trainer = _trainer_logprobs(model, groups, engine.pad_id, 1.0)
        assert (sampled - trainer).abs().max() < TOLERANCE
        print(f"weight push (shm, server side): {sync.last_load_s:.2f} s")
    assert _greedy(engine, prompts) == before


@pytest.mark.vllm
def test_prefix_cache_serves_a_repeated_prompt_until_a_weight_update(engine, policy, long_prompt) -> None:
    """A prompt sent again is served from vLLM's prefix cache (what multi-turn episodes, which send
    the whole conversation each turn, rely on); after a weight push the cache is empty."""
    model, _ = policy

    def cached_of_one_call() -> int:
        before = engine.cached_prompt_tokens
        _greedy(engine, [long_prompt], tokens=2)
        return engine.cached_prompt_tokens - before

    cached_of_one_call()
    assert cached_of_one_call() >= 256  # its whole 128-token blocks
    VLLMWeightSync(engine).push(model, engine.policy_version + 1)  # the same weights, a new version
    assert cached_of_one_call() == 0


@pytest.mark.vllm
# merged: the fallback, slow (rlvr.models.lora.merged_weights is checked without vLLM in test_models_lora)
@pytest.mark.parametrize("lora_sync", ["adapter", pytest.param("merged", marks=pytest.mark.slow)])
def test_lora_push_changes_vllm_as_it_changes_the_policy(
    engine, policy, adapted, prompts, long_prompt, lora_sync, monkeypatch
) -> None:
    """Push a LoRA policy (only its adapters, through vLLM's add_lora; or its merged weights): vLLM's
    greedy tokens become the HF engine's under the adapters and its logprobs the trainer's; pushing
    the plain policy afterwards drops the adapter and restores the base answers."""
    model, tokenizer = policy
    prompts = [prompts[0], long_prompt]
    monkeypatch.setattr(engine, "lora_sync", lora_sync)
    sync = VLLMWeightSync(engine)
    version = engine.policy_version
    base = _greedy(engine, prompts)
    sync.push(adapted, version + 1)
    health = engine.server.health()
    assert health["version"] == version + 1
    assert health["lora"] == (f"policy-v{version + 1}" if lora_sync == "adapter" else None)
    after = _greedy(engine, prompts)
    assert after != base
    assert after == _greedy(HFEngine(adapted, tokenizer), prompts)
    groups = engine.generate(prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=10))
    sampled, trainer = _trainer_logprobs(adapted, groups, engine.pad_id, 1.0)
    diff = (sampled - trainer).abs()
    print(f"LoRA {lora_sync}: push {sync.last_load_s:.2f} s (server side), max |diff| {diff.max():.2e}")
    assert diff.max() < TOLERANCE
    sync.push(model, version + 2)
    assert engine.server.health()["lora"] is None
    assert _greedy(engine, prompts) == base
    assert not list(engine.shm_dir.glob(f"rlvr-vllm-s*-{os.getpid()}-*"))  # no adapter left behind


def _grpo_on_vllm(engine, tmp_path, *extra: str) -> tuple[list[dict], dict[int, set[int]], dict]:
    """A 2-step GRPO run sampling from the shared server (by URL): (train rows, the policy versions
    of each step's trajectories, the held-out results)."""
    from rlvr import api
    from rlvr.config import load_config
    from rlvr.log import read_jsonl

    cfg = load_config(
        None,
        [
            *SMOLLM_RUN,
            f"output_dir={tmp_path}",
            "name=vllm",
            "train.steps=2",
            "optim.lr=1e-5",
            "rollout.engine=vllm",
            f"rollout.vllm.url={engine.server.url}",
            *extra,
        ],
    )
    results = api.train(cfg, quiet=True)
    run = tmp_path / "vllm"
    rows = [r for r in read_jsonl(run / "metrics.jsonl") if r["phase"] == "train"]
    versions: dict[int, set[int]] = {}
    for record in read_jsonl(run / "trajectories.jsonl"):
        versions.setdefault(record["step"], set()).add(record["policy_version"])
    return rows, versions, results


@pytest.mark.vllm
# with LoRA: slow (the adapter push itself is checked by test_lora_push_changes_vllm_...[adapter])
@pytest.mark.parametrize("lora", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["full", "lora"])
def test_grpo_trains_with_the_vllm_engine(engine, tmp_path, lora) -> None:
    """Every step samples with the weights of the previous update (each trajectory's policy_version,
    and the logprob gap to the trainer). With LoRA only the adapters travel after each update, and
    the learning rate is high enough that an adapter left behind would show in that gap (it moves
    the logprobs of step 2's tokens by more than 1e-3)."""
    extra = [f"model.lora.r={LORA_RANK}", "optim.lr=5e-3", "optim.warmup_steps=0"] if lora else []
    rows, versions, results = _grpo_on_vllm(engine, tmp_path, *extra)
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["reward/errors"] == 0.0
        assert 0.0 <= row["reward/mean"] <= 1.01
        assert row["update/grad_norm"] > 0.0
        assert torch.isfinite(torch.tensor(row["update/loss"]))
        # the engine sampled from exactly the weights the trainer scores with
        assert row["update/sampler_logprob_diff"] < 1e-3
    assert versions == {1: {0}, 2: {1}}
    health = engine.server.health()
    assert health["version"] == 2
    assert health["lora"] == ("policy-v2" if lora else None)
    assert results["after"]["eval/size"] == 2


@pytest.mark.vllm
def test_a_server_that_dies_is_an_error_with_its_log(engine, prompts) -> None:
    """Runs last: it kills the shared server."""
    process = engine.server.process
    assert process is not None and process.poll() is None
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    # the error names the exit and quotes the end of the server's log (its last weight or adapter load)
    tail = r"it exited with code -9\) ends with:(.|\n)*of version \d+ (loaded|\(shm\) took)"
    with pytest.raises(VLLMServerError, match=tail):
        engine.generate(prompts, SamplingParams(n=1, max_new_tokens=4))
