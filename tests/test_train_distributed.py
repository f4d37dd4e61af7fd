"""torch.distributed training (gloo, 2 ranks under torchrun): N ranks make the update one process
makes on the same global batch, for every loss aggregation; the CLI trains, checkpoints and
resumes under torchrun. Each test starts its own ``torchrun --standalone`` (a free port chosen at
run time) with a timeout, so a hang fails the test instead of the suite."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import dist_worker  # noqa: E402

from rlvr.errors import RlvrError  # noqa: E402

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module", autouse=True)
def _models_built_once() -> None:
    """The bundled models are converted here, in this process, before any rank starts: run alone
    (``make test-scale``), two ranks converting into the fresh session cache at once have loaded a
    directory transformers did not recognise."""
    from rlvr.models.bundled import smollm2_dir, tiny_random_dir

    smollm2_dir()
    tiny_random_dir()


SRC = HERE.parent / "src"

# Each case builds a fresh tiny-random learner and updates it on fixed synthetic groups (varied
# prompt and completion lengths: token and sequence means differ). The gradient clip is out of
# reach so that the gradient's scale (what a wrong denominator changes) reaches the comparison;
# lr 1e-3 makes one update large against the parameter tolerance; Adam's eps 1e-3 keeps its step a
# smooth function of the gradient (at 1e-8, float rounding in a 1e-8 gradient entry moves that
# parameter by a visible share of lr, whatever the ranks do).
COMMON = ["optim.grad_clip=1e6", "optim.lr=1e-3", "optim.eps=1e-3"]
CASES = [
    {  # 3 groups: the ranks get 2 and 1; the KL to the reference in the reward (its pass is split)
        "overrides": ["algo.loss_agg=token-mean", "algo.kl_coef=0.05", "algo.kl_in_reward=true"],
        "groups": 3,
    },
    {"overrides": ["algo.loss_agg=seq-mean-token-mean"], "groups": 3},
    {"overrides": ["algo.loss_agg=seq-mean-token-sum"], "groups": 4},
    {  # Dr.GRPO
        "overrides": ["algo.loss_agg=seq-mean-token-sum-norm", "algo.advantage=dr_grpo"],
        "groups": 4,
    },
    {  # DAPO's dynamic sampling, normalised over every sampled group (loss_scale)
        "overrides": ["algo.loss_agg=token-mean", "algo.loss_norm=sampled", "algo.dynamic_sampling=true"],
        "groups": 3,
        "dropped": 2,
    },
    {  # batch-normalised advantages, two epochs of two minibatches (old logprobs), Adam state
        "overrides": [
            "algo.advantage=reinforce_pp",
            "algo.minibatches=2",
            "algo.epochs=2",
            "algo.micro_batch_size=3",
        ],
        "groups": 4,
        "updates": 2,
    },
    {  # rank 1 has no group: its share of the old logprobs' and the reference's passes is empty
        "overrides": ["algo.loss_agg=seq-mean-token-mean", "algo.epochs=2", "algo.kl_coef=0.05"],
        "groups": 1,
    },
    {"overrides": ["algo.loss=gspo", "algo.micro_batch_size=1"], "groups": 2},  # sequence-level ratio
    {  # a value head on the policy (its gradient is summed outside DDP), KL to a reference; two
        # updates: the head starts at zero, so the values (split over the ranks) count from the 2nd
        "overrides": [
            "algo.advantage=gae",
            "algo.critic.kind=head",
            "algo.kl_coef=0.05",
            "algo.dynamic_sampling=false",
        ],
        "groups": 3,
        "updates": 2,
    },
    {"overrides": ["model.lora.r=4", "model.lora.alpha=8"], "groups": 3},  # adapters only (DDP)
    # bf16 autocast over fp32 master weights; 3 groups: rank 1's zero-weight pass runs under the
    # autocast too (FSDP2's reductions follow the passes' autograd graphs, which must match)
    {"overrides": ["model.precision=bf16-mixed"], "groups": 3},
]
for case in CASES:
    case["overrides"] = [*COMMON, *case["overrides"]]


def torchrun(args: list[str], tmp_path: Path, nproc: int = 2, timeout: float = 240.0):
    """``torchrun --standalone --nproc-per-node nproc ARGS``; the whole process group is killed on
    timeout (a hang fails the test)."""
    path = os.pathsep.join([str(SRC), str(HERE), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    env.update({"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *args]
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"torchrun did not finish within {timeout:.0f} s:\n{out[-4000:]}")
    return proc.returncode, out


# fsdp2: slow (the default run keeps FSDP2 in test_fsdp2_samples_from_a_bf16_copy_and_checkpoints_...)
@pytest.mark.parametrize("mode", ["ddp", pytest.param("fsdp2", marks=pytest.mark.slow)])
def test_two_ranks_update_equals_one_process(tmp_path, mode):
    """Parameters after the update(s) within 1e-6 (an update moves them by up to ~1e-3), gradients
    of the last step within 2e-6 of their largest entry, metrics within 1e-5 relative (packing's
    rounding depends on the micro-batch; FSDP2's gradient norm sums the squares shard by shard)."""
    unsharded = ("critic", "lora")  # not taken by fsdp2 yet
    cases = [{**c, "mode": mode} for c in CASES if mode == "ddp" or not any(k in str(c) for k in unsharded)]
    spec, out = tmp_path / "cases.json", tmp_path / "ranks.pt"
    spec.write_text(json.dumps(cases))
    code, log = torchrun([str(HERE / "dist_worker.py"), "update", str(spec), str(out)], tmp_path)
    assert code == 0, log[-4000:]
    got = torch.load(out)
    torch.set_num_threads(1)
    want = dist_worker.run_cases(cases)
    for case, w, g in zip(cases, want, got, strict=True):
        label = " ".join(case["overrides"][len(COMMON) :]) + f" groups={case['groups']}"
        assert set(w["grads"]) == set(g["grads"]), label
        scale = max(float(t.abs().max()) for t in w["grads"].values())
        assert scale > 0, label
        for name, tensor in w["grads"].items():
            torch.testing.assert_close(g["grads"][name], tensor, rtol=0, atol=2e-6 * scale, msg=label)
        moved = max(float((w["params"][n] - p).abs().max()) for n, p in w["start"].items())
        assert moved > 1e-4, label  # the update did something the tolerance can see
        for name, tensor in w["params"].items():
            torch.testing.assert_close(g["params"][name], tensor, rtol=0, atol=1e-6, msg=label)
        for mw, mg in zip(w["metrics"], g["metrics"], strict=True):
            assert mw.keys() == mg.keys(), label
            for key, value in mw.items():
                if key.endswith("_max"):  # a per-micro-batch maximum: the ranks' micro-batches differ
                    continue
                # 1e-5: with packing (algo.packing, on) a row's prompt pass depends on which prompts
                # share its micro-batch (a prefix shared by all of them runs once), so one process
                # and two ranks round differently (1.2e-6 relative on a GAE loss); FSDP2's gradient
                # norm sums the squares shard by shard. A wrong loss or reduction is off by far more.
                rel = 1e-5
                # the KL (about 1e-4) is a small difference of logprobs: the reference pass split over
                # the ranks computes those in other matmul shapes, which moved it by 2e-9 on an AMD
                # EPYC (1.9e-5 relative); a wrong reference moves it by its own size
                tiny = 1e-8 if key == "update/kl" else 1e-9
                assert mg[key] == pytest.approx(value, rel=rel, abs=tiny), f"{label}: {key}"
        # The no-gradient passes (reference, old logprobs, a head's values) are split: the rows the
        # ranks' forwards see add up to one process's (FSDP2 adds the filler passes of a rank with
        # fewer micro-batches), and with two groups or more no rank sees the whole batch.
        (whole,) = w["rows"]
        for key, total in whole.items():
            shares = [r[key] for r in g["rows"]]
            assert sum(shares) == total or (mode == "fsdp2" and sum(shares) > total), (label, key, shares)
            if total and case["groups"] > 1:
                assert max(shares) < total, (label, key, shares)


RUN = [
    "model.name=tiny-random",
    "model.threads=1",
    "data.train_size=64",
    "data.eval_size=4",
    "rollout.prompts_per_step=3",  # 3 groups over 2 ranks: one samples 1 prompt, the other 2
    "rollout.group_size=4",
    "rollout.max_new_tokens=8",
    "rewards.functions=[{name: 'reward_fixtures:scaled_len', params: {scale: 0.01}}]",
    "rewards.workers=1",
    "algo.micro_batch_size=4",
    "train.time_limit_s=null",
    "train.time_budget_s=null",
    "train.steps=4",
    "train.save_every=2",
    "train.log_samples=-1",
    "optim.lr=1e-3",
]


def test_torchrun_cli_trains_and_rank_zero_writes_the_run_directory(tmp_path):
    """``torchrun -m rlvr train`` on 2 ranks: rank 0 alone writes the run directory and reports;
    samples.jsonl holds every rank's completions once; the checkpoint is a plain HF model with
    every rank's RNG state, each rank sampling its own stream."""
    from rlvr.log import read_jsonl
    from rlvr.models import load_model

    run = [*RUN, "train.steps=2", f"output_dir={tmp_path}", "name=cli", "--quiet"]
    code, log = torchrun(["-m", "rlvr", "train", *run], tmp_path)
    assert code == 0, log[-4000:]
    assert log.count("held-out after") == 1  # rank 0 reports, once
    cli = tmp_path / "cli"
    files = ["checkpoints", "config.yaml", "eval_samples.jsonl", "metrics.jsonl", "prompt_history.jsonl"]
    assert sorted(p.name for p in cli.iterdir()) == [*files, "samples.jsonl"]
    rows = read_jsonl(cli / "metrics.jsonl")
    assert [(r["step"], r["phase"]) for r in rows] == [
        (0, "before"),
        (1, "train"),
        (2, "train"),
        (2, "after"),
    ]
    assert all(r["groups/sampled"] == 3.0 and "update/loss" in r for r in rows if r["phase"] == "train")
    samples = read_jsonl(cli / "samples.jsonl")
    assert [sum(s["step"] == k for s in samples) for k in (1, 2)] == [12, 12]
    assert len(read_jsonl(cli / "eval_samples.jsonl")) == 2 * 4
    step2 = cli / "checkpoints" / "step-000002"
    state = torch.load(step2 / "trainer_state.pt", weights_only=False)
    engines = [s["generators"]["engine"] for s in state["rank_rng"]]
    assert len(engines) == 2 and not torch.equal(engines[0], engines[1])
    trained, start = load_model(str(step2 / "model")), load_model("tiny-random")
    moved = max(float((a - b).detach().abs().max()) for a, b in zip(trained.parameters(), start.parameters()))
    assert moved > 1e-4


@pytest.mark.parametrize("mode", ["ddp", pytest.param("fsdp2", marks=pytest.mark.slow)])
def test_two_rank_resume_equals_the_uninterrupted_run(tmp_path, mode):
    """A 2-rank run stopped after step 1 (rank 0's time limit, which both ranks obey) and resumed
    from its checkpoint equals the uninterrupted 2-rank run: metrics and final weights."""
    from rlvr.log import read_jsonl
    from rlvr.models import load_model

    base = [*RUN, f"output_dir={tmp_path}", f"train.distributed={mode}", "data.eval_size=0"]
    runs = [
        {"overrides": [*base, "name=full"]},
        {"overrides": [*base, "name=cut", "train.time_limit_s=0.001"]},
        {"overrides": [*base, "name=cut"], "resume": True},
    ]
    spec = tmp_path / "runs.json"
    spec.write_text(json.dumps(runs))
    code, log = torchrun([str(HERE / "dist_worker.py"), "train", str(spec)], tmp_path)
    assert code == 0, log[-4000:]

    def train_rows(name: str) -> list[dict]:
        return [r for r in read_jsonl(tmp_path / name / "metrics.jsonl") if r["phase"] == "train"]

    full, cut = train_rows("full"), train_rows("cut")
    assert [r["step"] for r in full] == [r["step"] for r in cut] == [1, 2, 3, 4]
    for a, b in zip(full, cut, strict=True):
        for key in ("reward/mean", "update/loss", "update/grad_norm", "completion/mean_length"):
            assert b[key] == pytest.approx(a[key], rel=1e-6, abs=1e-9), (a["step"], key)
    final = "checkpoints/step-000004/model"
    trained, resumed = load_model(str(tmp_path / "full" / final)), load_model(str(tmp_path / "cut" / final))
    start = load_model("tiny-random")
    assert (
        max(float((a - b).detach().abs().max()) for a, b in zip(trained.parameters(), start.parameters()))
        > 1e-4
    )
    for a, b in zip(trained.parameters(), resumed.parameters()):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-6)


