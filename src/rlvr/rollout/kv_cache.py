"""A KV cache layer that writes decode steps into preallocated buffers.

transformers' ``DynamicLayer`` appends each decoded token with ``torch.cat``, copying the whole
cache of every layer at every step; on CPU that was a third of decode time for SmolLM2-135M
(profiled: 1.5 s of 4.6 s for 2 prompts × 8 completions × 32 tokens). After the prefill, the HF engine
turns each layer into a :class:`PreallocatedLayer` with room for the new tokens, so a step writes
only its own keys and values.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer


class PreallocatedLayer(DynamicLayer):
    """``DynamicLayer`` whose ``keys``/``values`` are views into buffers with spare capacity."""

    def reserve(self, extra_tokens: int) -> None:
        batch, heads, length, dim = self.keys.shape
        self._key_buffer = self.keys.new_empty((batch, heads, length + extra_tokens, dim))
        self._value_buffer = self.values.new_empty(
            (batch, heads, length + extra_tokens, self.values.shape[-1])
        )
        self._key_buffer[:, :, :length] = self.keys
        self._value_buffer[:, :, :length] = self.values
        self._length = length
        self._expose()

    def _expose(self) -> None:
        self.keys = self._key_buffer[:, :, : self._length]
        self.values = self._value_buffer[:, :, : self._length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        end = self._length + key_states.shape[-2]
        if end > self._key_buffer.shape[2]:  # out of room: fall back to growing (never in the engine)
            self._key_buffer = torch.cat([self._key_buffer[:, :, : self._length], key_states], dim=2)
            self._value_buffer = torch.cat([self._value_buffer[:, :, : self._length], value_states], dim=2)
        else:
            self._key_buffer[:, :, self._length : end] = key_states
            self._value_buffer[:, :, self._length : end] = value_states
        self._length = end
        self._expose()
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._key_buffer = self._key_buffer[indices]
        self._value_buffer = self._value_buffer[indices]
        self._expose()


def reserve_decode_room(cache: DynamicCache, extra_tokens: int) -> DynamicCache:
    """Give every full-attention layer of ``cache`` room for ``extra_tokens`` more positions, in place.

    Layers of other kinds (sliding window, linear attention) are left as they are.
    """
    for layer in cache.layers:
        if type(layer) is DynamicLayer and layer.is_initialized:
            layer.__class__ = PreallocatedLayer
            layer.reserve(extra_tokens)
    return cache
