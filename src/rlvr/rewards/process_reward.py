"""Step scores from a process reward model: a Hugging Face token classifier read at each step's end.

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
"""

from __future__ import annotations

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
    offsets = encoded["offset_mapping"]
    positions = []
    for end in step_end_chars(completion, separator):
        char = start + max(end, 1) - 1  # the step's last character (an empty step: the one before it)
        covering = next((i for i, (lo, hi) in enumerate(offsets) if lo <= char < hi), None)
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


@register_reward("process_reward_model", check=_check, setup=_setup)
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
