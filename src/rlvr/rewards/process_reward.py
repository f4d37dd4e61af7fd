"""Step scores from a process reward model: a Hugging Face token classifier read at each step's end,
or a causal language model asked, after each step, whether the step is good.

``process_reward_model`` renders the example's prompt and the completion like ``reward_model`` does
(the tokenizer's chat template), splits the completion into steps at ``separator`` (which must be
the run's ``rewards.step_separator``: the counts are checked), runs the classifier once, and reads
its output at the last token of every step: the probability of class ``label`` (``transform:
prob``, a softmax over the classes) or its logit (``logit``). It returns ``{"steps": [...]}``, one
score per step, which the step-reward channel places on the policy's tokens (docs/credit.md).

The model is loaded once per reward worker by the reward's ``setup`` and cached per process, as for
``reward_model``. Offsets come from the tokenizer's own offset mapping of the rendered text, so
they need a fast tokenizer. A completion whose steps do not all fit in ``max_length`` tokens is an
error for that sample (counted), never a list cut short.

``generative_process_reward`` reads a *generative* PRM (the Math-Shepherd family, seeds and
docs/credit.md): a causal LM trained to answer a step tag with a "good" or a "bad" token. The
completion is written with ``step_tag`` after every step (Math-Shepherd's is ``" ки"``; the default
``""`` reads the step's own last token), and at the tag's last token the model's
next-token distribution gives ``p(good) / (p(good) + p(bad))`` (``transform: prob``) or
``logit(good) - logit(bad)`` (``logit``). One forward pass reads every step: a causal model's
prediction after step k sees only steps 1..k. A tag the tokenizer merges with the text after it is an
error for that sample (the prediction would have seen the next step), as is a "good" or "bad"
string that is not exactly one token (refused when the worker loads the model).
"""

from __future__ import annotations

import bisect
import functools
import math
from pathlib import Path
from typing import Annotated, Any, Literal

from annotated_types import Ge, Gt

from rlvr.data.example import Example
from rlvr.rewards.registry import register_reward
from rlvr.rewards.reward_model import _check, load_reward_model, render


def load_process_model(path: str, device: str = "cpu", threads: int = 1) -> tuple[Any, Any]:
    """(model, tokenizer) of the token classifier at ``path``, in eval mode, cached per process."""
    model, tokenizer = load_reward_model(path, device, threads, tokens=True)
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(f"process reward model {path}: needs a fast tokenizer (offset mappings)")
    return model, tokenizer


def step_end_chars(completion: str, separator: str) -> list[int]:
    """The character position (exclusive) where each step's own text ends, separators left out."""
    ends, at = [], 0
    parts = completion.split(separator)
    for k, part in enumerate(parts):
        ends.append(at + len(part))
        at += len(part) + (len(separator) if k < len(parts) - 1 else 0)
    return ends


def covering_token(offsets: list[tuple[int, int]], char: int) -> int | None:
    """The index of the token whose character span holds ``char`` (offsets in text order; a
    bisection, so a completion of many steps costs no more than its tokens), or None."""
    i = bisect.bisect_right(offsets, (char, math.inf)) - 1
    while i >= 0 and offsets[i][0] == offsets[i][1]:  # zero-width tokens (special ones) hold nothing
        i -= 1
    return i if i >= 0 and offsets[i][0] <= char < offsets[i][1] else None


def step_scores(
    path: str,
    example: Example,
    completion: str,
    *,
    separator: str = "\n\n",
    label: int = 1,
    transform: str = "prob",
    max_length: int = 4096,
    device: str = "cpu",
    threads: int = 1,
) -> list[float]:
    """One score per step of ``completion`` (see the module docstring)."""
    import torch

    model, tokenizer = load_process_model(path, device, threads)
    if not 0 <= label < model.config.num_labels:
        raise ValueError(f"label {label} out of range: the model has {model.config.num_labels} labels")
    text = render(tokenizer, example, completion)
    start = text.rfind(completion)
    if start < 0:
        raise ValueError("the chat template changed the completion's text; cannot find its steps")
    encoded = tokenizer(
        text, return_offsets_mapping=True, truncation=True, max_length=max_length, add_special_tokens=False
    )
    offsets = [tuple(span) for span in encoded["offset_mapping"]]
    positions = []
    for end in step_end_chars(completion, separator):
        char = start + max(end, 1) - 1  # the step's last character (an empty step: the one before it)
        covering = covering_token(offsets, char)
        if covering is None:  # cut off by max_length
            raise ValueError(f"the completion's steps do not fit in max_length={max_length} tokens")
        positions.append(covering)
    ids = torch.tensor([encoded["input_ids"]], device=device)
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0].float()
    picked = logits[positions]
    values = picked.softmax(dim=-1)[:, label] if transform == "prob" else picked[:, label]
    return values.tolist()


def _setup(params: dict[str, Any]) -> None:
    load_process_model(params["path"], params.get("device", "cpu"), params.get("threads", 1))


@register_reward(
    "process_reward_model", check=_check, setup=_setup, follows={"separator": "rewards.step_separator"}
)
def process_reward_model(
    completion: str,
    example: Example,
    *,
    path: str,
    separator: str = "\n\n",
    label: Annotated[int, Ge(0)] = 1,
    transform: Literal["prob", "logit"] = "prob",
    max_length: Annotated[int, Gt(0)] = 4096,
    device: str = "cpu",
    threads: Annotated[int, Ge(0)] = 1,
) -> dict[str, list[float]]:
    """The classifier's score at the end of every step: ``{"steps": [...]}``."""
    scores = step_scores(
        path, example, completion, separator=separator, label=label, transform=transform,
        max_length=max_length, device=device, threads=threads,
    )  # fmt: skip
    return {"steps": scores}


