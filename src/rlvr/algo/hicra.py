"""HICRA, HIerarchy-aware Credit Assignment (seeds 003:180): more of the update on planning tokens.

The abstract finds that RL's gains come first from procedural (execution) skill and then from
"high-level strategic planning", and that GRPO "dilute[s] the learning signal across all tokens";
HICRA "concentrates optimization efforts on high-impact planning tokens". It does not say how
planning tokens are found nor the exact reweighting. Chosen here:

**Planning tokens.** A *strategic gram* is a phrase that steers the reasoning ("let's", "we need
to", "alternatively", "wait", "check", ...). :class:`PlanningClassifier` finds the phrases in a
completion's text (case-insensitive, whole words, any run of whitespace between words, ``'`` or
``’``) and marks every token whose characters overlap a match. The text is rebuilt from the token
ids with a table of each vocabulary id's text, decoded once per tokenizer (:func:`vocabulary_pieces`),
so the loss classifies ``completion_ids`` [B, T] with string operations only: no tokenizer call per
step, and the phrases are matched in text, so a phrase split into different tokens in different
contexts (" First" vs "First") is still found. The default list is :data:`DEFAULT_PLANNING_PHRASES`.

**Credit.** A planning token's advantage ``A`` becomes ``(1 + α)·A`` (both signs amplified, the
plain reading of "concentrates optimization efforts"); ``sign_aware: true`` uses ``A + α·|A|``
instead: correct plans reinforced by ``(1 + α)``, failed plans penalised by only ``(1 − α)``, so
that strategic exploration is not punished as hard as it is rewarded. ``α = 0`` is the inner loss
unchanged; so is a completion with no planning tokens.

The loss is a modifier: the scaled advantages go to ``inner`` (PPO by default) with its
``inner_params``. It needs the trainer's ``completion_ids`` context [B, T] and the name of the
tokenizer of the trained model (``tokenizer``: a built-in name, a directory or a hub id; the
vocabulary table is built on the first call and cached for the process).
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Sequence
from typing import Any

import torch

from rlvr.algo.losses import POLICY_LOSSES, inner_loss, masked_fraction, per_token

# Strategic grams: deduction ("we can use", "the key is"), planning ("let's", "first", "we need
# to"), branching ("alternatively", "another approach", "instead") and backtracking or checking
# ("wait", "but the problem", "check", "verify"). The paper's grams are mined from successful
# solutions; this list is a hand-picked, model-independent stand-in.
DEFAULT_PLANNING_PHRASES: tuple[str, ...] = (
    "let's",
    "let me",
    "first",
    "we need to",
    "i need to",
    "we can use",
    "the key is",
    "alternatively",
    "another approach",
    "instead",
    "wait",
    "but the problem",
    "check",
    "verify",
)


def _phrase_pattern(phrases: Sequence[str]) -> re.Pattern[str]:
    """One regex matching any of ``phrases`` as whole words, longest first, case-insensitively."""
    if isinstance(phrases, str) or not phrases:
        raise ValueError("hicra: phrases must be a non-empty list of phrases")
    for phrase in phrases:
        if not isinstance(phrase, str) or not phrase.strip():
            raise ValueError(f"hicra: phrases must be non-empty strings, got {phrase!r}")
    parts = []
    for phrase in sorted({p.strip() for p in phrases}, key=len, reverse=True):
        words = [re.escape(w).replace("'", "['’]") for w in phrase.split()]
        parts.append(r"\s+".join(words))
    return re.compile(r"(?<![0-9A-Za-z])(?:" + "|".join(parts) + r")(?![0-9A-Za-z])", re.IGNORECASE)


class PlanningClassifier:
    """Marks the tokens of planning phrases in token-id rows, from a table of each id's text.

    ``pieces[i]`` is the text token id ``i`` adds to a decoded sequence (with its leading space, if
    any); an id outside the table adds nothing.
    """

    def __init__(self, pieces: Sequence[str], phrases: Sequence[str] = DEFAULT_PLANNING_PHRASES) -> None:
        self.pieces = list(pieces)
        self.pattern = _phrase_pattern(phrases)

    def row(self, ids: Sequence[int]) -> list[bool]:
        """For one row of ids: whether each token overlaps a planning phrase of the row's text."""
        texts = [self.pieces[i] if 0 <= i < len(self.pieces) else "" for i in ids]
        ends, total = [], 0
        for text in texts:
            total += len(text)
            ends.append(total)
        starts = [end - len(text) for end, text in zip(ends, texts)]
        flags = [False] * len(texts)
        for match in self.pattern.finditer("".join(texts)):
            # tokens [first, last) are the ones with end > match.start and start < match.end
            first = bisect.bisect_right(ends, match.start())
            last = bisect.bisect_left(starts, match.end())
            for j in range(first, last):
                flags[j] = flags[j] or ends[j] > starts[j]  # an empty piece adds no character
        return flags

    def mask(self, completion_ids: torch.Tensor) -> torch.Tensor:
        """[B, T] bool: the planning tokens of each row of ``completion_ids`` [B, T]."""
        rows = [self.row(ids) for ids in completion_ids.tolist()]
        flags = torch.tensor(rows, dtype=torch.bool, device=completion_ids.device)
        return flags.reshape(completion_ids.shape)


