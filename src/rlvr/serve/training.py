"""One training client's model on the server: forward/backward with Tinker's losses, AdamW steps.

Tinker's losses are sums over a datum's tokens, position ``i`` of ``model_input`` predicting
``target_tokens[i]``; the masking is in the inputs (zero ``weights`` or ``advantages`` on the
prompt). They map onto rlvr's registered policy losses with the *sampler's* logprobs as the old
policy (docs/interop.md): ``importance_sampling`` → ``importance_sampling``, ``ppo`` → ``ppo_clip``,
``cispo`` → ``cispo``, aggregated with ``token-sum``; ``cross_entropy`` is the weighted negative
log-likelihood of SFT. Gradients accumulate over ``forward_backward`` calls until ``optim_step``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rlvr.algo import POLICY_LOSSES, token_weights
from rlvr.config.schema import OptimConfig
from rlvr.serve.forward import datum_logprobs
from rlvr.serve.replicas import gather, shard, sum_gradients
from rlvr.serve.wire import Datum, ForwardBackward, WireError
from rlvr.train.learn.optim import build_optimizer

# Tinker loss name → (rlvr policy loss, the loss_fn_inputs it needs)
RL_LOSSES = {
    "importance_sampling": "importance_sampling",
    "ppo": "ppo_clip",
    "cispo": "cispo",
}
NEEDS = {
    "cross_entropy": ("target_tokens", "weights"),
    **{n: ("target_tokens", "logprobs", "advantages") for n in RL_LOSSES},
}
SUPPORTED_LOSSES = tuple(NEEDS)
CLIP_DEFAULTS = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}  # Tinker's ratio bounds (ε = 0.2)


@dataclass
class AdamParams:
    learning_rate: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-12
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0

    @classmethod
    def from_json(cls, raw: Any) -> AdamParams:
        if not isinstance(raw, dict):
            raise WireError("optim_step: adam_params must be an object")
        known = {k: raw[k] for k in cls.__dataclass_fields__ if k in raw}
        for key, value in known.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise WireError(f"optim_step: adam_params.{key} must be a finite number, got {value!r}")
        params = cls(**{k: float(v) for k, v in known.items()})
        if (
            params.learning_rate < 0
            or not 0 <= params.beta1 < 1
            or not 0 <= params.beta2 < 1
            or params.eps <= 0
        ):
            raise WireError(f"optim_step: adam_params out of range: {params}")
        return params


def _loss_settings(fb: ForwardBackward) -> dict[str, float]:
    """The clip settings of ``ppo``/``cispo`` from ``loss_fn_config`` (anything else there is refused)."""
    config = dict(fb.loss_fn_config)
    unknown = sorted(set(config) - set(CLIP_DEFAULTS))
    if unknown or (config and fb.loss_fn not in ("ppo", "cispo")):
        raise WireError(
            f"loss_fn_config keys {sorted(config)} are not supported for loss_fn {fb.loss_fn!r} "
            f"(ppo and cispo take {', '.join(CLIP_DEFAULTS)})"
        )
    if fb.loss_fn not in ("ppo", "cispo"):
        return {}
    low = float(config.get("clip_low_threshold", CLIP_DEFAULTS["clip_low_threshold"]))
    high = float(config.get("clip_high_threshold", CLIP_DEFAULTS["clip_high_threshold"]))
    if not 0 <= low <= 1 <= high:
        raise WireError(
            f"loss_fn_config: need 0 <= clip_low_threshold <= 1 <= clip_high_threshold, got {low}, {high}"
        )
    return {"clip_low": 1.0 - low, "clip_high": high - 1.0}


def check_datums(fb: ForwardBackward, vocab_size: int, max_length: int) -> None:
    """Refuse what the losses cannot take, naming the datum and the key."""
    if fb.loss_fn not in NEEDS:
        raise WireError(
            f"loss_fn {fb.loss_fn!r} is not supported by rlvr serve "
            f"(supported: {', '.join(SUPPORTED_LOSSES)})"
        )
    if not fb.data:
        raise WireError("forward_backward: no datums")
    needs = NEEDS[fb.loss_fn]
    for i, datum in enumerate(fb.data):
        n = datum.tokens.size
        if n == 0 or n > max_length:
            raise WireError(f"datum {i}: model_input has {n} tokens (1 to {max_length} allowed)")
        if datum.tokens.min() < 0 or datum.tokens.max() >= vocab_size:
            raise WireError(f"datum {i}: a model_input token id is outside the vocabulary [0, {vocab_size})")
        extra = sorted(set(datum.inputs) - set(needs))
        missing = [k for k in needs if k not in datum.inputs]
        if missing or extra:
            raise WireError(
                f"datum {i}: loss_fn {fb.loss_fn!r} takes loss_fn_inputs {list(needs)}; "
                + (f"missing {missing}" if missing else f"not supported: {extra}")
            )
        for key in needs:
            value = datum.inputs[key]
            if value.shape != (n,):
                raise WireError(
                    f"datum {i}: loss_fn_inputs[{key!r}] has shape {list(value.shape)}, expected [{n}]"
                )
            if key != "target_tokens" and not np.isfinite(value).all():
                raise WireError(f"datum {i}: loss_fn_inputs[{key!r}] holds a non-finite value")
        targets = datum.inputs["target_tokens"]
        if not np.issubdtype(targets.dtype, np.integer):
            raise WireError(
                f"datum {i}: loss_fn_inputs['target_tokens'] must be integers, got {targets.dtype}"
            )
        if targets.min() < 0 or targets.max() >= vocab_size:
            raise WireError(f"datum {i}: a target token id is outside the vocabulary [0, {vocab_size})")


def _padded(data: list[Datum], key: str) -> torch.Tensor:
    """The datums' ``key`` input as float32 [B, N], zero-padded on the right."""
    out = torch.zeros((len(data), max(d.tokens.size for d in data)))
    for row, datum in enumerate(data):
        values = datum.inputs[key]
        out[row, : values.size] = torch.tensor(values, dtype=torch.float32)
    return out


