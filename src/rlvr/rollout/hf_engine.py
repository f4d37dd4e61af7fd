"""A rollout engine on plain PyTorch + transformers that runs on any device, CPU included.

Each unique prompt is encoded once: the prompts are prefilled together (left-padded), then the KV
cache is repeated ``n`` times for the group. Finished sequences are dropped from the batch as soon
as they emit a stop token, so decoding cost follows the live sequences, not the longest one.
On CPU in fp32, small long generations multiply through MKL-packed weights: Llama models through
a fused decode step (``rlvr.models.fused_decode``), other models through packed ``nn.Linear``
copies (``rlvr.models.packed``).
"""

from __future__ import annotations

import threading
from contextlib import nullcontext

import torch
from transformers import DynamicCache

from rlvr.models.fused_decode import FusedLlamaDecoder, fused_decode_pays, fused_decode_supported
from rlvr.models.packed import packed_decode_available, packed_linears, packing_pays
from rlvr.models.prefix import MIN_SHARED_PREFIX, common_prefix_length, takes_holes
from rlvr.rollout.base import Completion, SamplingParams
from rlvr.rollout.kv_cache import KVState, extract_state, padded_cache, reserve_decode_room
from rlvr.rollout.sampling import sample_next, token_self_certainty
from rlvr.vision.positions import text_positions, uses_mrope, vision_positions
from rlvr.vision.prompt import check_images_reach, copy_prompt, image_token_id, vision_kwargs, vision_of


