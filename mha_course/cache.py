"""The KV cache: each layer's keys and values of the tokens generated so far.

A decoder generates one token at a time, and causal attention means the keys and values of the
earlier tokens never change: token t's K and V depend only on tokens 0..t. So instead of running
the whole sequence again for every new token, each layer keeps them:

    step 0 (the prompt, T tokens):  K, V (B, H, T, D) computed and stored
    step n (one new token):         its k, v (B, H, 1, D) appended; its query attends over all

Memory: 2 (keys and values) · layers · H · D · length · bytes per number, per sequence.

The buffers are allocated once, at the longest length (``max_len``), and filled in place, so a
step copies only the new token's keys and values (``torch.cat`` would copy the whole cache every
step). ``length`` is a Python int: no tensor is read to know where to write (no host sync).
The cache is for inference (under ``torch.no_grad()``): writing into a buffer in place is not
something autograd can differentiate through.

The protocol (what :class:`~mha_course.DecoderLM` and the attention modules use), as Hugging
Face's caches: a model's forward reads ``offset`` (where its new tokens start: their positions
are offset, offset + 1, ...) and ``key_length(T)`` (how many keys its queries see), hands each
layer's attention ``cache.layer(i)``, whose one method ``update(k, v)`` stores the new keys and
values and returns every key and value so far, and calls ``advance(T)`` when every layer is done.

:class:`StaticKVCache` is the same cache made for compiled decoding (``torch.compile``, CUDA
graphs): its write position is a tensor, and every forward sees the same shapes.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ._validate import require_positive_int, shape_str

__all__ = ["KVCache", "StaticKVCache", "LayerCache"]


class KVCache:
    """Keys and values of ``num_layers`` layers for ``batch_size`` sequences of up to ``max_len``
    tokens, ``num_heads`` heads of ``head_dim`` features each, in one ``buffer``."""

    def __init__(
        self,
        num_layers: int,
        batch_size: int,
        num_heads: int,
        head_dim: int,
        max_len: int,
        *,
        dtype: torch.dtype = torch.float32,
        device=None,
    ) -> None:
        for name, value in (
            ("num_layers", num_layers),
            ("batch_size", batch_size),
            ("num_heads", num_heads),
            ("head_dim", head_dim),
            ("max_len", max_len),
        ):
            require_positive_int(name, value)
        self.shape = (num_layers, 2, batch_size, num_heads, max_len, head_dim)
        self.batch_size, self.max_len = batch_size, max_len
        self._allocate(dtype, device)
        self.reset()

    def _allocate(self, dtype: torch.dtype, device) -> None:
        self.buffer = torch.zeros(
            self.shape, dtype=dtype, device=device
        )  # [layer, k|v, B, H, T, D]

    def _layer_buffers(self, layer: int) -> tuple[Tensor, Tensor]:
        """Layer ``layer``'s keys and values, (B, H, max_len, D) each."""
        return self.buffer[layer, 0], self.buffer[layer, 1]

    def reset(self) -> None:
        """Forget every cached token (the buffers are kept, and overwritten)."""
        self.length = 0  # tokens cached so far (the same for every layer between forwards)

    @property
    def nbytes(self) -> int:
        """The cache's memory at its full length: 2 · layers · B · H · max_len · D · bytes."""
        keys, _ = self._layer_buffers(0)
        return math.prod(self.shape) * keys.element_size()

    @property
    def offset(self) -> int:
        """Where the next forward's tokens start: the number of tokens cached."""
        return self.length

    def key_length(self, new_tokens: int) -> int:
        """How many keys a forward of ``new_tokens`` tokens attends over: cached + new."""
        return self.length + new_tokens

    def layer(self, index: int) -> LayerCache:
        """The cache of one layer, what its attention calls ``update`` on."""
        return LayerCache(self, index)

    def update(self, k: Tensor, v: Tensor, layer: int) -> tuple[Tensor, Tensor]:
        """Store the new tokens' keys and values k, v (B, H, T_new, D) of layer ``layer`` after
        the cached ones; return the keys and values of every token so far, (B, H, length +
        T_new, D) each (views into the buffer)."""
        self._checked_buffers(layer, k)
        start, end = self.length, self.length + k.size(-2)
        # each write indexes the buffer afresh: with autograd on, a view taken before the first
        # write is stale after it, and writing all of it (0:max_len) fails as a leaf's would
        self.buffer[layer, 0, :, :, start:end] = k
        self.buffer[layer, 1, :, :, start:end] = v
        return self.buffer[layer, 0, :, :, :end], self.buffer[layer, 1, :, :, :end]

    def require_room(self, batch_size: int, new_tokens: int) -> None:
        """A forward of ``new_tokens`` tokens for ``batch_size`` sequences fits this cache."""
        self._require_batch(batch_size)
        if self.length + new_tokens > self.max_len:
            raise ValueError(
                f"the cache holds {self.length} tokens and room for {self.max_len}: "
                f"{new_tokens} more do not fit (positions {self.length}..{self.length + new_tokens - 1} "
                f"are beyond max_len = {self.max_len})"
            )

    def advance(self, new_tokens: int) -> None:
        """After every layer has stored ``new_tokens`` tokens: they are now cached."""
        self.length += new_tokens

    def _checked_buffers(self, layer: int, k: Tensor) -> tuple[Tensor, Tensor]:
        """Layer ``layer``'s keys and values, checked to take the new keys k."""
        keys, values = self._layer_buffers(layer)
        if k.shape[:2] != keys.shape[:2] or k.size(-1) != keys.size(-1):
            raise ValueError(
                f"new keys of shape {shape_str(k.shape)} do not fit a cache of shape "
                f"{shape_str(keys.shape)} (B, H, max_len, D)"
            )
        return keys, values

    def _require_batch(self, batch_size: int) -> None:
        if batch_size != self.batch_size:
            raise ValueError(
                f"this cache was made for batch size {self.batch_size}, got input of batch size "
                f"{batch_size}; make a new cache for this batch"
            )