class TrainedModel:
    """A policy being trained by one client: its weights, optimizer and accumulated gradients."""

    def __init__(self, model_id: str, policy: torch.nn.Module, lora_rank: int, micro_batch: int = 8) -> None:
        self.model_id = model_id
        self.policy = policy
        self.lora_rank = lora_rank  # 0: every weight is trained
        self.lora_config: dict[str, Any] = {}  # what the client asked for (rank, seed, train_*)
        self.session_id = ""  # the client session it belongs to (its end frees the model)
        self.micro_batch = micro_batch
        self.optimizer: torch.optim.Optimizer | None = None
        self.steps = 0
        config = getattr(policy, "config", None)
        self.vocab_size = int(policy.get_output_embeddings().weight.shape[0])
        self.max_length = int(getattr(config, "max_position_embeddings", 8192) or 8192)

    def trainable(self) -> list[torch.nn.Parameter]:
        return [p for p in self.policy.parameters() if p.requires_grad]

    def forward_backward(self, fb: ForwardBackward) -> tuple[dict[str, list[np.ndarray]], dict[str, float]]:
        """Per-datum ``logprobs`` of the targets and the summed loss; with ``fb.forward_only`` no
        gradient is kept."""
        check_datums(fb, self.vocab_size, self.max_length)
        settings = _loss_settings(fb) if fb.loss_fn in RL_LOSSES else {}
        outputs: list[np.ndarray] = []
        total = 0.0
        self.policy.train()
        lo, hi = shard(len(fb.data))  # under torchrun, this rank's datums (replicas.py); else all
        data = fb.data[lo:hi]
        for start in range(0, len(data), self.micro_batch):
            part = data[start : start + self.micro_batch]
            with torch.set_grad_enabled(not fb.forward_only):
                logprobs, mask = self._logprobs(part, fb.loss_fn)
                loss = self._loss(fb.loss_fn, part, logprobs, mask, settings)
            if not fb.forward_only and loss.requires_grad:  # (datums of zero weight have no graph)
                loss.backward()
            total += float(loss.detach())
            for row, datum in enumerate(part):
                outputs.append(logprobs[row, : datum.tokens.size].detach().numpy().astype(np.float32))
        shards = gather((outputs, total))
        return {"logprobs": [o for part, _ in shards for o in part]}, {"loss:sum": sum(t for _, t in shards)}

    def _logprobs(self, data: list[Datum], loss_fn: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Logprobs [B, N] (right-padded) and the mask of real positions."""
        per_datum = datum_logprobs(
            self.policy, data, "weights" if loss_fn == "cross_entropy" else "advantages"
        )
        logprobs = torch.nn.utils.rnn.pad_sequence(per_datum, batch_first=True)
        mask = torch.zeros(logprobs.shape)
        for row, datum in enumerate(data):
            mask[row, : datum.tokens.size] = 1
        return logprobs, mask

    @staticmethod
    def _loss(
        name: str, data: list[Datum], logprobs: torch.Tensor, mask: torch.Tensor, settings: dict[str, float]
    ) -> torch.Tensor:
        if name == "cross_entropy":
            weights = _padded(data, "weights")
            return -(weights * logprobs * mask).sum()
        sampler = _padded(data, "logprobs")
        advantages = _padded(data, "advantages")
        per_token, _ = POLICY_LOSSES.get(RL_LOSSES[name])(logprobs, sampler, advantages, mask, **settings)
        return (per_token * token_weights(mask, "token-sum")).sum()

    def ensure_optimizer(self, adam: AdamParams | None = None) -> torch.optim.Optimizer:
        """The AdamW optimizer over the trainable parameters, built on first use as rlvr's learner
        builds it (:func:`rlvr.train.learn.optim.build_optimizer`)."""
        if self.optimizer is None:
            adam = adam or AdamParams()
            cfg = OptimConfig(
                lr=max(adam.learning_rate, 1e-30),
                betas=(adam.beta1, adam.beta2),
                eps=adam.eps,
                weight_decay=adam.weight_decay,
            )
            self.optimizer = build_optimizer(self.policy, cfg)
        return self.optimizer

    def optim_step(self, adam: AdamParams) -> dict[str, float]:
        """One AdamW step on the accumulated gradients (built as rlvr's learner builds it), then
        the gradients are cleared."""
        params = self.trainable()
        optimizer = self.ensure_optimizer(adam)
        for group in optimizer.param_groups:
            group.update(
                lr=adam.learning_rate,
                betas=(adam.beta1, adam.beta2),
                eps=adam.eps,
                weight_decay=adam.weight_decay,
            )
        sum_gradients(params)  # under torchrun: the whole request's gradient on every rank
        grads = [p.grad for p in params if p.grad is not None]
        norm = 0.0
        if grads and adam.grad_clip_norm > 0:  # clipping computes the norm it reports
            norm = float(torch.nn.utils.clip_grad_norm_(params, adam.grad_clip_norm))
        elif grads:
            norm = float(torch.nn.utils.get_total_norm(grads))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        self.steps += 1
        return {"grad_norm": norm, "learning_rate": adam.learning_rate}
