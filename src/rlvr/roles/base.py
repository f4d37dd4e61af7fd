"""Role games: what each role is asked, and what its rewards read of the others (docs/roles.md).

A game plays one training example with several roles of one policy. It is a plain object with no
engine, pool or optimizer (:mod:`rlvr.roles.play` runs it):

- ``roles``: the role names, the first being the *primary* role (it answers the example's own
  prompt, is scored by ``rewards.functions``, and is what held-out accuracy measures);
- ``phases``: the order of sampling. The roles of one phase are sampled together; then each is
  scored, in ``roles`` order. A role's prompts may read what earlier phases sampled and how they
  were scored; its scoring may read everything sampled in its phase and every role scored before it;
- :meth:`RoleGame.prompts`: a role's prompts for one example (the primary role: the example's own);
- :meth:`RoleGame.scoring_info`: what a role's rewards read of the others, merged into the scored
  example's ``metadata`` (a coder's rewards get the test writer's suites, the test writer's get the
  coder's programs and which of them were right);
- :meth:`RoleGame.default_rewards`: the rewards of a role that ``roles.settings`` does not set.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlvr.data.example import Example
from rlvr.registry import Registry
from rlvr.trajectory import Trajectory


@dataclass
class RolePrompt:
    """One prompt of one role: its chat messages, and what the role's rewards read about it."""

    messages: list[dict[str, str]]
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class RoleGroup:
    """The samples of one role for one prompt, and (once scored) their trajectories."""

    role: str
    example_index: int
    prompt: RolePrompt
    trajectories: list[Trajectory] = field(default_factory=list)

    @property
    def texts(self) -> list[str]:
        return [t.text for t in self.trajectories]


# what one example's game has played so far: role -> its groups (a role may have several prompts)
Played = dict[str, list[RoleGroup]]


class RoleGame:
    """The base of role games; see the module docstring."""

    roles: tuple[str, ...] = ()
    phases: tuple[tuple[str, ...], ...] = ()
    prompt_templates: dict[str, str] = {}  # the non-primary roles' default instruction templates
    template_fields: dict[str, tuple[str, ...]] = {}  # the placeholders each role's template may use

    def prompts(self, role: str, example: Example, played: Played, template: str | None) -> list[RolePrompt]:
        """``role``'s prompts for ``example``: the example's own for the primary role."""
        if role == self.roles[0]:
            return [RolePrompt(list(example.prompt))]
        raise NotImplementedError(f"{type(self).__name__} has no prompts for role {role!r}")

    def scoring_info(self, role: str, group: RoleGroup, example: Example, played: Played) -> dict[str, Any]:
        """What ``role``'s rewards read of the other roles, for ``group`` (merged into metadata)."""
        return dict(group.prompt.info)

    def default_rewards(self, role: str) -> list[dict[str, Any]]:
        """``role``'s rewards when ``roles.settings.<role>.rewards`` is unset (RewardItem fields)."""
        raise NotImplementedError(f"{type(self).__name__} has no default rewards for role {role!r}")

    def check(self) -> None:
        """Refuse an inconsistent game definition (a programming error, not a user's)."""
        phased = [r for phase in self.phases for r in phase]
        if sorted(phased) != sorted(self.roles) or len(set(phased)) != len(phased):
            raise ValueError(f"{type(self).__name__}: phases {self.phases} must list each role once")


GAMES: Registry[Callable[..., RoleGame]] = Registry("role game")


def register_game(name: str) -> Callable[[Callable[..., RoleGame]], Callable[..., RoleGame]]:
    return GAMES.register(name)


def fill(template: str, values: dict[str, Any], key: str) -> str:
    """``template`` with ``{name}`` placeholders filled; an unknown placeholder is an error naming
    ``key`` and the known ones. Only plain names (no attribute or index access) are accepted."""
    import string

    for _, name, spec, conversion in string.Formatter().parse(template):
        if name is None:
            continue
        if name not in values or spec or conversion:
            raise ValueError(
                f"{key}: unknown placeholder {{{name}}} (use {', '.join('{' + k + '}' for k in values)}; "
                "double braces for a literal brace)"
            )
    return template.format(**values)
