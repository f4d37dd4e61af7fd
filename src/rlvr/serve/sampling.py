"""Sampling for Tinker clients: weight snapshots and rlvr's HF engine on a copy of the model.

A sampling client samples from a *snapshot*: the base weights, the weights a training client had
when it saved them for sampling (kept in memory, the newest ``max_snapshots``), or sampler weights
saved on disk. One plain copy of the model samples for every snapshot; switching snapshots copies
their weights into it (LoRA adapters merged, so the engine's fused decode path applies).
Requests with the same snapshot and sampling parameters that wait together run as one batch.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from rlvr.rollout.base import SamplingParams
from rlvr.rollout.hf_engine import HFEngine
from rlvr.serve.wire import Sequence, WireError

BASE = "base"  # the snapshot id of the base weights


@dataclass(frozen=True)
class SampleSpec:
    """A sample request's settings; requests with equal specs (and no seed) are batched."""

    num_samples: int
    max_tokens: int
    temperature: float
    top_p: float
    stop_ids: tuple[int, ...] | None  # None: the model's EOS tokens
    stop_strings: tuple[str, ...]
    no_stop: bool
    seed: int | None

    @classmethod
    def from_request(cls, request: dict[str, Any], max_new_tokens: int, max_samples: int) -> SampleSpec:
        params = request.get("sampling_params") or {}
        if not isinstance(params, dict):
            raise WireError("sample: sampling_params must be an object")
        n = request.get("num_samples", 1)
        if not isinstance(n, int) or not 1 <= n <= max_samples:
            raise WireError(f"sample: num_samples must be an integer from 1 to {max_samples}, got {n!r}")
        max_tokens = params.get("max_tokens")
        max_tokens = max_new_tokens if max_tokens is None else max_tokens
        if not isinstance(max_tokens, int) or not 1 <= max_tokens <= max_new_tokens:
            raise WireError(
                f"sample: max_tokens must be an integer from 1 to {max_new_tokens}, got {max_tokens!r}"
            )
        temperature, top_p = params.get("temperature", 1.0), params.get("top_p", 1.0)
        for key, value in (("temperature", temperature), ("top_p", top_p)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise WireError(f"sample: sampling_params.{key} must be a finite number, got {value!r}")
        if temperature < 0 or not 0 < top_p <= 1:
            raise WireError(f"sample: need temperature >= 0 and 0 < top_p <= 1, got {temperature}, {top_p}")
        top_k = params.get("top_k", -1)
        if top_k not in (-1, 0, None):
            raise WireError(f"sample: top_k={top_k!r} is not supported by rlvr serve (only -1: no top-k)")
        for key in ("prompt_logprobs_last_n", "target_prompt_logprobs"):
            if request.get(key) is not None:
                raise WireError(f"sample: {key} is not supported by rlvr serve")
        for key in ("topk_prompt_logprobs", "topk_sample_logprobs", "prompt_alt_tokens_k"):
            if request.get(key, 0):
                raise WireError(f"sample: {key} > 0 is not supported by rlvr serve")
        stop = params.get("stop")
        stop_ids, stop_strings, no_stop = None, (), False
        if isinstance(stop, str):
            stop = [stop]
        if isinstance(stop, list):
            if not stop:
                no_stop = True
            elif all(isinstance(s, int) and not isinstance(s, bool) for s in stop):
                stop_ids = tuple(stop)
            elif all(isinstance(s, str) and s for s in stop):
                stop_strings = tuple(stop)
            else:
                raise WireError("sample: stop must be a string, a list of strings or a list of token ids")
        elif stop is not None:
            raise WireError("sample: stop must be a string, a list of strings or a list of token ids")
        seed = params.get("seed", request.get("seed"))
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise WireError(f"sample: seed must be an integer, got {seed!r}")
        return cls(n, max_tokens, float(temperature), float(top_p), stop_ids, stop_strings, no_stop, seed)

    def params(self) -> SamplingParams:
        return SamplingParams(
            n=self.num_samples,
            temperature=self.temperature,
            top_p=self.top_p,
            max_new_tokens=self.max_tokens,
            ignore_eos=self.no_stop,
            stop_strings=self.stop_strings,
        )


class Sampler:
    """The sampling copy of the model, its engine, and the snapshots it can load."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        max_snapshots: int = 3,
        seed: int = 0,
        engine: Callable[[torch.nn.Module, Any, int], Any] | None = None,
    ) -> None:
        self.model = model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        # rlvr's HF engine on this copy of the model, or another engine (vLLM) built on it, which
        # is sent the copy's weights whenever a snapshot is loaded
        build = engine or (lambda m, t, s: HFEngine(m, t, seed=s))
        self.engine = build(model, tokenizer, seed)
        self.remote = not isinstance(self.engine, HFEngine)
        self.default_stop = list(self.engine.stop_token_ids)
        self.base = {name: p.detach().clone() for name, p in model.named_parameters()}
        self.snapshots: OrderedDict[str, dict[str, torch.Tensor]] = OrderedDict()
        self.max_snapshots = max_snapshots
        self.loaded = BASE
        self.loads = 0  # each load names the engine's weights anew (a name can be saved twice)
        self.engine.weights_key = (BASE, self.loads)

    def add(self, snapshot_id: str, weights: dict[str, torch.Tensor]) -> None:
        """Keep ``weights`` (parameter name → tensor, every parameter of the model) as a snapshot;
        the oldest beyond ``max_snapshots`` are dropped."""
        missing = sorted(set(self.base) - set(weights))
        if missing:
            raise WireError(f"snapshot {snapshot_id}: weights missing for {missing[:3]}")
        self.snapshots[snapshot_id] = {name: weights[name].detach().clone() for name in self.base}
        self.snapshots.move_to_end(snapshot_id)
        if self.loaded == snapshot_id:  # a name saved again: its new weights are not loaded yet
            self.loaded = ""
        while len(self.snapshots) > self.max_snapshots:
            dropped, _ = self.snapshots.popitem(last=False)
            if self.loaded == dropped:
                self.loaded = ""

    def weights(self, snapshot_id: str) -> dict[str, torch.Tensor]:
        if snapshot_id == BASE:
            return self.base
        if snapshot_id not in self.snapshots:
            raise WireError(
                f"sampling weights {snapshot_id!r} are no longer held (rlvr serve keeps the newest "
                f"{self.max_snapshots} in memory; save_weights_for_sampler with a name keeps them on disk)"
            )
        return self.snapshots[snapshot_id]

    @torch.no_grad()
    def load(self, snapshot_id: str) -> None:
        if self.loaded == snapshot_id:
            return
        weights = self.weights(snapshot_id)
        self.loaded = ""
        for name, p in self.model.named_parameters():
            p.copy_(weights[name])
        if self.remote:
            self.engine.sync_weights(self.model)
        self.loaded = snapshot_id
        self.loads += 1
        self.engine.weights_key = (snapshot_id, self.loads)  # its packed decoders are rebuilt

    def sample(self, snapshot_id: str, prompts: list[list[int]], spec: SampleSpec) -> list[list[Sequence]]:
        """``spec.num_samples`` sequences for each prompt, from the snapshot's weights. Requests for
        the same prompt (a group's episodes, sent one by one) are prefilled once: when every distinct
        prompt came ``k`` times, each is sampled ``k × num_samples`` times and shared out."""
        self.load(snapshot_id)
        where: dict[tuple[int, ...], list[int]] = {}
        for i, prompt in enumerate(prompts):
            where.setdefault(tuple(prompt), []).append(i)
        counts = {len(rows) for rows in where.values()}
        if len(where) == len(prompts) or len(counts) != 1:
            return self._generate(prompts, spec)
        k, n = counts.pop(), spec.num_samples
        merged = self._generate([list(p) for p in where], replace(spec, num_samples=k * n))
        out: list[list[Sequence]] = [[] for _ in prompts]
        for rows, group in zip(where.values(), merged):
            for j, row in enumerate(rows):
                out[row] = group[j * n : (j + 1) * n]
        return out

    def _generate(self, prompts: list[list[int]], spec: SampleSpec) -> list[list[Sequence]]:
        engine = self.engine
        engine.stop_token_ids = sorted(set(spec.stop_ids)) if spec.stop_ids is not None else self.default_stop
        saved = engine.generator
        if spec.seed is not None:
            engine.generator = torch.Generator(device="cpu").manual_seed(spec.seed)
        try:
            groups = engine.generate(prompts, spec.params())
        finally:
            engine.generator, engine.stop_token_ids = saved, self.default_stop
        return [
            [Sequence(c.token_ids, c.logprobs, c.finish_reason != "length") for c in group]
            for group in groups
        ]

    def close(self) -> None:
        """Stop the engine's server, if it has one."""
        if self.remote:
            self.engine.close()

    @torch.no_grad()
    def prompt_logprobs(self, snapshot_id: str, prompt: list[int]) -> list[float]:
        """The logprob of every prompt token given the ones before it (NaN for the first)."""
        self.load(snapshot_id)
        ids = torch.tensor([prompt])
        logits = self.model(input_ids=ids, use_cache=False).logits[0, :-1].float()
        chosen = logits.log_softmax(-1).gather(-1, ids[0, 1:, None]).squeeze(-1)
        return [float("nan"), *chosen.tolist()]