class HFEngine:
    """Generation with a ``transformers`` causal LM shared with the trainer (no weight copy)."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        stop_token_ids: list[int] | None = None,
        max_batch_sequences: int = 64,
        seed: int = 0,
        packed_weights: str = "auto",
        *,
        fuse_layers: bool = True,
        share_prefix: bool = True,
    ) -> None:
        """``fuse_layers=False`` keeps Llama models on the per-``nn.Linear`` packed path too (for
        benchmarks and tests that compare the two). ``share_prefix`` runs a prefix common to the
        prompts of a call once (:mod:`rlvr.models.prefix`)."""
        self.model = model
        self.tokenizer = tokenizer
        self.stop_token_ids = sorted(set(stop_token_ids or _default_stop_ids(model, tokenizer)))
        self.max_batch_sequences = max_batch_sequences
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.stop_token_ids[0]
        self.device = next(model.parameters()).device
        self.generator = torch.Generator(device="cpu").manual_seed(seed)
        if packed_weights not in ("auto", "on", "off"):
            raise ValueError(f"packed_weights must be 'auto', 'on' or 'off', not {packed_weights!r}")
        self.packed_weights = packed_weights
        self.fuse_layers = fuse_layers
        self.share_prefix = share_prefix
        self.policy_version = 0  # set by the weight sync; trajectories carry it
        # An owner that changes the model's weights only through itself (rlvr serve's sampler) names
        # them here; the packed decoder built for a batch size is then reused until the name changes
        # (packing the weights costs ~1 s a call for SmolLM2-135M). None: built per call.
        self.weights_key: object | None = None
        self._decoders: dict[tuple[object, int], FusedLlamaDecoder] = {}
        # held while generating: a weight sync into this engine's own copy waits for it (pause/resume)
        self.lock = threading.RLock()
        self._image_token = image_token_id(model)  # a VLM's image placeholder; None: text-only
        self._mrope = uses_mrope(model)

    def sync_weights(self, model: torch.nn.Module) -> None:
        self.model = model  # same process, same tensors: nothing to copy

    def _stop_string_rows(
        self, alive: list[int], tokens: list[list[int]], stop_strings: tuple[str, ...], done: torch.Tensor
    ) -> list[int]:
        """Batch rows whose newest token completes one of ``stop_strings`` (rows already done by EOS
        excluded). Only the tail is decoded; a string seen in the tail ends the sequence at once, so it
        cannot have completed at an earlier token."""
        tail = _tail_tokens(stop_strings)
        hit = []
        for row, seq in enumerate(alive):
            if done[row]:
                continue
            text = self.tokenizer.decode(tokens[seq][-tail:], skip_special_tokens=False)
            if any(s in text for s in stop_strings):
                hit.append(row)
        return hit

    def decode_path(self, rows: int, params: SamplingParams) -> str:
        """How a call decoding ``rows`` sequences at once runs its decode steps: ``"fused"`` (the
        fused, packed Llama step), ``"packed"`` (transformers' forward through packed ``nn.Linear``
        copies) or ``"plain"``. Packing needs CPU fp32 with MKL (the fused step also bf16 with oneDNN
        on a CPU with native bf16); "on" packs whenever it can, "auto" where it was measured to pay
        (``fused_decode_pays``, ``packing_pays``)."""
        if self.packed_weights == "off":
            return "plain"
        tokens, on = params.max_new_tokens, self.packed_weights == "on"
        if self.fuse_layers and fused_decode_supported(self.model):
            dtype = next(self.model.parameters()).dtype
            return "fused" if on or fused_decode_pays(rows, tokens, dtype) else "plain"
        if not packed_decode_available(self.model):
            return "plain"
        return "packed" if on or packing_pays(rows, tokens) else "plain"

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        with self.lock:
            return self._generate(prompts, params)[0]

    def generate_with_states(
        self, prompts: list[list[int]], params: SamplingParams, states: list[KVState | None] | None = None
    ) -> tuple[list[list[Completion]], list[list[KVState]]]:
        """:meth:`generate`, continuing each prompt from its cached ``states`` entry (the cache of
        its first ``state.length`` ids: only the ids after them are prefilled), and returning every
        completion's own cache (its prompt and its tokens but the last, which was never fed).

        A state computed under another ``policy_version`` (a weight sync came between two turns) is
        ignored and its prompt prefilled whole: old keys and values under new weights would be what
        neither policy computes. The check runs under the lock that weight syncs take."""
        with self.lock:
            if states is not None:
                states = [s if s is not None and s.version == self.policy_version else None for s in states]
            return self._generate(prompts, params, states, keep_states=True)

    def _generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        states: list[KVState | None] | None = None,
        keep_states: bool = False,
    ) -> tuple[list[list[Completion]], list[list[KVState]]]:
        per_chunk = max(1, self.max_batch_sequences // params.n)
        groups: list[list[Completion]] = []
        kept: list[list[KVState]] = []
        was_training = self.model.training
        self.model.eval()
        try:
            rows = min(len(prompts), per_chunk) * params.n
            path = self.decode_path(rows, params)
            # built from the weights as they are now, per call: its copies are stale after an update
            decoder = self._decoder(rows) if path == "fused" else None
            with packed_linears(self.model) if path == "packed" else nullcontext():
                for start in range(0, len(prompts), per_chunk):
                    chunk = prompts[start : start + per_chunk]
                    chunk_states = states[start : start + per_chunk] if states is not None else None
                    out, out_states = self._generate_chunk(
                        chunk, start, params, decoder, chunk_states, keep_states
                    )
                    groups.extend(out)
                    kept.extend(out_states)
        finally:
            self.model.train(was_training)
        return groups, kept

    def _decoder(self, rows: int) -> FusedLlamaDecoder:
        if self.weights_key is None:
            return FusedLlamaDecoder(self.model, rows_hint=rows)
        key = (self.weights_key, rows)
        if key not in self._decoders:
            self._decoders = {k: d for k, d in self._decoders.items() if k[0] == self.weights_key}
            self._decoders[key] = FusedLlamaDecoder(self.model, rows_hint=rows)
        return self._decoders[key]

    @torch.inference_mode()
    def _generate_chunk(
        self,
        prompts: list[list[int]],
        offset: int,
        params: SamplingParams,
        decoder: FusedLlamaDecoder | None = None,
        states: list[KVState | None] | None = None,
        keep_states: bool = False,
    ) -> tuple[list[list[Completion]], list[list[KVState]]]:
        n, device = params.n, self.device
        # a lazy prompt's pixel tensors, made once for this call (its completions share them)
        prompts = [copy_prompt(p) if vision_of(p) is not None else p for p in prompts]
        if states is not None:
            states = [_usable_state(p, s, self._image_token, self._mrope) for p, s in zip(prompts, states)]
        if states is None or all(s is None for s in states):
            prefix = self._shared_prefix_state(prompts)
            if prefix is not None:  # every prompt continues from the prefix they share
                states = [prefix] * len(prompts)
        # a prompt's images go with its prefill: rows continued from a cache hold theirs in it already
        fresh = [p if states is None or states[row] is None else None for row, p in enumerate(prompts)]
        vision = vision_kwargs(fresh, device)
        if states is not None and any(s is not None for s in states):
            input_ids, mask, positions, cache = self._continuation_inputs(prompts, states)
        else:
            width = max(len(p) for p in prompts)
            input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(prompts), width), dtype=torch.long)
            for row, ids in enumerate(prompts):
                input_ids[row, width - len(ids) :] = torch.tensor(ids)
                mask[row, width - len(ids) :] = 1
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            cache = DynamicCache()
        input_ids, mask, positions = input_ids.to(device), mask.to(device), positions.to(device)
        check_images_reach(self.model, input_ids, vision, "the rollout's prefill")
        positions = vision_positions(self.model, input_ids, mask, positions, vision)

        out = self.model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
            **vision,
        )
        logits = out.logits[:, -1].repeat_interleave(n, dim=0)
        cache = out.past_key_values
        if n > 1:
            cache.batch_repeat_interleave(n)
        reserve_decode_room(cache, params.max_new_tokens)
        mask = mask.repeat_interleave(n, dim=0)
        next_pos = text_positions(positions)[:, -1].repeat_interleave(n, dim=0) + 1

        total = len(prompts) * n
        captured: dict[int, KVState] = {}  # sequence -> its cache, taken as it leaves the batch
        tokens: list[list[int]] = [[] for _ in range(total)]
        logps: list[list[float]] = [[] for _ in range(total)]
        certainty: list[list[float]] | None = [[] for _ in range(total)] if params.self_certainty else None
        # IFG: which sequences are still in their intent, and each token's temperature
        intent = (
            _Intent(params, total) if params.intent_temperature is not None and not params.greedy else None
        )
        finish = ["length"] * total
        alive = torch.arange(total)  # which sequences the batch rows currently are
        stop_ids = torch.tensor(self.stop_token_ids, device=device)

        for step in range(params.max_new_tokens):
            row_temperature = intent.row_temperatures(alive) if intent is not None else None
            generator = self.generator if device.type == "cpu" else None
            token, logp = sample_next(logits, params, generator, row_temperature)
            token_list, logp_list = token.tolist(), logp.tolist()
            for row, seq in enumerate(alive.tolist()):
                tokens[seq].append(token_list[row])
                logps[seq].append(logp_list[row])
            if intent is not None:
                intent.advance(alive.tolist(), tokens, self.tokenizer)
            if certainty is not None:
                for seq, value in zip(alive.tolist(), token_self_certainty(logits).tolist()):
                    certainty[seq].append(value)
            done = (
                torch.isin(token, stop_ids)
                if not params.ignore_eos
                else torch.zeros_like(token, dtype=torch.bool)
            )
            for row in done.nonzero().flatten().tolist():
                finish[alive[row]] = "stop"
            if params.stop_strings:
                hit = self._stop_string_rows(alive.tolist(), tokens, params.stop_strings, done)
                for row in hit:
                    finish[alive[row]] = "stop_string"
                    done[row] = True
            if step == params.max_new_tokens - 1:
                break
            if done.any():
                if keep_states:
                    for row in done.nonzero().flatten().tolist():
                        captured[int(alive[row])] = extract_state(cache, mask, row, self.policy_version)
                keep = (~done).nonzero().flatten()
                if keep.numel() == 0:
                    break
                cache.batch_select_indices(keep)
                alive, token, mask, next_pos = alive[keep.cpu()], token[keep], mask[keep], next_pos[keep]
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
            if decoder is not None:
                logits = decoder.step(token, next_pos, cache, mask)
            else:
                out = self.model(
                    input_ids=token[:, None],
                    attention_mask=mask,
                    position_ids=next_pos[:, None],
                    past_key_values=cache,
                    use_cache=True,
                )
                logits, cache = out.logits[:, -1], out.past_key_values
            next_pos = next_pos + 1

        if keep_states:
            for row, seq in enumerate(alive.tolist()):
                if seq not in captured:
                    captured[seq] = extract_state(cache, mask, row, self.policy_version)

        groups = []
        for p, prompt in enumerate(prompts):
            group = []
            for seq in range(p * n, (p + 1) * n):
                ids = tokens[seq]
                text_ids = ids[:-1] if finish[seq] == "stop" else ids
                group.append(
                    Completion(
                        prompt_index=offset + p,
                        prompt_ids=copy_prompt(prompt),
                        token_ids=ids,
                        logprobs=logps[seq],
                        finish_reason=finish[seq],
                        text=self.tokenizer.decode(text_ids, skip_special_tokens=True),
                        self_certainty=certainty[seq] if certainty is not None else None,
                        temperatures=intent.temperatures[seq] if intent is not None else None,
                    )
                )
            groups.append(group)
        if not keep_states:
            return groups, []
        return groups, [[captured[seq] for seq in range(p * n, (p + 1) * n)] for p in range(len(prompts))]

    def _shared_prefix_state(self, prompts: list[list[int]]) -> KVState | None:
        """The cache of the tokens all ``prompts`` start with (at least ``MIN_SHARED_PREFIX``, and
        each prompt keeps one token after them), from one row; None when there is no such prefix,
        the prompts have images, or the model's attention or positions do not allow continuing."""
        if not self.share_prefix or len(prompts) < 2 or self._mrope or not takes_holes(self.model):
            return None
        if any(vision_of(p) is not None for p in prompts):
            return None
        shared = min(common_prefix_length(prompts), min(len(p) for p in prompts) - 1)
        if shared < MIN_SHARED_PREFIX:
            return None
        out = self.model(
            input_ids=torch.tensor([prompts[0][:shared]], device=self.device),
            position_ids=torch.arange(shared, device=self.device)[None],
            past_key_values=DynamicCache(),
            use_cache=True,
            logits_to_keep=1,
        )
        mask = torch.ones((1, shared), dtype=torch.long, device=self.device)
        return extract_state(out.past_key_values, mask, 0, self.policy_version)

    def _continuation_inputs(
        self, prompts: list[list[int]], states: list[KVState | None]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, DynamicCache]:
        """Inputs that prefill only what each prompt gained after its cached state. Row ``r`` is laid
        out as ``[padding][its cache][padding][its new ids]``: the mask hides both paddings and the
        positions count real tokens, so each row computes what a prefill of its whole ids would."""
        cached = [s.length if s is not None else 0 for s in states]
        new = [ids[c:] for ids, c in zip(prompts, cached)]
        if any(not ids for ids in new):
            raise ValueError("a continued prompt must extend its cached state by at least one token")
        past, width = max(cached), max(len(ids) for ids in new)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), past + width), dtype=torch.long)
        positions = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, (ids, c) in enumerate(zip(new, cached)):
            input_ids[row, width - len(ids) :] = torch.tensor(ids)
            mask[row, past - c : past] = 1
            mask[row, past + width - len(ids) :] = 1
            positions[row, width - len(ids) :] = torch.arange(c, c + len(ids))
        cache = padded_cache([s.to(self.device) if s is not None else None for s in states], past)
        return input_ids, mask, positions, cache