def vocabulary_pieces(tokenizer: Any) -> list[str]:
    """Each vocabulary id's text as it appears after another token (so a SentencePiece word keeps
    its leading space): ``decode([anchor, i])`` minus ``decode([anchor])``, in one batch decode."""
    size = len(tokenizer)
    anchor = tokenizer.encode("a", add_special_tokens=False)[0]
    options = {"skip_special_tokens": False, "clean_up_tokenization_spaces": False}
    base = tokenizer.decode([anchor], **options)
    pairs = tokenizer.batch_decode([[anchor, i] for i in range(size)], **options)
    return [text[len(base) :] if text.startswith(base) else text for text in pairs]


@functools.lru_cache(maxsize=4)
def planning_classifier(tokenizer: str, phrases: tuple[str, ...]) -> PlanningClassifier:
    """The classifier for a tokenizer (loaded once per process and name, not once per call)."""
    from rlvr.models.loading import load_tokenizer

    _phrase_pattern(phrases)  # bad phrases fail before the tokenizer loads
    return PlanningClassifier(vocabulary_pieces(load_tokenizer(tokenizer)), phrases)


def hicra_advantages(
    advantages: torch.Tensor, planning: torch.Tensor, alpha: float, sign_aware: bool = False
) -> torch.Tensor:
    """[B, T] advantages with each planning token's ``A`` scaled to ``(1 + α)·A``, or with
    ``sign_aware`` shifted to ``A + α·|A|``; other tokens keep ``A``."""
    if not alpha >= 0.0:
        raise ValueError(f"hicra: alpha must be >= 0, got {alpha}")
    adv = per_token(advantages).expand(planning.shape)
    boosted = adv + alpha * adv.abs() if sign_aware else (1.0 + alpha) * adv
    return torch.where(planning, boosted, adv)


@POLICY_LOSSES.register("hicra")
def hicra_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    completion_ids: torch.Tensor,
    tokenizer: str | None = None,
    alpha: float = 0.2,
    phrases: Sequence[str] | None = None,
    sign_aware: bool = False,
    inner: str = "ppo_clip",
    inner_params: dict[str, Any] | None = None,
    clip_low: float | None = None,
    clip_high: float | None = None,
    entropy: torch.Tensor | None = None,
    sampling_logprobs: torch.Tensor | None = None,
    truncated: torch.Tensor | None = None,
    group_index: torch.Tensor | None = None,
    given_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """HICRA (seeds 003:180): the ``inner`` loss with the planning tokens' advantages amplified by
    ``alpha`` (:func:`hicra_advantages`), planning tokens found in ``completion_ids`` by the
    strategic-gram classifier of ``tokenizer`` (``phrases``, default
    :data:`DEFAULT_PLANNING_PHRASES`)."""
    if not tokenizer:
        raise ValueError(
            "hicra: tokenizer must name the trained model's tokenizer (e.g. its model.name), got None"
        )
    if not alpha >= 0.0:
        raise ValueError(f"hicra: alpha must be >= 0, got {alpha}")
    classifier = planning_classifier(str(tokenizer), tuple(phrases or DEFAULT_PLANNING_PHRASES))
    planning = classifier.mask(completion_ids)
    return hicra_with_mask(
        logprobs, old_logprobs, advantages, mask, planning, alpha, sign_aware, inner, inner_params,
        clip_low=clip_low, clip_high=clip_high, entropy=entropy, sampling_logprobs=sampling_logprobs,
        truncated=truncated, group_index=group_index, given_mask=given_mask,
    )  # fmt: skip


def hicra_with_mask(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    planning: torch.Tensor,
    alpha: float,
    sign_aware: bool = False,
    inner: str = "ppo_clip",
    inner_params: dict[str, Any] | None = None,
    **context: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """HICRA given the planning mask [B, T] (bool): the ``inner`` loss on :func:`hicra_advantages`,
    and the share of valid tokens that are planning tokens (``hicra_planning_frac``)."""
    adv = hicra_advantages(advantages, planning, alpha, sign_aware)
    loss, stats = inner_loss(inner, inner_params, logprobs, old_logprobs, adv, mask, **context)
    return loss, {**stats, "hicra_planning_frac": masked_fraction(planning, mask)}
