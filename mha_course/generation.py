"""Generating text with a decoder-only model: sampling the next token, and the loop around it.

    logits of the last position (B, V) -> ÷ temperature -> keep the top k -> softmax -> draw

* ``temperature`` divides the logits *before* the softmax: below 1 it sharpens the distribution
  towards the likeliest tokens, above 1 it flattens it;
* ``top_k`` keeps exactly the k highest logits (the rest get probability 0); ``top_k=1`` is
  greedy decoding, the single likeliest token every time;
* ``generator`` (a ``torch.Generator``) makes the draws reproducible.

:func:`generate` runs the loop with or without the KV cache, or compiled; all give the same tokens.

Compiled decoding (``compile=True``): the prompt runs once, eagerly, into a
:class:`~mha_course.cache.StaticKVCache`; each new token then runs through the same decode step,
``model(next_id, cache=cache)``, under ``torch.compile(fullgraph=True)`` (``mode="reduce-overhead"``
on CUDA: the step is captured once in a CUDA graph and replayed). Nothing in the step changes
from one token to the next but the values of tensors (the cache's position is a tensor), so it
compiles once per model and shape, not once per token, and a second call of :func:`generate` on
the same model and shapes compiles nothing (the compiled step, and the model's static cache for
that batch size, are kept for the next call).
"""

from __future__ import annotations

import numbers
import weakref
from collections.abc import Callable

import torch
from torch import Tensor

from ._validate import require_positive_int, shape_str

__all__ = ["sample_next", "generate"]


