"""Roles with a policy of their own (roles.settings.<role>.policy=own, rlvr.roles.policies): each
such role is sampled by its own engine, trained by its own learner on its own groups only, saved
beside the run's policy, and resumed exactly."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from test_roles import full_and_resumed
from tiny import TINY_RUN

from rlvr import api
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl
from rlvr.models import load_model, load_tokenizer

LEN = "{name: 'reward_fixtures:scaled_len', params: {scale: 0.01}}"
BASE = [
    *TINY_RUN,
    "data.source=env",
    "data.task=code_functions",
    "data.task_config={}",
    "data.few_shot=[]",
    "roles.game=coder_tester",
    "data.eval_size=0",
    "roles.eval_size=0",
    "train.log_samples=-1",
    "algo.dynamic_sampling=false",
    "algo.kl_coef=0.0",
]


def own(coder_weight: float = 1.0, tester_weight: float = 1.0, extra: str = "") -> str:
    return (
        f"roles.settings={{coder: {{weight: {coder_weight}}}, tester: {{group_size: 3, max_new_tokens: 6, "
        f"weight: {tester_weight}, policy: own, rewards: [{LEN}]{extra}}}}}"
    )


def weights(path) -> dict[str, torch.Tensor]:
    return load_file(str(path / "model.safetensors"))


def changed(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> bool:
    return any(not torch.equal(before[k], after[k]) for k in before)


@pytest.fixture(scope="module")
def start_weights() -> dict[str, torch.Tensor]:
    model = load_model("tiny-random", "float32", "cpu")
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize(("coder_weight", "tester_weight"), [(0.0, 1.0), (1.0, 0.0)])
def test_a_roles_tokens_train_only_its_own_policy(
    tmp_path, start_weights, coder_weight: float, tester_weight: float
) -> None:
    """The coder's groups train the run's policy and the tester's its own: with one role's loss
    weight 0 its policy's weights stay exactly as they started while the other's move."""
    name = f"w{coder_weight}-{tester_weight}"
    settings = own(coder_weight, tester_weight)
    overrides = [*BASE, settings, "train.steps=1", f"output_dir={tmp_path}", f"name={name}"]
    cfg = api.load_config("grpo", overrides)
    api.train(cfg, quiet=True)
    (ckpt,) = (tmp_path / name / "checkpoints").iterdir()
    start = {k: v for k, v in start_weights.items() if k != "lm_head.weight"}
    run_policy = weights(ckpt / "model")
    tester_policy = weights(ckpt / "roles" / "tester" / "model")
    assert changed(start, run_policy) == (coder_weight > 0)
    assert changed(start, tester_policy) == (tester_weight > 0)


def test_each_role_samples_with_its_own_policy(tmp_path) -> None:
    """The tester starts from other weights (roles.settings.tester.model): its sampling log-probs
    are its own learner's log-probs of the same tokens, and the coder's are the run policy's (a role
    sampled by the wrong engine would differ by the perturbation, far above the tolerance)."""
    other = load_model("tiny-random", "float32", "cpu")
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.2)
    other.save_pretrained(tmp_path / "other")
    load_tokenizer("tiny-random").save_pretrained(tmp_path / "other")
    settings = own(extra=f", model: '{tmp_path / 'other'}'")
    overrides = [*BASE, settings, "train.steps=1", "train.log_trajectories=true"]
    api.train(api.load_config("grpo", [*overrides, f"output_dir={tmp_path}", "name=v"]), quiet=True)
    (step,) = [m for m in read_jsonl(tmp_path / "v" / "metrics.jsonl") if m["phase"] == "train"]
    assert step["role/tester/mismatch/logprob_diff_max"] < 1e-4
    assert step["mismatch/logprob_diff_max"] < 1e-4
    # and the perturbation is large enough to tell the two models apart on the same tokens
    rows = read_jsonl(tmp_path / "v" / "trajectories.jsonl")
    tester = next(r for r in rows if r.get("role") == "tester")
    ids = torch.tensor([tester["prompt_ids"] + tester["segments"][0]["token_ids"]])
    n = len(tester["segments"][0]["token_ids"])
    run_model = load_model("tiny-random", "float32", "cpu")
    with torch.no_grad():
        logits = run_model(ids).logits[0, -n - 1 : -1].float().log_softmax(-1)
    theirs = logits.gather(1, ids[0, -n:, None])[:, 0]
    assert (theirs - torch.tensor(tester["segments"][0]["logprobs"])).abs().max() > 0.1


def test_a_two_policy_run_resumes_exactly(tmp_path) -> None:
    steps = [*BASE, own(), "train.steps=3", "train.save_every=1", "optim.lr=1e-3", f"output_dir={tmp_path}"]
    full, resumed = full_and_resumed(tmp_path, steps)
    assert sorted(resumed) == [1, 2, 3]
    keys = ("role/coder/reward", "role/tester/reward", "role/tester/update/loss", "update/loss")
    for step in (2, 3):
        for key in (*keys, "role/tester/update/grad_norm", "update/grad_norm"):
            assert resumed[step][key] == pytest.approx(full[step][key], rel=1e-5, abs=1e-7), (step, key)
    for sub in ("model", "roles/tester/model"):
        a = weights(tmp_path / "full" / "checkpoints" / "step-000003" / sub)
        b = weights(tmp_path / "cut" / "checkpoints" / "step-000003" / sub)
        assert not changed(a, b), sub


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("roles.settings={coder: {policy: own}}", "roles.settings.coder.policy"),
        ("roles.settings={tester: {lr: 0.001}}", "lr is a setting of a role with a policy of its own"),
        ("train.max_staleness=1", "train.max_staleness"),
        ("model.lora.r=4", "model.lora.r"),
    ],
)
def test_own_policy_configs_are_refused_naming_the_key(tmp_path, override: str, message: str) -> None:
    settings = [] if override.startswith("roles.settings") else [own()]
    with pytest.raises(RlvrError, match=message):
        cfg = api.load_config(
            "grpo", [*BASE, *settings, override, "train.steps=1", f"output_dir={tmp_path}", "name=bad"]
        )
        api.train(cfg, quiet=True)
    assert not (tmp_path / "bad").exists()