# The engine's copy (asynchronous collection) holds the same weights in other memory than the
# learner's module: MKL may sum in another order there, and the sampling logprobs differ in the
# 8th digit. Only these diagnostics see it (tests/test_train_async.py); compared within 1e-6.
NEAR = ("update/sampler_logprob_diff", "mismatch/")


def _exact_rows(path: Path, log: str) -> list[dict]:
    from rlvr.log import read_jsonl

    drop = ("time/", "throughput/", "async/", *NEAR)
    return [{k: v for k, v in r.items() if not k.startswith(drop)} for r in read_jsonl(path / log)]


@pytest.mark.parametrize("mode", ["ddp", pytest.param("fsdp2", marks=pytest.mark.slow)])
def test_async_collection_on_two_ranks(tmp_path, mode):
    """Asynchronous collection under torchrun, 2 ranks, one torchrun for three runs of 3 steps.

    ``max_staleness=0`` equals the synchronous 2-rank run: metrics, samples and final weights, bit
    for bit. ``max_staleness=1`` (with a periodic eval on rank 0 between steps) runs to the end:
    staleness 0, 1, 1 and every trajectory of step k, sampled on either rank, stamped with the
    version of step k - 1. The background threads' gathers run on a process group of their own;
    on the learner's group they pair with its collectives in a different order on each rank, and
    the run hangs or fails (the timeout turns a hang into a failure)."""
    from rlvr.log import read_jsonl
    from rlvr.models import load_model

    base = [
        *RUN,
        f"output_dir={tmp_path}",
        f"train.distributed={mode}",
        "train.steps=3",
        "train.save_every=0",
        "train.log_trajectories=true",
        "data.eval_size=0",
    ]
    one_ahead = ["name=async1", "train.max_staleness=1", "data.eval_size=2", "eval.every=1"]
    runs = [
        {"overrides": [*base, "name=sync"]},
        {"overrides": [*base, "name=async0", "train.max_staleness=0"]},
        {"overrides": [*base, *one_ahead]},
    ]
    spec = tmp_path / "runs.json"
    spec.write_text(json.dumps(runs))
    code, log = torchrun([str(HERE / "dist_worker.py"), "train", str(spec)], tmp_path, timeout=180)
    assert code == 0, log[-4000:]

    sync, async0 = tmp_path / "sync", tmp_path / "async0"
    for name in ("metrics.jsonl", "samples.jsonl"):
        rows = _exact_rows(sync, name)
        assert rows and rows == _exact_rows(async0, name), name
    # the trajectories too, their sampling logprobs within 1e-5 (a float32 unit in the last place
    # at |logprob| ~ 10: the copy's MKL sums, as above)
    for a, b in zip(*(read_jsonl(run / "trajectories.jsonl") for run in (sync, async0)), strict=True):
        (x,), (y,) = a.pop("segments"), b.pop("segments")
        assert a == b and x["token_ids"] == y["token_ids"]
        assert max(abs(p - q) for p, q in zip(x["logprobs"], y["logprobs"], strict=True)) < 1e-5
    for a, b in zip(read_jsonl(sync / "metrics.jsonl"), read_jsonl(async0 / "metrics.jsonl"), strict=True):
        assert a.keys() - {"time/sync_s"} <= b.keys()
        for key in (k for k in a if k.startswith(NEAR)):
            assert abs(a[key] - b[key]) < 1e-6, key
    final = "checkpoints/step-000003/model"
    for x, y in zip(load_model(str(sync / final)).parameters(), load_model(str(async0 / final)).parameters()):
        assert torch.equal(x, y)

    rows = read_jsonl(tmp_path / "async1" / "metrics.jsonl")
    train = [r for r in rows if r["phase"] == "train"]
    assert [r["async/staleness"] for r in train] == [0.0, 1.0, 1.0]
    assert [r["step"] for r in rows if r["phase"] == "periodic"] == [1, 2]
    versions: dict[int, list[int]] = {}
    for t in read_jsonl(tmp_path / "async1" / "trajectories.jsonl"):
        versions.setdefault(t["step"], []).append(t["policy_version"])
    # 3 groups of 4 a step: rank 0 sampled the first, rank 1 the other two
    assert versions == {1: [0] * 12, 2: [0] * 12, 3: [1] * 12}