class StaticKVCache(KVCache):
    """A KV cache for compiled decoding: from one step to the next only the values of its
    tensors change, never a Python number or a shape, so a step compiled once (and captured
    once in a CUDA graph) serves every position.

    * ``position``, where the next tokens go, is a tensor (0-d, long), advanced in place on the
      device; the host never reads it (reading it would wait for the GPU);
    * ``update`` writes the new keys and values at their positions (``index_copy_``) and returns
      all ``max_len`` slots: every forward attends over the same S = max_len keys, and the mask,
      built from the positions (:func:`mha_course.modern.decoder_mask`), hides the slots not
      written yet;
    * each layer's ``keys[i]`` and ``values[i]`` (B, H, max_len, D) are tensors of their own, not
      views of one buffer: a compiled step writes into them in place (into views of one buffer,
      torch.compile would rebuild the whole buffer at every write).

    As the position is never read, :meth:`require_room` checks only the batch: the caller makes
    sure that the tokens fit (:func:`mha_course.generate` does, once, before it starts).
    """

    def _allocate(self, dtype: torch.dtype, device) -> None:
        num_layers, _, *shape = self.shape  # shape: (B, H, max_len, D)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.position = torch.zeros((), dtype=torch.long, device=device)  # tokens cached so far
        for tensor in (*self.keys, *self.values, self.position):  # CUDA graphs read them in place
            _mark_static_address(tensor)

    def _layer_buffers(self, layer: int) -> tuple[Tensor, Tensor]:
        return self.keys[layer], self.values[layer]

    def reset(self) -> None:
        self.position.zero_()  # in place: the tensor, and so its address, stays the same

    @property
    def length(self) -> int:
        """The number of tokens cached. It reads the position: a host sync, never in a forward."""
        return int(self.position)

    @property
    def offset(self) -> Tensor:
        """Where the next forward's tokens start: the position tensor itself."""
        return self.position

    def key_length(self, new_tokens: int) -> int:
        """Every forward attends over all max_len slots (the mask hides the empty ones)."""
        return self.max_len

    def update(self, k: Tensor, v: Tensor, layer: int) -> tuple[Tensor, Tensor]:
        """Write k, v (B, H, T_new, D) of layer ``layer`` at positions position ..
        position + T_new - 1; return all the slots, (B, H, max_len, D) each."""
        keys, values = self._checked_buffers(layer, k)
        positions = self.position + torch.arange(k.size(-2), device=k.device)  # (T_new,)
        return keys.index_copy_(2, positions, k), values.index_copy_(2, positions, v)

    def require_room(self, batch_size: int, new_tokens: int) -> None:
        self._require_batch(batch_size)
        if new_tokens > self.max_len:
            raise ValueError(f"{new_tokens} tokens do not fit a cache of max_len = {self.max_len}")

    def advance(self, new_tokens: int) -> None:
        self.position += new_tokens  # in place, on the device


def _mark_static_address(tensor: Tensor) -> None:
    """Tell torch.compile that ``tensor`` keeps its address from call to call (so CUDA graphs
    read it in place instead of copying it in), where this torch can."""
    mark = getattr(torch._dynamo, "mark_static_address", None)
    if mark is not None:
        mark(tensor)


class LayerCache:
    """One layer's view of a cache: ``update(k, v)`` stores the new tokens' keys and values
    (B, H, T_new, D) and returns every token's so far, (B, H, S, D) each."""

    def __init__(self, cache: KVCache, index: int) -> None:
        self.cache, self.index = cache, index

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        return self.cache.update(k, v, self.index)
