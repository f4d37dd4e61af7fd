"""Work for torchrun's ranks in tests/test_train_distributed.py.

``python -m torch.distributed.run --standalone --nproc-per-node 2 tests/dist_worker.py update SPEC
OUT`` runs each policy-update case of the JSON file SPEC (fixed synthetic groups) on every rank;
rank 0 saves the parameters, the gradients of the last optimizer step and the metrics to OUT.
:func:`run_cases` is the same in the calling process without torchrun (the reference the ranks
must equal). ``... dist_worker.py train SPEC`` runs SPEC's training runs one after the other (a
run marked ``stops`` may end with :class:`rlvr.errors.Stopped`: a SIGTERM); a run with
``"master": PATH`` also has rank 0 save the policy's weights at its end (gathered from FSDP2's
shards) to PATH, to compare with what its checkpoint holds.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from tiny import TINY_RUN  # noqa: E402

from rlvr.config import load_config  # noqa: E402
from rlvr.models import load_model  # noqa: E402
from rlvr.train.learn.learner import Learner  # noqa: E402
from rlvr.train.scale.distributed import Solo, start_ranks  # noqa: E402
from rlvr.train.scale.fsdp import full, shard_policy  # noqa: E402
from rlvr.train.scale.shard import distribute_learner  # noqa: E402
from rlvr.trajectory import Segment, Trajectory, TrajectoryGroup  # noqa: E402


def synthetic_groups(count: int, size: int, seed: int, vocab: int = 2000) -> list[TrajectoryGroup]:
    """``count`` groups of ``size`` trajectories with prompts and completions of varied lengths (so
    that token and sequence means differ) and rewards that vary within each group."""
    rng = random.Random(seed)
    groups = []
    for g in range(count):
        prompt = [rng.randrange(3, vocab) for _ in range(rng.randint(3, 12))]
        trajectories = []
        for _ in range(size):
            n = rng.randint(1, 9)
            ids = [rng.randrange(3, vocab) for _ in range(n)]
            logprobs = [-rng.uniform(0.5, 8.0) for _ in range(n)]
            t = Trajectory(prompt, [Segment("sampled", ids, logprobs)], "length" if n == 9 else "stop")
            t.example_index, t.reward = g, rng.uniform(-1.0, 1.0)
            trajectories.append(t)
        groups.append(TrajectoryGroup(g, trajectories))
    return groups


def run_case(case: dict, ranks) -> dict:  # noqa: ANN001
    """Build a fresh learner for ``case`` and run its updates; the results to compare."""
    cfg = load_config(None, [*TINY_RUN, "optim.warmup_steps=0", *case["overrides"]])
    torch.manual_seed(cfg.seed)
    policy = load_model(cfg.model.name)
    if cfg.model.lora.r:
        from rlvr.models.lora import apply_lora

        policy = apply_lora(policy, cfg.model.lora)
    if ranks.active and case.get("mode") == "fsdp2":
        shard_policy(policy)  # before the learner builds its optimizer over the shards
    learner = Learner(cfg, policy, pad_id=0)
    if ranks.active:
        distribute_learner(learner, ranks, case.get("mode", "ddp"))
    rows = count_nograd_rows(learner)
    named = list(learner.model.named_parameters())
    if learner.critic is not None:
        named += [(f"critic.{n}", p) for n, p in learner.critic.module().named_parameters()]
    start = {n: full(p.detach()).clone() for n, p in named}
    metrics = []
    for step in range(case.get("updates", 1)):
        groups = synthetic_groups(case["groups"], case.get("size", 4), seed=100 + step)
        sampled = None
        if case.get("dropped"):  # dynamic sampling dropped some groups: loss_norm=sampled scales
            sampled = groups + synthetic_groups(case["dropped"], case.get("size", 4), seed=900 + step)
        metrics.append(learner.update(groups, sampled))
    return {
        "start": start,
        "params": {n: full(p.detach()).clone() for n, p in named},
        "grads": {n: full(p.grad.detach()).clone() for n, p in named if p.grad is not None},
        "metrics": metrics,
        "rows": ranks.gather(dict(rows)),  # every rank's no-gradient rows, in rank order
    }


import rlvr.train.learn.critic as critic_module  # noqa: E402
import rlvr.train.learn.update as update_module  # noqa: E402


def count_nograd_rows(learner: Learner) -> dict[str, int]:
    """Counters, filled as the learner runs, of the completion rows its no-gradient passes of
    :func:`rlvr.train.learn.logprobs.completion_logprobs` see: ``ref`` the reference model's,
    ``policy`` the policy's (old logprobs, a value head's values). Rows are counted per call, not per
    model forward: a packed forward runs fewer rows than the completions it scores."""
    rows = {"ref": 0, "policy": 0}

    def counting(original):  # noqa: ANN001, ANN202
        def wrapped(model, batch, *args, **kwargs):  # noqa: ANN001, ANN202
            if not torch.is_grad_enabled():
                inner = getattr(model, "module", model)
                key = "ref" if inner is learner.ref_model else "policy" if inner is learner.model else None
                if key is not None:
                    rows[key] += len(batch)
            return original(model, batch, *args, **kwargs)

        return wrapped

    for module, original in _SCORERS.items():  # replaces the previous case's counter
        module.completion_logprobs = counting(original)
    return rows


# the modules whose no-gradient passes call completion_logprobs, and the function itself
_SCORERS = {module: module.completion_logprobs for module in (update_module, critic_module)}


def run_cases(cases: list[dict], ranks=None) -> list[dict]:  # noqa: ANN001
    ranks = ranks or Solo()
    return [run_case(case, ranks) for case in cases]


def save_master_weights(cfg, path: Path, ranks) -> None:  # noqa: ANN001
    """Train ``cfg`` (a new run); rank 0 saves the learner's weights after it, by name."""
    from rlvr.train.loop.orchestrator import Orchestrator

    run = Orchestrator(cfg, quiet=True)
    try:
        run.fit()
        weights = {n: full(p.detach()).clone() for n, p in run.learner.model.named_parameters()}
    finally:
        run.close()
    if ranks.is_main:
        torch.save(weights, path)


def main() -> None:
    """``update SPEC OUT``: the update cases of SPEC; ``train SPEC``: the training runs of SPEC
    (``[{"overrides": [...], "resume": bool, "stops": bool}, ...]``) one after the other in one
    process group."""
    mode, spec = sys.argv[1], Path(sys.argv[2])
    torch.set_num_threads(1)
    ranks = start_ranks("cpu", timeout_s=60)
    if mode == "update":
        results = run_cases(json.loads(spec.read_text()), ranks)
        if ranks.is_main:
            torch.save(results, Path(sys.argv[3]))
    else:
        from rlvr import api
        from rlvr.errors import Stopped

        for run in json.loads(spec.read_text()):
            cfg = load_config(None, run["overrides"])
            if "master" in run:
                save_master_weights(cfg, Path(run["master"]), ranks)
                continue
            try:
                api.train(cfg, resume=run.get("resume", False), quiet=True)
            except Stopped:  # SIGTERM: both ranks stop after the same step, with a checkpoint
                if not run.get("stops"):
                    raise
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