@pytest.mark.slow
def test_async_two_rank_sigterm_and_resume_equal_the_uninterrupted_run(tmp_path):
    """``max_staleness=1`` on 2 ranks: a SIGTERM that reaches rank 1 alone, while its background
    thread scores the batch of step 3 (rank 1's worker sends it at its 17th reward call: 8 a
    batch), stops both ranks after step 2 with a checkpoint that holds that sampled batch; the
    resumed run trains it and equals the uninterrupted run: metrics and final weights."""
    from rlvr.log import read_jsonl
    from rlvr.models import load_model

    def reward(calls: int) -> str:
        params = f"{{rank: 1, calls: {calls}, flag: '{tmp_path / 'signalled'}'}}"
        return f"rewards.functions=[{{name: 'reward_fixtures:sigterm_rank', params: {params}}}]"

    base = [*RUN, f"output_dir={tmp_path}", "data.eval_size=0", "train.max_staleness=1", "train.save_every=0"]
    runs = [
        {"overrides": [*base, "name=full", reward(10**9)]},
        {"overrides": [*base, "name=cut", reward(17)], "stops": True},
        {"overrides": [*base, "name=cut", reward(17)], "resume": True},
    ]
    spec = tmp_path / "runs.json"
    spec.write_text(json.dumps(runs))
    code, log = torchrun([str(HERE / "dist_worker.py"), "train", str(spec)], tmp_path, timeout=240)
    assert code == 0, log[-4000:]
    assert (tmp_path / "signalled").exists()
    checkpoints = tmp_path / "cut" / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-000002", "step-000004"]
    state = torch.load(checkpoints / "step-000002" / "trainer_state.pt", weights_only=False)
    assert [b["version"] for b in state["async_pending"]] == [1]  # step 3's batch, sampled by version 1
    full, cut = (_exact_rows(tmp_path / name, "metrics.jsonl") for name in ("full", "cut"))
    assert [r["step"] for r in full] == [1, 2, 3, 4] and cut == full
    stale = [r["async/staleness"] for r in read_jsonl(tmp_path / "cut" / "metrics.jsonl")]
    assert stale == [0.0, 1.0, 1.0, 1.0]
    final = "checkpoints/step-000004/model"
    a, b = load_model(str(tmp_path / "full" / final)), load_model(str(tmp_path / "cut" / final))
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


