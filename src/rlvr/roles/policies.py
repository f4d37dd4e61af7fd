"""Roles with a policy of their own (``roles.settings.<role>.policy: own``, docs/roles.md).

By default every role of a game is the run's one policy, told apart by its prompt. A role with
``policy: own`` is a separate model instead: :class:`RolePolicies` gives each such role

- its own weights (``roles.settings.<role>.model``, default ``model.name``), loaded from the
  checkpoint's ``roles/<role>/model`` on a resume;
- its own rollout engine over those weights (the game's :class:`~rlvr.roles.play.RolePlayer`
  samples the role with it) and weight sync;
- its own :class:`~rlvr.train.learn.learner.Learner`: optimizer, schedule (its own
  ``roles.settings.<role>.lr``), reference model (its starting weights) when KL is on, coefficients,
  and version, which its trajectories carry;
- its own sampling and minibatch RNG streams, checkpointed beside the run's.

The orchestrator hands every step's scored groups to :meth:`RolePolicies.update`, which trains each
own-policy role on its own groups only and returns the rest for the run's learner: a role's tokens
never reach another policy's weights. The other settings (algorithm, loss, KL, precision, device,
sampling temperature) are the run's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlvr.config import RunConfig
from rlvr.errors import RlvrError
from rlvr.rollout import RolloutEngine
from rlvr.trajectory import TrajectoryGroup

ROLES_DIR = "roles"  # checkpoints/step-N/roles/<role>/model


def own_roles(cfg: RunConfig) -> list[str]:
    """The roles of ``cfg`` with a policy of their own, in the order they are configured."""
    return [role for role, s in cfg.roles.settings.items() if s.policy == "own"]


def role_model_dir(checkpoint: Path, role: str) -> Path:
    """Where ``checkpoint`` holds ``role``'s own model (an HF model directory)."""
    return checkpoint / ROLES_DIR / role / "model"


def check_own_policies(cfg: RunConfig, distributed: bool) -> None:
    """Refuse what a role with its own policy does not combine with yet, naming the keys."""
    roles = own_roles(cfg)
    if not roles:
        return
    key = f"roles.settings.{roles[0]}.policy=own"
    if not cfg.roles.game:
        raise RlvrError(f"{key}: roles.settings need a role game (roles.game)")
    engine = cfg.rollout.engine
    refusals = [
        (engine != "hf", f"rollout.engine={engine}: own policies sample with the HF engine"),
        (cfg.train.max_staleness is not None, "train.max_staleness: asynchronous collection is one policy's"),
        (bool(cfg.model.lora.r), "model.lora.r: an own policy is trained in full, not with adapters"),
        (distributed, "torchrun: a run with own policies trains in one process"),
    ]
    for refused, why in refusals:
        if refused:
            raise RlvrError(f"{key} with {why}")


def role_config(cfg: RunConfig, role: str, index: int) -> RunConfig:
    """The run's config as ``role``'s learner and engine see it: its starting model (also its KL
    reference), its learning rate, and a seed of its own (its sampling and minibatch streams)."""
    s = cfg.roles.settings[role]
    model = cfg.model.model_copy(update={"name": s.model or cfg.model.name, "reference": None})
    optim = cfg.optim.model_copy(update={"lr": s.lr if s.lr is not None else cfg.optim.lr})
    return cfg.model_copy(update={"model": model, "optim": optim, "seed": cfg.seed + 1009 * (index + 1)})


def check_tokenizer(tokenizer: Any, name: str, run_model: str, key: str) -> None:
    """An own policy reads and writes the run's token ids: its tokenizer must be the run's."""
    from rlvr.models import load_tokenizer

    if name == run_model:
        return
    theirs = load_tokenizer(name)
    if theirs.get_vocab() != tokenizer.get_vocab():
        raise RlvrError(
            f"{key}: the tokenizer of {name} is not the run's ({run_model}); an own policy must share "
            "the run's vocabulary"
        )


@dataclass
class RolePolicy:
    """One role's own engine, weight sync and learner (which holds its model)."""

    engine: RolloutEngine
    sync: Any
    learner: Any  # rlvr.train.learn.learner.Learner