def sample_next(
    logits: Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """One token per row of ``logits`` (B, V): ids (B, 1)."""
    _check_sampling(temperature, top_k, logits.size(-1))
    if top_k == 1:  # greedy: no randomness at all
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits / temperature
    if top_k is not None:  # exactly k survive, ties or not: scatter the top k into -inf
        top = torch.topk(logits, top_k, dim=-1)
        logits = torch.full_like(logits, float("-inf")).scatter(-1, top.indices, top.values)
    probs = torch.softmax(logits.float(), dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator)


@torch.no_grad()
def generate(
    model,
    ids: Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
    *,
    compile: bool | dict = False,
) -> Tensor:
    """The prompt ``ids`` (B, T) followed by ``max_new_tokens`` generated tokens: (B, T + max_new_tokens).

    ``model`` is a :class:`~mha_course.DecoderLM` (or any module with its ``forward(ids,
    cache=None)``, ``new_cache(batch_size, static=False)``, ``vocab_size`` and ``max_len``).
    With ``use_cache=True`` the prompt runs once and then each step feeds only the new token;
    without, each step runs the whole sequence again. ``compile=True``: the steps with a static
    cache, compiled (see the module's docstring); a dict of ``torch.compile`` keyword arguments
    (``{"backend": "eager"}``, ``{"mode": "max-autotune"}``) instead of the defaults. The model
    runs in eval mode (dropout off) and is put back in its mode afterwards.
    """
    _check_prompt(model, ids, max_new_tokens)
    _check_sampling(temperature, top_k, model.vocab_size)
    options = _compile_options(compile, use_cache, ids.device)
    was_training = model.training
    model.eval()
    try:
        cache, step = None, _next_logits
        if options is not None:
            cache, step = _static_cache(model, ids.size(0)), _compiled_step(options)
        elif use_cache:
            cache = model.new_cache(ids.size(0))
        tokens = [ids]
        logits = model(ids, cache=cache)[:, -1]  # (B, V): the prompt, once
        for i in range(max_new_tokens):
            next_id = sample_next(logits, temperature, top_k, generator)  # (B, 1)
            tokens.append(next_id)
            if i == max_new_tokens - 1:
                break
            if cache is not None:  # only the new token: its keys and values join the cache
                logits = step(model, next_id, cache)
            else:  # the whole sequence again
                logits = model(torch.cat(tokens, dim=1))[:, -1]
    finally:
        model.train(was_training)
    return torch.cat(tokens, dim=1)


def _next_logits(model, ids: Tensor, cache) -> Tensor:
    """One decode step: the logits (B, V) of the token after ``ids`` (B, 1), through the cache."""
    return model(ids, cache=cache)[:, -1]


# ---------------------------------------------------------------- compiled decoding

_COMPILED: dict[tuple, Callable] = {}  # torch.compile's options -> the compiled decode step
_STATIC_CACHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its caches


def _compile_options(compile, use_cache: bool, device: torch.device) -> dict | None:
    """torch.compile's arguments for the decode step (None: not compiled). fullgraph=True always:
    a graph break would mean a host sync or Python running between the step's kernels."""
    if isinstance(compile, bool):
        if not compile:
            return None
        options = {"mode": "reduce-overhead" if device.type == "cuda" else None}
    elif isinstance(compile, dict):
        options = dict(compile)
    else:
        raise TypeError(
            f"compile must be a bool or a dict of torch.compile options, got "
            f"{type(compile).__name__}"
        )
    if not use_cache:
        raise ValueError(
            "compile=True decodes through a static KV cache; it cannot run with use_cache=False"
        )
    return {**options, "fullgraph": True}


def _compiled_step(options: dict) -> Callable:
    """The decode step compiled with ``options``, made once and kept: torch.compile's own cache
    (of graphs, by their guards) then compiles once per model and shape."""
    key = tuple(sorted((name, repr(value)) for name, value in options.items()))
    if key not in _COMPILED:
        compiled = torch.compile(_next_logits, **options)
        cuda_graphs = options.get("mode") in ("reduce-overhead", "max-autotune")

        def step(model, ids: Tensor, cache) -> Tensor:
            if cuda_graphs:  # a new step: the last replay's outputs may be overwritten now
                torch.compiler.cudagraph_mark_step_begin()
            logits = compiled(model, ids, cache)
            return logits.clone() if cuda_graphs else logits  # ours, not the graph's buffer

        _COMPILED[key] = step
    return _COMPILED[key]


def _static_cache(model, batch_size: int):
    """The model's static cache for ``batch_size`` sequences in its dtype and on its device,
    emptied: one per such shape, kept and reused, so that a compiled step (whose guards may hold
    the cache's tensors themselves, as torch 2.5's do) and a CUDA graph captured with it read the
    same tensors at the same addresses next time."""
    weight = next(model.parameters())
    caches = _STATIC_CACHES.setdefault(model, {})
    key = (batch_size, weight.dtype, weight.device)
    if key not in caches:
        caches[key] = model.new_cache(batch_size, static=True)
    cache = caches[key]
    cache.reset()
    return cache


def _check_sampling(temperature, top_k, vocab_size: int) -> None:
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
        raise TypeError(
            f"temperature must be a float, got {type(temperature).__name__} {temperature!r}"
        )
    if not temperature > 0:  # also rules out NaN
        raise ValueError(
            f"temperature must be > 0, got {temperature}; for greedy decoding use top_k=1"
        )
    if top_k is not None:
        require_positive_int("top_k", top_k)
        if top_k > vocab_size:
            raise ValueError(
                f"top_k = {top_k} is larger than the vocabulary ({vocab_size} tokens); use "
                f"top_k=None to keep every token"
            )


def _check_prompt(model, ids, max_new_tokens) -> None:
    if not isinstance(ids, Tensor):
        raise TypeError(f"ids must be a torch.Tensor of token ids, got {type(ids).__name__}")
    if ids.dim() != 2 or ids.size(1) == 0:
        hint = " (one prompt: ids.unsqueeze(0))" if ids.dim() == 1 and ids.numel() else ""
        raise ValueError(
            f"ids must be a non-empty prompt of shape (B, T) with T >= 1, got shape "
            f"{shape_str(ids.shape)}{hint}"
        )
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
        raise TypeError(f"max_new_tokens must be an int, got {type(max_new_tokens).__name__}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    T = ids.size(1)
    if T > model.max_len:
        raise ValueError(
            f"the prompt has {T} tokens, longer than the model's max_len = {model.max_len}"
        )
    if T + max_new_tokens > model.max_len:
        raise ValueError(
            f"the prompt's {T} tokens + max_new_tokens = {max_new_tokens} make {T + max_new_tokens}, "
            f"more than the model's max_len = {model.max_len} positions; ask for at most "
            f"{model.max_len - T} new tokens"
        )
    low, high = int(ids.min()), int(ids.max())  # once per call, not per step
    if low < 0 or high >= model.vocab_size:
        raise ValueError(
            f"ids must be token ids in [0, {model.vocab_size}), got values from {low} to {high}"
        )
