"""What every rollout engine takes and returns.

Engines take token ids and return token ids: the trainer never re-tokenises text (docs/design.md,
principle 3). Each completion carries the per-token logprobs under the sampling distribution, so
that on-policy updates can reuse them and off-policy corrections can compare engine and trainer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch


@dataclass(frozen=True)
class SamplingParams:
    """How to sample: ``n`` completions per prompt; ``temperature == 0`` means greedy."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    ignore_eos: bool = False  # run every sequence to max_new_tokens (fixed-work benchmarks)
    # a sequence also ends at the token where one of these strings completes (e.g. "</tool_call>");
    # its finish_reason is then "stop_string" and the token is kept
    stop_strings: tuple[str, ...] = ()
    # also return each sampled token's self-certainty, KL(uniform ‖ p) of the policy's next-token
    # distribution at temperature 1 (for the self_certainty reward; computed from logits in hand)
    self_certainty: bool = False
    # intent-factored generation (IFG, rollout.ifg): while a sequence is in its intent (until the
    # token that completes ``intent_end``, or ``intent_max_tokens`` tokens) it is sampled at
    # ``intent_temperature``, after it at ``temperature``; None: one temperature throughout
    intent_temperature: float | None = None
    intent_end: str = "\n"
    intent_max_tokens: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass
class Completion:
    """One sampled continuation of one prompt."""

    prompt_index: int
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" (EOS), "stop_string" (a stop string completed) or "length" (max_new_tokens)
    text: str = ""
    self_certainty: list[float] | None = None  # per token, when SamplingParams.self_certainty asked
    # per token, the temperature it was sampled at (and its logprob taken under), when
    # SamplingParams.intent_temperature made it vary within the completion
    temperatures: list[float] | None = None

    def __len__(self) -> int:
        return len(self.token_ids)


class RolloutEngine(Protocol):
    """Generates completions; owns no training logic."""

    generator: torch.Generator  # the sampling RNG (checkpointed with the run)
    pad_id: int
    policy_version: int  # the learner version of the weights it samples from (set by a weight sync)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        """``params.n`` completions for each prompt, grouped by prompt, in prompt order."""
        ...

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the engine sample from ``model``'s current weights."""
        ...


class KVReuseEngine(RolloutEngine, Protocol):
    """An engine that can continue a sequence from its kept KV cache (multi-turn episodes prefill
    only what a turn added). Optional: ``run_episodes`` re-prefills with engines that lack it."""

    def generate_with_states(
        self, prompts: list[list[int]], params: SamplingParams, states: list[Any] | None = None
    ) -> tuple[list[list[Completion]], list[list[Any]]]:
        """:meth:`generate`, continuing each prompt from its ``states`` entry (``None``: from
        nothing; the state of a prompt's first ids, as an earlier call returned it), and returning
        each completion's state (its prompt and tokens but the last, which was never fed)."""
        ...
