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
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._validate import require_positive_int, shape_str

__all__ = ["KVCache", "LayerCache"]


class KVCache:
    """Keys and values of ``num_layers`` layers for ``batch_size`` sequences of up to ``max_len``
    tokens, ``num_heads`` heads of ``head_dim`` features each."""

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
        shape = (num_layers, 2, batch_size, num_heads, max_len, head_dim)
        self.buffer = torch.zeros(shape, dtype=dtype, device=device)  # [layer, k|v, B, H, T, D]
        self.batch_size, self.max_len = batch_size, max_len
        self.length = 0  # tokens cached so far (the same for every layer between forwards)

    @property
    def nbytes(self) -> int:
        """The cache's memory at its full length: 2 · layers · B · H · max_len · D · bytes."""
        return self.buffer.numel() * self.buffer.element_size()

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
        keys, values = self.buffer[layer, 0], self.buffer[layer, 1]  # (B, H, max_len, D) each
        if k.shape[:2] != keys.shape[:2] or k.size(-1) != keys.size(-1):
            raise ValueError(
                f"new keys of shape {shape_str(k.shape)} do not fit a cache of shape "
                f"{shape_str(keys.shape)} (B, H, max_len, D)"
            )
        end = self.length + k.size(-2)
        keys[:, :, self.length : end] = k
        values[:, :, self.length : end] = v
        return keys[:, :, :end], values[:, :, :end]

    def require_room(self, batch_size: int, new_tokens: int) -> None:
        """A forward of ``new_tokens`` tokens for ``batch_size`` sequences fits this cache."""
        if batch_size != self.batch_size:
            raise ValueError(
                f"this cache was made for batch size {self.batch_size}, got input of batch size "
                f"{batch_size}; make a new cache for this batch"
            )
        if self.length + new_tokens > self.max_len:
            raise ValueError(
                f"the cache holds {self.length} tokens and room for {self.max_len}: "
                f"{new_tokens} more do not fit (positions {self.length}..{self.length + new_tokens - 1} "
                f"are beyond max_len = {self.max_len})"
            )

    def advance(self, new_tokens: int) -> None:
        """After every layer has appended ``new_tokens`` tokens: they are now cached."""
        self.length += new_tokens


class LayerCache:
    """One layer's view of a cache: ``update(k, v)`` stores the new tokens' keys and values
    (B, H, T_new, D) and returns every token's so far, (B, H, S, D) each."""

    def __init__(self, cache: KVCache, index: int) -> None:
        self.cache, self.index = cache, index

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        return self.cache.update(k, v, self.index)