def _bf16_run(tmp_path: Path, name: str, mode: str) -> list[str]:
    """2 steps under bf16-mixed: fp32 master weights, the engine sampling from a bf16 copy."""
    return [
        *RUN,
        "train.steps=2",
        "train.save_every=0",
        "data.eval_size=0",
        "train.log_trajectories=true",
        "model.precision=bf16-mixed",  # rollout.weights_dtype=auto: a bf16 sampling copy
        f"train.distributed={mode}",
        f"output_dir={tmp_path}",
        f"name={name}",
    ]


def test_fsdp2_samples_from_a_bf16_copy_and_checkpoints_the_fp32_master_weights(tmp_path):
    """FSDP2 with a bf16 sampling copy (FullCopySync casts into it after each update): step 2
    samples from the pushed version, the sampler/trainer gap stays at bf16's size, and the
    checkpoint holds the fp32 master weights gathered from the shards, equal to them bit for bit
    (weights that the bf16 copy cannot hold: a checkpoint saved from it fails here)."""
    from safetensors import safe_open

    from rlvr.log import read_jsonl

    master = tmp_path / "master.pt"
    spec = tmp_path / "runs.json"
    spec.write_text(json.dumps([{"overrides": _bf16_run(tmp_path, "bf16", "fsdp2"), "master": str(master)}]))
    code, log = torchrun([str(HERE / "dist_worker.py"), "train", str(spec)], tmp_path)
    assert code == 0, log[-4000:]
    run = tmp_path / "bf16"
    versions: dict[int, set[int]] = {}
    for record in read_jsonl(run / "trajectories.jsonl"):
        versions.setdefault(record["step"], set()).add(record["policy_version"])
    assert versions == {1: {0}, 2: {1}}
    for row in (r for r in read_jsonl(run / "metrics.jsonl") if r["phase"] == "train"):
        # on-policy: the trainer's logprobs before the update are the ones the update computes
        gap = row["mismatch/logprob_diff_mean"]
        assert row["update/sampler_logprob_diff"] == pytest.approx(gap, rel=1e-5)
        # a bf16 sampler against bf16 autocast over fp32 weights: about 7e-4 here, never 0
        assert 0.0 < gap < 5e-3, row["step"]
    weights = torch.load(master)
    assert any(not torch.equal(w, w.bfloat16().float()) for w in weights.values())  # not bf16 values
    model = run / "checkpoints" / "step-000002" / "model"
    assert json.loads((model / "config.json").read_text())["dtype"] == "float32"
    with safe_open(str(model / "model.safetensors"), "pt") as saved:
        assert set(weights) <= set(saved.keys())
        for name, tensor in weights.items():
            got = saved.get_tensor(name)
            assert got.dtype == torch.float32, name
            assert torch.equal(got, tensor), f"{name}: max |diff| {float((got - tensor).abs().max()):.2e}"