# -- a generative process reward model ---------------------------------------------------------------


@functools.lru_cache(maxsize=2)
def load_generative_prm(path: str, device: str = "cpu", threads: int = 1) -> tuple[Any, Any]:
    """(causal LM, fast tokenizer) at ``path``, in eval mode, cached per process."""
    import torch
    import transformers

    from rlvr.hub import hub_offline

    if threads > 0:
        torch.set_num_threads(threads)
    local = Path(path).exists() or hub_offline()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=local)
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(f"generative process reward model {path}: needs a fast tokenizer (offset mappings)")
    auto = transformers.AutoModelForCausalLM
    model = auto.from_pretrained(path, dtype=torch.float32, local_files_only=local)
    return model.to(device).eval(), tokenizer


def verdict_token(tokenizer: Any, text: str, what: str) -> int:
    """The id of ``text``, which must be exactly one token of the PRM's vocabulary."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) != 1:
        raise ValueError(f"the {what} verdict {text!r} is {len(ids)} tokens of this PRM's tokenizer, not one")
    return ids[0]


def tagged_text(
    tokenizer: Any, example: Example, completion: str, separator: str, step_tag: str, template: str
) -> tuple[str, list[int]]:
    """The text the generative PRM reads, and the character position where each step's tag ends
    (exclusive): the completion with ``step_tag`` after every step, as the assistant turn of the
    chat template (``chat``) or after the question and a blank line (``plain``)."""
    steps = completion.split(separator)
    tagged = separator.join(step + step_tag for step in steps)
    if template == "chat":
        text = render(tokenizer, example, tagged)
        start = text.rfind(tagged)
        if start < 0:
            raise ValueError("the chat template changed the completion's text; cannot find its steps")
    else:
        text = f"{example.question}\n\n{tagged}"
        start = len(text) - len(tagged)
    ends, at = [], start  # from the steps themselves: a tag may contain the separator's characters
    for step in steps:
        at += len(step) + len(step_tag)
        ends.append(at)
        at += len(separator)
    return text, ends


def generative_step_scores(
    path: str,
    example: Example,
    completion: str,
    *,
    separator: str = "\n\n",
    step_tag: str = "",
    good: str = "+",
    bad: str = "-",
    template: str = "chat",
    transform: str = "prob",
    max_length: int = 4096,
    device: str = "cpu",
    threads: int = 1,
) -> list[float]:
    """One score per step of ``completion`` from a causal LM (see the module docstring)."""
    import torch

    model, tokenizer = load_generative_prm(path, device, threads)
    good_id, bad_id = verdict_token(tokenizer, good, "good"), verdict_token(tokenizer, bad, "bad")
    text, ends = tagged_text(tokenizer, example, completion, separator, step_tag, template)
    encoded = tokenizer(
        text, return_offsets_mapping=True, truncation=True, max_length=max_length, add_special_tokens=False
    )
    offsets = [tuple(span) for span in encoded["offset_mapping"]]
    positions = []
    for end in ends:
        char = max(end, 1) - 1  # the tag's last character
        covering = covering_token(offsets, char)
        if covering is None:
            raise ValueError(f"the completion's steps do not fit in max_length={max_length} tokens")
        if offsets[covering][1] != end:
            token = text[offsets[covering][0] : offsets[covering][1]]
            raise ValueError(
                f"the tokenizer merges the step tag {step_tag!r} with the text after it ({token!r}): "
                "the verdict would see the next step"
            )
        positions.append(covering)
    ids = torch.tensor([encoded["input_ids"]], device=device)
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, positions][:, [good_id, bad_id]].float()
    values = logits.softmax(dim=-1)[:, 0] if transform == "prob" else logits[:, 0] - logits[:, 1]
    return values.tolist()


def _setup_generative(params: dict[str, Any]) -> None:
    _, tokenizer = load_generative_prm(params["path"], params.get("device", "cpu"), params.get("threads", 1))
    verdict_token(tokenizer, params.get("good", "+"), "good")
    verdict_token(tokenizer, params.get("bad", "-"), "bad")


@register_reward(
    "generative_process_reward",
    check=_check,
    setup=_setup_generative,
    follows={"separator": "rewards.step_separator"},
)
def generative_process_reward(
    completion: str,
    example: Example,
    *,
    path: str,
    separator: str = "\n\n",
    step_tag: str = "",
    good: str = "+",
    bad: str = "-",
    template: Literal["chat", "plain"] = "chat",
    transform: Literal["prob", "logit"] = "prob",
    max_length: Annotated[int, Gt(0)] = 4096,
    device: str = "cpu",
    threads: Annotated[int, Ge(0)] = 1,
) -> dict[str, list[float]]:
    """A causal LM's verdict after every step: ``{"steps": [...]}``."""
    scores = generative_step_scores(
        path, example, completion, separator=separator, step_tag=step_tag, good=good, bad=bad,
        template=template, transform=transform, max_length=max_length, device=device, threads=threads,
    )  # fmt: skip
    return {"steps": scores}
