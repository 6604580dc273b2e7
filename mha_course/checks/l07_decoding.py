"""Lesson 07's fast decoding: a decode step's bytes and roofline (``decode_roofline``), and the
static KV cache of a compiled step (``StaticCachedAttention``), fed in pieces as the growing one,
its buffers and position written in place, the position never read on the host."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from ..attention import scaled_dot_product_attention
from . import families
from ._core import exercise
from ._failure import ExerciseFailure
from ._table import Case, Out, Table, build_module, pair, seeded_randn
from .l07_generation import pieces, project, random_attention


def decode_roofline(
    num_params, num_layers, kv_width, length, batch_size, bytes_per_number, bandwidth, *, flaw=""
):
    """(bytes a decode step reads: every weight, every layer's cached keys and values of ``length``
    tokens of each sequence; seconds per generated token at ``bandwidth``), with ``flaw``."""
    size = 1 if flaw == "numbers, not bytes" else bytes_per_number
    weights = num_params * size * (batch_size if flaw == "weights per sequence" else 1)
    layers = 1 if flaw == "one layer's cache" else num_layers
    sequences = 1 if flaw == "one sequence's cache" else batch_size
    cache = (1 if flaw == "keys only" else 2) * layers * kv_width * length * sequences * size
    seconds = (weights + cache) / bandwidth  # one step: batch_size tokens
    if flaw == "a rate, not a time":
        return weights + cache, batch_size / seconds
    return weights + cache, seconds / (1 if flaw == "time per step" else batch_size)


_ROOFLINE_TEXTS = {
    "weights per sequence": "the weights are counted once per sequence; a step reads each weight "
    "once and uses it for every sequence of the batch (that is why a batch is cheap).",
    "one sequence's cache": "the cache is counted for one sequence; each sequence of the batch "
    "has its own keys and values, and the step reads all of them.",
    "keys only": "the cache holds keys and values: two numbers per token, layer and feature.",
    "one layer's cache": "the cache is counted for one layer; each layer keeps its own.",
    "numbers, not bytes": "you counted numbers, not bytes: each is bytes_per_number bytes.",
    "time per step": "that is the time of one step; it makes batch_size tokens, one per sequence.",
    "a rate, not a time": "that is tokens per second; the time per token is its inverse.",
}
_GPT2 = (124_439_808, 12, 768)  # GPT-2 small: parameters, layers, keys' width (12 heads × 64)
_8B = (8_030_261_248, 32, 1024)  # Llama 3 8B: its keys 8 heads × 128 wide (GQA)
_ROOFLINE = [  # (num_params, num_layers, kv_width, length, batch_size, bytes, bandwidth)
    Case("GPT-2 small, bfloat16, 320 cached, batch 1, 4.8 TB/s", (*_GPT2, 320, 1, 2, 4.8e12)),
    Case("the same, batch 16", (*_GPT2, 320, 16, 2, 4.8e12)),
    Case("8B, 32 layers, GQA keys 1024 wide, 4096 cached, batch 8", (*_8B, 4096, 8, 2, 3.35e12)),
    Case("a 1M float32 model on a CPU, batch 4, 20 GB/s", (10**6, 4, 128, 512, 4, 4, 2e10)),
]
_PER_TOKEN = Out(
    "the microseconds per token",
    pick=lambda r: torch.tensor(float(r[1]) * 1e6),
    fallback="a step's time is its bytes over the bandwidth, shared by the tokens it makes.",
)
_ROOFLINE_TODO = (
    "Replace `raise NotImplementedError` in decode_roofline: the bytes of the weights and of the "
    "cache, then the time per token."
)
_ROOFLINE_TABLE = Table(
    lambda: _ROOFLINE,
    decode_roofline,
    families.flawed(decode_roofline, _ROOFLINE_TEXTS, **_ROOFLINE_TEXTS),
    [Out("the bytes read", pick=0), _PER_TOKEN],
    shape_checks=[pair("bytes_read", "seconds_per_token")],
)
check_decode_roofline = exercise(
    "decode_roofline", "07", reference=decode_roofline, todo=_ROOFLINE_TODO, table=_ROOFLINE_TABLE
)


class StaticCachedAttention(nn.Module):
    """``attn`` (q_proj, k_proj, v_proj, out_proj) with a static KV cache: ``self.k``, ``self.v``
    (batch_size, H, max_len, D) allocated once and written in place at ``self.position`` (a 0-d
    long tensor, advanced in place); the new queries attend over all max_len slots, the mask
    built from their positions. ``(output, weights (B, H, T, max_len))``."""

    def __init__(self, attn, num_heads, batch_size, max_len):
        super().__init__()
        self.attn, self.num_heads, self.max_len = attn, num_heads, max_len
        w = attn.q_proj.weight
        shape = (batch_size, num_heads, max_len, w.size(0) // num_heads)
        self.k, self.v = (torch.zeros(shape, dtype=w.dtype, device=w.device) for _ in "kv")
        self.position = torch.zeros((), dtype=torch.long, device=w.device)

    def forward(self, query, key, value, attn_mask=None):
        q, k, v = project(self.attn, self.num_heads, query, key, value)
        positions = self.position + torch.arange(q.size(2), device=q.device)  # (T,)
        self.k.index_copy_(2, positions, k)
        self.v.index_copy_(2, positions, v)
        mask = torch.arange(self.max_len, device=q.device) <= positions[:, None]  # (T, max_len)
        heads, weights = scaled_dot_product_attention(q, self.k, self.v, attn_mask=mask)
        self.position += q.size(2)
        return self.attn.out_proj(families.merge_heads(heads)), weights


_SLOTS = (
    "The mask is built from the new tokens' positions, position .. position + T - 1: query i "
    "sees the slots up to its own position, never the empty ones after it."
)
_PROMPT = "The prompt and a decode step are the same call with another T: "
_TEXTS = {
    "causal top-left": families.CAUSAL["causal top-left"] + " " + _SLOTS,
    "mask after the advance": "the mask is built from the positions after the advance: each "
    "query sees T empty slots more. " + _SLOTS,
    "empty slots seen": "the queries see the slots not written yet (zeros): the mask hides them. "
    + _SLOTS,
    "off-by-one diagonal": families.CAUSAL["off-by-one diagonal"] + " " + _SLOTS,
    "causal without the diagonal": families.CAUSAL["causal without the diagonal"] + " " + _SLOTS,
    "prompt not causal": _PROMPT + "within the prompt each query sees the tokens after it too; "
    "T new tokens are causal among themselves.",
    "written one slot late": "each token's keys and values are written one slot after its "
    "position: the mask reads an empty slot, a full cache writes past its end. Token p: slot p.",
}
_PAST_END = "your cache writes past max_len: its slots are 0 .. max_len - 1, one per position"
_STATE = families.STATE["state not reset"]
_ALL_SLOTS = (
    "every call attends over all max_len slots, (B, H, T, max_len): a shape that grows with the "
    "tokens is a new shape, and a new compilation, at every token."
)
_TODO = (
    "Replace `raise NotImplementedError` in StaticCachedAttention: the buffers and the position "
    "in __init__; in forward, write the new keys and values at their positions, attend over all "
    "the slots with the mask from the positions, advance the position."
)
_IN_PLACE = (
    "is a new tensor after the call. A compiled step (a CUDA graph) reads and writes its tensors "
    "at the addresses it was captured with: the cache is written, the position advanced, in place."
)


class _HostReads(TorchDispatchMode):
    """Counts the integer tensors read on the host (``.item()``, ``int()``, slicing): a position."""

    reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default and not args[0].is_floating_point():
            self.reads += args[0].dtype != torch.bool
        return func(*args, **(kwargs or {}))


def _require_state(w, case: str, shape: tuple) -> None:
    """After __init__: the buffers ``shape`` (B, H, max_len, D), the position a 0-d integer at 0."""
    p, problem = getattr(w, "position", None), None
    if not isinstance(p, torch.Tensor) or p.dim() or p.is_floating_point():
        problem = (
            f"self.position is {type(p).__name__} {p!r}; it is a 0-d integer tensor, so that the "
            "compiled step reads it on the device: a Python number is a constant to the "
            "compiler, a new one each token (a recompile per token)."
        )
    elif int(p):
        problem = f"a new StaticCachedAttention starts at position {int(p)}: {_STATE}"
    for name in ("k", "v"):
        t = getattr(w, name, None)
        if problem is None and (not isinstance(t, torch.Tensor) or t.shape != shape):
            made = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            short = isinstance(t, torch.Tensor) and t.dim() == 4 and t.size(2) < shape[2]
            problem = f"self.{name} is {made}, not (B, H, max_len, D) = {shape}"
            problem += f": {_PAST_END}." if short else "."
    if problem:
        raise ExerciseFailure(f"Case {case!r}: {problem}")


def _require_step(w, label: str, before: tuple, end: int, calls: int) -> None:
    """The buffers and position are the tensors they were, the position advanced to ``end``."""
    for name, was in zip(("k", "v", "position"), before):
        if getattr(w, name) is not was:
            raise ExerciseFailure(f"Case {label!r}: self.{name} {_IN_PLACE}")
    at = int(w.position)
    if at != end:
        cause = {
            0: "it is never advanced: each new token is written at slot 0 again.",
            calls: _PROMPT + "it is advanced by one per call; by T, the call's tokens.",
        }
        raise ExerciseFailure(
            f"Case {label!r}: self.position is {at} after {end} tokens.\nLikely cause: "
            + cause.get(at, "it moves by the number of tokens each call writes.")
        )


def _run_static(candidate, name: str, attn, H: int, x, sizes: list[int], max_len: int) -> None:
    B, _, E = x.shape
    w = build_module(candidate, Case(name), (attn, H, B, max_len)).eval()
    _require_state(w, name, (B, H, max_len, E // H))

    def crash_cause(error, i, start, end):
        if i == 0 and end > 1:
            return _PROMPT + "the prompt's T tokens go to T slots."
        return _PAST_END + ", and this call fills the last of them." if end == max_len else None

    before, options = (w.k, w.v, w.position), {"max_len": max_len, "watch": _HostReads}
    spec = (_TEXTS, _SLOTS, _ALL_SLOTS)
    for i, label, _, end, reads in pieces(w, name, attn, H, x, sizes, spec, crash_cause, **options):
        if reads.reads:
            raise ExerciseFailure(
                f"Case {label!r}: your forward read an integer tensor's value on the host "
                f"({reads.reads} times: .item(), int(), a tensor in a slice or in torch.arange). "
                "The position stays on the device: a compiled step cannot wait for the host, "
                "and the slots to write and the mask are tensors computed from it."
            )
        _require_step(w, label, before, end, i + 1)


@exercise("StaticCachedAttention", "07", reference=StaticCachedAttention, todo=_TODO, points=3)
def check_static_cached_attention(candidate) -> int:
    """Check ``candidate(attn, num_heads, batch_size, max_len)``'s ``(output, weights)`` on new
    tokens, piece by piece, against causal attention over the whole sequence so far."""
    randn = seeded_randn(75)
    cases = [  # name, x's shape (None: the case before's), H, the pieces, max_len
        ("a prompt of 4, then 1, 1, 1; max_len 10, E 16, H 2", (2, 7, 16), 2, [4, 1, 1, 1], 10),
        ("one token at a time to a full cache: max_len 5, E 12, H 3", (1, 5, 12), 3, [1] * 5, 5),
        ("the same again in a new StaticCachedAttention", None, 3, [1] * 5, 5),
        ("a prompt of 3, then 2 at a time to max_len 7; E 16, H 4", (2, 7, 16), 4, [3, 2, 2], 7),
        ("a prompt as long as max_len = 6, 1 head", (1, 6, 8), 1, [6], 6),
    ]
    for seed, (name, shape, H, sizes, max_len) in enumerate(cases):
        if shape is not None:  # else the same attention and sequence as the case before
            x, attn = randn(*shape), random_attention(shape[-1], H, seed)
        _run_static(candidate, name, attn, H, x, sizes, max_len)
    return len(cases)