@pytest.mark.slow
def test_fsdp2_with_a_bf16_copy_equals_ddp(tmp_path):
    """The same 2-step bf16-mixed run under DDP and FSDP2 on 2 ranks: the same completions at both
    steps (step 2 from each one's pushed bf16 copy), metrics within 1e-5 relative (mismatch/* and
    update/sampler_logprob_diff included), and
    final checkpoints within 1e-6 (measured: 7e-9; two updates moved the weights by 6e-4)."""
    from rlvr.log import read_jsonl
    from rlvr.models import load_model

    runs = [{"overrides": _bf16_run(tmp_path, mode, mode)} for mode in ("ddp", "fsdp2")]
    spec = tmp_path / "runs.json"
    spec.write_text(json.dumps(runs))
    code, log = torchrun([str(HERE / "dist_worker.py"), "train", str(spec)], tmp_path)
    assert code == 0, log[-4000:]
    ddp, fsdp2 = tmp_path / "ddp", tmp_path / "fsdp2"

    def completions(run: Path) -> list[tuple[int, str]]:
        return [(s["step"], s["completion"]) for s in read_jsonl(run / "samples.jsonl")]

    assert completions(fsdp2) == completions(ddp) and len(completions(ddp)) == 24
    rows = [[r for r in read_jsonl(run / "metrics.jsonl") if r["phase"] == "train"] for run in (ddp, fsdp2)]
    for want, got in zip(*rows, strict=True):
        for key, value in want.items():
            if not isinstance(value, float) or key.startswith(("time/", "throughput/")):
                continue
            rel = 1e-5  # packing rounds by micro-batch; FSDP2's gradient norm sums shard by shard
            assert got[key] == pytest.approx(value, rel=rel, abs=1e-9), (want["step"], key)
    final = "checkpoints/step-000002/model"
    a, b = load_model(str(ddp / final)), load_model(str(fsdp2 / final))
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert q.dtype == torch.float32
        torch.testing.assert_close(q, p, rtol=0, atol=1e-6, msg=name)


