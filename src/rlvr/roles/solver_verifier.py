"""The solver and the verifier: one policy answers, and judges answers (a generative verifier).

The solver answers the example's prompt (scored by ``rewards.functions``). Then the verifier is
shown up to ``answers`` of the solver's distinct answers to the problem, a wrong and a right one
first when the group has both (so that agreeing with "correct" or "wrong" alone cannot earn
much), and asked whether each is right; its reply ends with ``Score: 1`` or ``Score: 0``, the
form the ``judge`` reward parses (:func:`rlvr.rewards.judge.parse_score`), so a trained verifier
served on an OpenAI-compatible endpoint can be the ``judge`` of a later run with this prompt as
its rubric. ``verdict_agreement`` rewards a verdict that agrees with the solver's verifier.
Self-verification in separate prompts (ReVeal, PAG: seeds/002:6, 002:12, 000:28 train it in one
conversation, see :mod:`rlvr.envs.self_verify`).
"""

from __future__ import annotations

from typing import Any

from rlvr.data.example import Example
from rlvr.eval.evaluate import CORRECT_AT
from rlvr.roles.base import Played, RoleGame, RolePrompt, fill, register_game

VERIFIER_PROMPT = (
    "Question:\n{question}\n\nProposed answer:\n{answer}\n\nIs the proposed answer correct? Check it, "
    "then end with one line: Score: 1 if it is correct, Score: 0 if it is wrong."
)
_MAX_ANSWER_CHARS = 2000


@register_game("solver_verifier")
class SolverVerifier(RoleGame):
    """See the module docstring. ``answers``: solver answers the verifier judges per problem."""

    roles = ("solver", "verifier")
    phases = (("solver",), ("verifier",))
    prompt_templates = {"verifier": VERIFIER_PROMPT}
    template_fields = {"verifier": ("question", "answer")}

    def __init__(self, answers: int = 2, correctness: str = "reasoning_gym") -> None:
        if not 1 <= answers <= 16:
            raise ValueError("solver_verifier: answers must be between 1 and 16")
        self.answers, self.correctness = answers, correctness

    def prompts(self, role: str, example: Example, played: Played, template: str | None) -> list[RolePrompt]:
        if role == "solver":
            return super().prompts(role, example, played, template)
        right, wrong, seen = [], [], set()
        for t in (t for g in played["solver"] for t in g.trajectories if not t.errors):
            text = t.text.strip()[:_MAX_ANSWER_CHARS]
            if text and text not in seen:
                seen.add(text)
                (right if t.rewards.get(self.correctness, 0.0) >= CORRECT_AT else wrong).append(text)
        chosen: list[tuple[str, bool]] = []
        while len(chosen) < self.answers and (right or wrong):  # alternate: wrong, right, wrong, ...
            pool, correct = (wrong, False) if (len(chosen) % 2 == 0 and wrong) or not right else (right, True)
            chosen.append((pool.pop(0), correct))
        key = "roles.settings.verifier.prompt"
        return [
            RolePrompt(
                [
                    {
                        "role": "user",
                        "content": fill(
                            template or VERIFIER_PROMPT, {"question": example.question, "answer": answer}, key
                        ),
                    }
                ],
                {"answer_correct": correct},
            )
            for answer, correct in chosen
        ]

    def default_rewards(self, role: str) -> list[dict[str, Any]]:
        if role == "verifier":
            return [{"name": "verdict_agreement"}]
        return super().default_rewards(role)
