"""The coder and the test writer (CURE, seeds/000:1): one policy writes code and unit tests for it.

Both roles see the same problem (a function task with hidden tests: ``metadata.entry_point``,
``tests``, a reference solution; :mod:`rlvr.data.code_functions` makes such tasks) and are sampled
together. The coder answers the problem's own prompt and is scored by ``rewards.functions`` with
the test writer's suites in ``metadata.generated_tests`` (the ``code`` reward on the hidden tests,
and ``generated_tests``: the share of the valid suites it passes). The test writer is asked for a
few asserts and scored by ``test_discrimination``: a suite the reference solution fails earns 0,
a valid one 0.5 plus half the share of the coder's wrong programs (by the hidden tests) it rejects.
"""

from __future__ import annotations

from typing import Any

from rlvr.data.example import Example
from rlvr.eval.evaluate import CORRECT_AT
from rlvr.roles.base import Played, RoleGame, RoleGroup, RolePrompt, fill, register_game

TESTER_PROMPT = (
    "You write unit tests. The function to test: {description}.\n"
    "Write {asserts} assert statements that call `{entry_point}` on different inputs and check the "
    "results. Reply with the asserts only, in a ```python code block."
)


@register_game("coder_tester")
class CoderTester(RoleGame):
    """See the module docstring. ``asserts``: how many asserts the test writer is asked for."""

    roles = ("coder", "tester")
    phases = (("coder", "tester"),)
    prompt_templates = {"tester": TESTER_PROMPT}
    template_fields = {"tester": ("description", "entry_point", "asserts", "question")}

    def __init__(self, asserts: int = 3, correctness: str = "code") -> None:
        if not 1 <= asserts <= 20:
            raise ValueError("coder_tester: asserts must be between 1 and 20")
        self.asserts, self.correctness = asserts, correctness

    def prompts(self, role: str, example: Example, played: Played, template: str | None) -> list[RolePrompt]:
        if role == "coder":
            return super().prompts(role, example, played, template)
        meta = example.metadata
        entry_point = meta.get("entry_point")
        if not isinstance(entry_point, str) or not entry_point:
            raise ValueError(f"{example.where}: coder_tester needs a function task (metadata.entry_point)")
        values = {
            "description": meta.get("description") or example.question,
            "entry_point": entry_point,
            "asserts": self.asserts,
            "question": example.question,
        }
        text = fill(template or TESTER_PROMPT, values, "roles.settings.tester.prompt")
        return [RolePrompt([{"role": "user", "content": text}])]

    def scoring_info(self, role: str, group: RoleGroup, example: Example, played: Played) -> dict[str, Any]:
        if role == "coder":
            return {"generated_tests": [text for g in played.get("tester", []) for text in g.texts]}
        # the coder's scored programs, and which of them the hidden tests accept
        programs = [t for g in played["coder"] for t in g.trajectories if not t.errors]
        return {
            "programs": [t.text for t in programs],
            "programs_correct": [t.rewards.get(self.correctness, 0.0) >= CORRECT_AT for t in programs],
        }

    def default_rewards(self, role: str) -> list[dict[str, Any]]:
        if role == "tester":
            return [{"name": "test_discrimination"}]
        return super().default_rewards(role)