class _Intent:
    """Per-sequence state of intent-factored generation (IFG, seeds 002:19) within one decode.

    A sequence starts in its intent, sampled at ``params.intent_temperature``; the token that
    completes ``params.intent_end`` (found in the decoded tail, as stop strings are) is still the
    intent's, and every token after it is sampled at ``params.temperature``. ``intent_max_tokens``
    ends an intent that never says ``intent_end``. The switch is per sequence, one batch row each."""

    def __init__(self, params: SamplingParams, total: int) -> None:
        self.params = params
        self.open = [True] * total  # still in the intent
        self.temperatures: list[list[float]] = [[] for _ in range(total)]
        self.tail = _tail_tokens((params.intent_end,))

    def row_temperatures(self, alive: torch.Tensor) -> torch.Tensor:
        """The temperature of each batch row's next token [B]."""
        hot, cold = self.params.intent_temperature, self.params.temperature
        return torch.tensor([hot if self.open[seq] else cold for seq in alive.tolist()], dtype=torch.float32)

    def advance(self, alive: list[int], tokens: list[list[int]], tokenizer) -> None:
        """Record the temperature each row's new token was sampled at; close the intents it ended."""
        hot, cold = self.params.intent_temperature, self.params.temperature
        limit, end = self.params.intent_max_tokens, self.params.intent_end
        for seq in alive:
            self.temperatures[seq].append(hot if self.open[seq] else cold)
            if not self.open[seq]:
                continue
            if limit is not None and len(tokens[seq]) >= limit:
                self.open[seq] = False
            elif end in tokenizer.decode(tokens[seq][-self.tail :], skip_special_tokens=False):
                self.open[seq] = False


def _usable_state(
    prompt: list[int], state: KVState | None, image_token: int | None, mrope: bool = False
) -> KVState | None:
    """``state``, unless the ids it leaves to prefill hold image tokens (their pixels are not in the
    continued prefill's inputs), or the model's positions are multimodal (M-RoPE) and the prompt has
    images (a continuation counts positions in tokens, which images are not): the prompt is then
    prefilled whole, with its images."""
    if state is None or image_token is None:
        return state
    if mrope and vision_of(prompt) is not None:
        return None
    return None if image_token in prompt[state.length :] else state


def _tail_tokens(stop_strings: tuple[str, ...]) -> int:
    """Tokens to decode to see any of ``stop_strings`` complete (a token is at least one character)."""
    return max(len(s) for s in stop_strings) + 1


def _default_stop_ids(model: torch.nn.Module, tokenizer) -> list[int]:
    ids = set()
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif isinstance(eos, list):
        ids.update(eos)
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return sorted(ids)