def _tiny_llama_for_vllm(out: Path) -> Path:
    """A random 2-layer Llama with head_dim 64 and tiny-random's tokenizer: vLLM's CPU attention
    has no kernel for tiny-random's head_dim 16. Its server starts in about 20 s, SmolLM2's in 37."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from rlvr.models.bundled import tiny_random_dir

    tokenizer = AutoTokenizer.from_pretrained(tiny_random_dir())
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


@pytest.mark.slow
@pytest.mark.vllm
def test_fsdp2_pushes_weights_gathered_from_the_shards_to_each_ranks_vllm_server(tmp_path):
    """FSDP2 with rollout.engine=vllm on 2 ranks, each with its own vLLM server (fp32) and no full
    copy of the policy: after each update every rank gathers the parameters one by one and pushes
    them to its server. Step 2's trajectories carry version 1 and vLLM's logprobs of them match the
    trainer's within 1e-3 (measured: 4e-7; the weights before the update give 8e-2 here), so the
    gathered weights reached vLLM; the checkpoint holds the master weights gathered from the shards."""
    from safetensors import safe_open

    from rlvr.log import read_jsonl
    from rlvr.rollout.vllm_process import find_vllm_python

    try:
        find_vllm_python()
    except RlvrError as err:
        pytest.skip(f"vLLM's environment is absent ({err})")
    model = _tiny_llama_for_vllm(tmp_path / "tiny-llama")
    master = tmp_path / "master.pt"
    run = [
        *RUN,
        f"model.name={model}",
        "train.steps=2",
        "train.save_every=0",
        "data.eval_size=0",
        "train.log_trajectories=true",
        "train.distributed=fsdp2",
        "rollout.engine=vllm",
        "rollout.vllm.max_model_len=512",
        "rollout.vllm.kv_cache_gib=0.25",
        f"output_dir={tmp_path}",
        "name=vllm",
    ]
    spec = tmp_path / "runs.json"
    spec.write_text(json.dumps([{"overrides": run, "master": str(master)}]))
    code, log = torchrun([str(HERE / "dist_worker.py"), "train", str(spec)], tmp_path, timeout=600)
    assert code == 0, log[-4000:]
    out = tmp_path / "vllm"
    for log_name in ("vllm_server.log", "vllm_server.rank1.log"):  # a server, and its log, per rank
        assert (out / log_name).read_text().count("rlvr vLLM server ready") == 1
    versions: dict[int, set[int]] = {}
    for record in read_jsonl(out / "trajectories.jsonl"):
        versions.setdefault(record["step"], set()).add(record["policy_version"])
    assert versions == {1: {0}, 2: {1}}
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if r["phase"] == "train"]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["update/sampler_logprob_diff"] < 1e-3, row["step"]
    weights = torch.load(master)
    with safe_open(str(out / "checkpoints" / "step-000002" / "model" / "model.safetensors"), "pt") as saved:
        for name, tensor in weights.items():
            assert torch.equal(saved.get_tensor(name), tensor), name
