"""Scalar rewards from a Hugging Face sequence classifier (a trained reward model).

The model is loaded once per reward worker — by the reward's ``setup``, before the worker accepts
work, so loading is never charged to a call's timeout — and kept in a per-process cache. Each
worker runs torch with ``threads`` threads (default 1: the pool already runs one worker per core).

``reward_model`` scores one completion per call; ``reward_model_group`` is a group reward that
scores the G completions of a prompt in one padded forward pass (faster; needs ``group_sizes``).
:func:`score_texts` is the batched function both use, for offline scoring too.

The text scored is the example's prompt messages plus the completion as the assistant turn,
rendered with the tokenizer's chat template (without one: question, blank line, completion).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from annotated_types import Ge, Gt

from rlvr.data.example import Example
from rlvr.errors import RlvrError
from rlvr.rewards.registry import register_group_reward, register_reward


@functools.lru_cache(maxsize=2)
def load_reward_model(
    path: str, device: str = "cpu", threads: int = 1, tokens: bool = False
) -> tuple[Any, Any]:
    """(model, tokenizer) of the classifier at ``path``, in eval mode, cached per process: a sequence
    classifier, or with ``tokens`` a token classifier (a process reward model)."""
    import torch
    import transformers

    from rlvr.hub import hub_offline

    if threads > 0:
        torch.set_num_threads(threads)
    local = Path(path).exists() or hub_offline()  # a Hub id downloads unless downloads are off
    tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=local)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    auto = (
        transformers.AutoModelForTokenClassification
        if tokens
        else transformers.AutoModelForSequenceClassification
    )
    model = auto.from_pretrained(path, dtype=torch.float32, local_files_only=local)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id  # needed to find each row's last token
    return model.to(device).eval(), tokenizer


def render(tokenizer: Any, example: Example, completion: str) -> str:
    """The text the reward model reads for one completion."""
    messages = [*example.prompt, {"role": "assistant", "content": completion}]
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False)
    return f"{example.question}\n\n{completion}"


def encode_texts(tokenizer: Any, texts: Sequence[str], max_length: int, device: str = "cpu") -> Any:
    """One padded batch of rendered texts, as the classifier reads them (what rm training feeds it too)."""
    return tokenizer(
        list(texts),
        return_tensors="pt",
        padding=True,
        truncation=True,
        max_length=max_length,
        add_special_tokens=False,
    ).to(device)


def score_texts(
    path: str,
    texts: Sequence[str],
    *,
    label: int = 0,
    max_length: int = 2048,
    batch_size: int = 16,
    device: str = "cpu",
    threads: int = 1,
) -> list[float]:
    """The classifier's logit ``label`` for each text, in padded batches of ``batch_size``."""
    import torch

    model, tokenizer = load_reward_model(path, device, threads)
    if not 0 <= label < model.config.num_labels:
        raise ValueError(f"label {label} out of range: the model has {model.config.num_labels} labels")
    scores: list[float] = []
    for start in range(0, len(texts), batch_size):
        batch = encode_texts(tokenizer, texts[start : start + batch_size], max_length, device)
        with torch.inference_mode():
            logits = model(**batch).logits
        scores.extend(logits[:, label].float().tolist())
    return scores


def _setup(params: dict[str, Any]) -> None:
    load_reward_model(params["path"], params.get("device", "cpu"), params.get("threads", 1))


def _check(params: dict[str, Any]) -> None:
    """A local path must be a model directory; anything else is left to be a hub id (rlvr.hub)."""
    raw = params["path"]
    path = Path(raw).expanduser()
    if path.exists() and not (path / "config.json").is_file():
        raise RlvrError(f"reward model directory {path} has no config.json")
    if not path.exists() and (raw.startswith((".", "/", "~")) or raw.count("/") > 1):
        raise RlvrError(f"reward model directory {path} does not exist")


@register_reward("reward_model", check=_check, setup=_setup)
def reward_model_reward(
    completion: str,
    example: Example,
    *,
    path: str,
    label: Annotated[int, Ge(0)] = 0,
    max_length: Annotated[int, Gt(0)] = 2048,
    device: str = "cpu",
    threads: Annotated[int, Ge(0)] = 1,
) -> float:
    """The reward model's score (logit ``label``) for the prompt followed by this completion."""
    _, tokenizer = load_reward_model(path, device, threads)
    text = render(tokenizer, example, completion)
    return score_texts(path, [text], label=label, max_length=max_length, device=device, threads=threads)[0]


@register_group_reward("reward_model_group", check=_check, setup=_setup)
def reward_model_group_reward(
    completions: list[str],
    example: Example,
    *,
    path: str,
    label: Annotated[int, Ge(0)] = 0,
    max_length: Annotated[int, Gt(0)] = 2048,
    batch_size: Annotated[int, Gt(0)] = 16,
    device: str = "cpu",
    threads: Annotated[int, Ge(0)] = 1,
) -> list[float]:
    """``reward_model`` for a whole group in batched forward passes."""
    _, tokenizer = load_reward_model(path, device, threads)
    texts = [render(tokenizer, example, c) for c in completions]
    return score_texts(
        path, texts, label=label, max_length=max_length, batch_size=batch_size, device=device, threads=threads
    )