class RolePolicies:
    """Every own-policy role of a run (module docstring)."""

    def __init__(self, cfg: RunConfig, tokenizer: Any, start: Path | None) -> None:
        from rlvr.models import load_model
        from rlvr.train.learn.learner import Learner
        from rlvr.train.loop.engine_sync import engine_and_sync

        self.policies: dict[str, RolePolicy] = {}
        for index, role in enumerate(own_roles(cfg)):
            rcfg = role_config(cfg, role, index)
            check_tokenizer(tokenizer, rcfg.model.name, cfg.model.name, f"roles.settings.{role}.model")
            source = rcfg.model.name
            if start is not None:
                saved = role_model_dir(start, role)
                if not saved.is_dir():
                    raise RlvrError(
                        f"--resume: {start} holds no model of role '{role}' ({saved}); it was saved by a run "
                        f"in which roles.settings.{role}.policy was not 'own'"
                    )
                source = str(saved)
            policy = load_model(source, rcfg.model.dtype, rcfg.model.device)
            # the run directory only holds a vLLM server's log; own policies use the HF engine
            engine, sync = engine_and_sync(rcfg, policy, tokenizer, Path("."), False)
            self.policies[role] = RolePolicy(engine, sync, Learner(rcfg, policy, engine.pad_id))

    def __bool__(self) -> bool:
        return bool(self.policies)

    @property
    def engines(self) -> dict[str, RolloutEngine]:
        return {role: p.engine for role, p in self.policies.items()}

    def generators(self) -> dict[str, torch.Generator]:
        """Each role's sampling and minibatch RNGs, named for the checkpoint."""
        out: dict[str, torch.Generator] = {}
        for role, p in self.policies.items():
            out[f"engine/{role}"] = p.engine.generator
            out[f"update/{role}"] = p.learner.generator
        return out

    def models(self) -> dict[str, torch.nn.Module]:
        """``{path under the checkpoint: model}`` for :func:`rlvr.train.loop.checkpoint.save_checkpoint`."""
        return {f"{ROLES_DIR}/{role}": p.learner.weights() for role, p in self.policies.items()}

    # ----------------------------------------------------------------------------- one step
    def update(
        self, kept: list[TrajectoryGroup], seen: list[TrajectoryGroup]
    ) -> tuple[list[TrajectoryGroup], list[TrajectoryGroup], dict[str, float], bool]:
        """Train each own-policy role on its own kept groups and publish its new weights to its
        engine. Returns the groups left for the run's policy (kept, seen), the roles' metrics
        (``role/<role>/update/...``) and whether any role was updated."""
        metrics: dict[str, float] = {}
        updated = False
        for role, p in self.policies.items():
            mine = [g for g in kept if g.role == role]
            if not mine:
                metrics[f"role/{role}/update/skipped"] = 1.0
                continue
            sampled = [g for g in seen if g.role == role]
            for name, value in p.learner.update(mine, sampled).items():
                metrics[f"role/{role}/{name}"] = value
            p.sync.push(p.learner.weights(), p.learner.version)
            metrics[f"role/{role}/policy_version"] = float(p.learner.version)
            updated = True
        own = set(self.policies)
        rest_kept = [g for g in kept if g.role not in own]
        rest_seen = [g for g in seen if g.role not in own]
        return rest_kept, rest_seen, metrics, updated

    # ----------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """Each role's optimizer, schedule, coefficients and version (its weights are saved as an HF
        model under ``roles/<role>/model``)."""
        return {
            role: {
                "learner": p.learner.state_dict(),
                "coefficients": p.learner.coefs.state(),
                "version": p.learner.version,
            }
            for role, p in self.policies.items()
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        from rlvr.train.learn.controllers import Coefficients

        for role, p in self.policies.items():
            if role not in state:
                raise RlvrError(f"--resume: the checkpoint holds no optimizer state of role '{role}'")
            saved = state[role]
            p.learner.load_state_dict(saved["learner"])
            p.learner.coefs = Coefficients(**saved["coefficients"])
            p.learner.version = saved["version"]
            p.sync.push(p.learner.weights(), p.learner.version)
