"""The roles section: several behaviours of one policy trained in one run (docs/roles.md).

A role game (``roles.game``, registered in :mod:`rlvr.roles`) plays each training example with
several roles: a coder and a test writer, a solver and a verifier. Every role is the same model
(shared weights) prompted as that role; each has its own prompts (the game's), group size, token
limit, rewards (computed from the other roles' outputs, in the reward pool) and loss weight.
The first role of a game is the *primary* one: it answers the example's own prompt, is scored by
``rewards.functions`` and is what held-out accuracy measures. A non-primary role may instead be a
policy of its own (``policy: own``): a separate model with its own engine, learner, optimizer and
checkpoints (:mod:`rlvr.roles.policies`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from rlvr.config.rewards import RewardItem
from rlvr.config.section import Section


class RoleSettings(Section):
    """One role's own settings; unset ones follow the run's (``rollout.*``, the game's rewards)."""

    group_size: int | None = Field(
        None, ge=1, description="Samples per prompt of this role; None: rollout.group_size."
    )
    max_new_tokens: int | None = Field(
        None, ge=1, description="Token limit of this role's completions; None: rollout.max_new_tokens."
    )
    weight: float = Field(
        1.0,
        ge=0,
        description="Loss weight: this role's advantages are multiplied by it (0: sampled and scored, "
        "not trained).",
    )
    rewards: list[RewardItem] | None = Field(
        None,
        description="This role's rewards (the pool runs them on the role's completions, with the other "
        "roles' outputs in the example's metadata); None: the game's. The primary role always uses "
        "rewards.functions.",
    )
    few_shot: list[tuple[str, str]] = Field(
        default_factory=list,
        description="Demonstrations (user message, reply) put before this role's prompt as chat turns "
        "(a small model follows a reply format from one worked example far more often than from an "
        "instruction). Not for the primary role (data.few_shot is its).",
    )
    prompt: str | None = Field(
        None,
        description="This role's instruction template (the game's placeholders, e.g. {question}); "
        "None: the game's. Not for the primary role, which answers the example's prompt.",
    )
    policy: Literal["shared", "own"] = Field(
        "shared",
        description="shared: this role is the run's policy, told apart by its prompt; own: a policy of "
        "its own (a separate model, engine, learner and optimizer, saved under "
        "checkpoints/step-N/roles/<role>/). Not for the primary role, which is the run's policy.",
    )
    model: str | None = Field(
        None,
        description="With policy: own, the model this role starts from (a name or directory; its "
        "tokenizer must be the run's); None: model.name.",
    )
    lr: float | None = Field(
        None, gt=0, description="With policy: own, this role's learning rate; None: optim.lr."
    )

    @model_validator(mode="after")
    def _own_only(self) -> RoleSettings:
        if self.policy == "shared":
            for key in ("model", "lr"):
                if getattr(self, key) is not None:
                    raise ValueError(f"{key} is a setting of a role with a policy of its own (policy: own)")
        return self


class RolesConfig(Section):
    game: str | None = Field(
        None,
        description="A registered role game (rlvr.roles: coder_tester, solver_verifier); None: one role, "
        "the policy answering the example's prompt.",
    )
    params: dict[str, Any] = Field(default_factory=dict, description="The game's keyword arguments.")
    settings: dict[str, RoleSettings] = Field(
        default_factory=dict,
        description="Per-role settings, by role name (roles the game does not have are an error).",
    )
    eval_size: int = Field(
        50,
        ge=0,
        description="Held-out examples the game is played on at each evaluation (sampled as in "
        "training, a fixed seed): eval/role/<role>/<reward> before and after; 0: none.",
    )
