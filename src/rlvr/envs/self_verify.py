"""Self-verification as a trained behaviour: answer, judge your own answer, revise if it is wrong.

Two model turns per episode, on any task whose answer is checked against a reference (the
generate → verify → revise loop of seeds/002:6, seeds/000:28; PAG's "revise only when the check
finds an error", seeds/002:12):

1. the model answers the example's prompt (its answer in ``<answer>`` tags, as the task asks);
2. the environment asks it to check that answer (:data:`VERIFY_PROMPT`): a verdict in
   ``<verdict>correct</verdict>`` or ``<verdict>incorrect</verdict>``, then the final answer in
   ``<answer>`` tags (the same one, or a corrected one).

The episode ends after the second turn. Rewards, each on its own turn (``Trajectory.turn_rewards``,
so per-turn credit such as ``algo.advantage: step_returns`` trains each turn on its own):

- turn 1: ``first_weight`` if the first answer is right (default 0: its credit is what follows);
- turn 2: ``verdict_weight`` if the verdict agrees with the truth about the first answer (the
  verifier's verdict), and the run's rewards (``rewards.functions``, in the reward pool) score the
  final turn's text like any completion: the final answer is graded by the real verifier.

The environment's own check of the first answer (for the verdict reward) compares the last
``<answer>`` tag with the example's reference as :func:`rlvr.eval.scaling.answer_key` normalises
both: exact values for numbers (``17``, ``17.0`` and ``34/2`` agree), whitespace and case folded
for text. It fits tasks with one canonical answer (arithmetic, reasoning-gym's exact-answer
tasks); a task whose answers need symbolic equivalence would mark an equivalent first answer
wrong. An answer longer than ``max_answer_chars`` counts as wrong without being parsed.

With ``check: code`` (function tasks such as ``code_functions``: ``metadata.tests`` and
``entry_point``) the answers are programs instead: each turn's last fenced code block, judged by
running the example's hidden tests in the sandbox (:func:`rlvr.rewards.code.code_reward`, the same
check as the ``code`` reward; it refuses to run without bubblewrap), and the check request asks for
the final function in a code block (:data:`VERIFY_CODE_PROMPT`).

``outcome()`` reports, per episode, ``first_correct``, ``final_correct`` (by the same check),
``verdict_agrees``, ``verdict_given``, ``revised`` (the final answer differs from the first),
``fixed`` (wrong → right) and ``broken`` (right → wrong); they are logged as ``env/*`` reward
components, in training and held-out evaluation.
"""

from __future__ import annotations

import random
import re

from rlvr.data.example import Example
from rlvr.envs.base import Environment, Message, Step, register_env
from rlvr.envs.data_params import DataParam
from rlvr.eval.scaling import answer_key

VERIFY_PROMPT = (
    "Check your answer step by step. Then write <verdict>correct</verdict> if it is right or "
    "<verdict>incorrect</verdict> if it is wrong, and give the final answer inside <answer></answer> "
    "tags: the same answer if it is right, the corrected one if it is wrong."
)
VERIFY_CODE_PROMPT = (
    "Check your function step by step against the task. Then write <verdict>correct</verdict> if it is "
    "right or <verdict>incorrect</verdict> if it is wrong, and give the final function in a ```python "
    "code block: the same one if it is right, the corrected one if it is wrong."
)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_VERDICT = re.compile(r"<verdict>\s*(correct|incorrect)\s*</verdict>", re.IGNORECASE)


def last_answer(text: str, max_chars: int) -> str | None:
    """The last ``<answer>`` tag's content, or None (none, or longer than ``max_chars``)."""
    found = _ANSWER.findall(text)
    if not found or len(found[-1]) > max_chars:
        return None
    return found[-1]


def verdict(text: str) -> bool | None:
    """The last verdict in ``text``: True for correct, False for incorrect, None when there is none."""
    found = _VERDICT.findall(text)
    return None if not found else found[-1].lower() == "correct"


@register_env("self_verify")
class SelfVerify(Environment):
    """Answer, then verify and (if wrong) revise: module docstring."""

    data_params = {
        "verdict_weight": DataParam(float, 0.0, 10.0),
        "first_weight": DataParam(float, 0.0, 10.0),
    }

    def __init__(
        self,
        verify_prompt: str | None = None,
        verdict_weight: float = 0.5,
        first_weight: float = 0.0,
        max_answer_chars: int = 200,
        check: str = "answer",
    ) -> None:
        if verdict_weight < 0 or first_weight < 0:
            raise ValueError("self_verify: verdict_weight and first_weight must be >= 0")
        if check not in ("answer", "code"):
            raise ValueError(f"self_verify: check must be 'answer' or 'code', not {check!r}")
        if check == "code":  # model-written code runs only where the sandbox isolates it
            from rlvr.rewards import sandbox

            sandbox.require_isolation(False, warn=False)
        self.check = check
        if verify_prompt is None:
            verify_prompt = VERIFY_CODE_PROMPT if check == "code" else VERIFY_PROMPT
        self.verify_prompt, self.verdict_weight, self.first_weight = (
            verify_prompt,
            verdict_weight,
            first_weight,
        )
        self.max_answer_chars = max_answer_chars
        self.reference: str | None = None
        self.first: str | None = None
        self.final: str | None = None
        self.given: bool | None = None
        self.turns = 0
        self.example: Example | None = None
        self._verdicts: dict[str, bool] = {}  # a program's test result, run once per episode

    def reset(self, example: Example, rng: random.Random) -> list[Message]:
        self.example = example
        if self.check == "code":
            tests = example.metadata.get("tests")
            if not isinstance(tests, str) or not tests.strip() or not example.metadata.get("entry_point"):
                raise ValueError(
                    f"self_verify (check: code): example {example.id} has no metadata.tests and "
                    "metadata.entry_point to run its programs against"
                )
            return list(example.prompt)
        if example.reference is None:
            raise ValueError(f"self_verify: example {example.id} has no reference answer to check against")
        self.reference = answer_key(example.reference)
        return list(example.prompt)

    def _answer(self, text: str) -> str | None:
        """A turn's answer: its last ``<answer>`` tag, or (``check: code``) its last code block."""
        if self.check == "code":
            from rlvr.rewards.code import _FENCE

            blocks = _FENCE.findall(text)
            return blocks[-1] if blocks else None
        return last_answer(text, self.max_answer_chars)

    def _right(self, answer: str | None) -> bool:
        if answer is None:
            return False
        if self.check == "code":
            if answer not in self._verdicts:
                from rlvr.rewards.code import code_reward

                self._verdicts[answer] = code_reward(answer, self.example, extract="raw") >= 1.0
            return self._verdicts[answer]
        return answer_key(answer) == self.reference

    def _same(self, a: str | None, b: str | None) -> bool:
        if self.check == "code":
            return (a or "").strip() == (b or "").strip()
        return answer_key(a or "") == answer_key(b or "")

    def step(self, text: str) -> Step:
        self.turns += 1
        if self.turns == 1:
            self.first = self._answer(text)
            reward = self.first_weight if self._right(self.first) else 0.0
            return Step(messages=[{"role": "user", "content": self.verify_prompt}], reward=reward)
        self.given = verdict(text)
        revised = self._answer(text)
        self.final = revised if revised is not None else self.first
        agrees = self.given is not None and self.given == self._right(self.first)
        return Step(reward=self.verdict_weight if agrees else 0.0, done=True)

    def outcome(self) -> dict[str, float]:
        first, final = self._right(self.first), self._right(self.final)
        changed = self.turns >= 2 and not self._same(self.final, self.first)
        return {
            "first_correct": float(first),
            "final_correct": float(final),
            "verdict_given": float(self.given is not None),
            "verdict_agrees": float(self.given is not None and self.given == first),
            "revised": float(changed),
            "fixed": float(changed and final and not first),
            "broken": float(changed and first and not final),
        }
