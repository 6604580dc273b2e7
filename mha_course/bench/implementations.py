"""The implementations lesson 06 compares, each a named way to compute self-attention on x (B, L, E)
from one shared set of weights: the four styles of lesson 02, SDPA with each of its kernels
forced, and the two multi-head attention modules (the package's and PyTorch's)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..variants import MHAParams, mha_einops, mha_einsum, mha_loop, mha_sdpa
from .records import BASELINE

__all__ = ["Implementation", "standard_implementations", "sdpa_backends"]


@dataclass(frozen=True)
class Implementation:
    """A named way to compute self-attention on x (B, L, E).

    ``build(params)`` gets the shared weights (already in the sweep's dtype and device) and returns
    ``(run, leaves)``: ``run(x)`` returns the (B, L, E) output; ``leaves`` are the parameter
    tensors a training step differentiates. ``kernel`` optionally forces an SDPA backend.
    ``holds_scores`` says whether it materialises the (B, H, L, S) scores or weights, so that its
    memory grows as L²: the sweep predicts peak memory from it before the first measurement (an
    implementation it knows nothing about is assumed to).
    """

    name: str
    build: Callable[[MHAParams], tuple[Callable, list[torch.Tensor]]]
    kernel: object = None
    holds_scores: bool = True


def _functional(variant: Callable) -> Callable:
    def build(params: MHAParams):
        return (lambda x: variant(x, x, x, params)[0]), params.tensors()

    return build


def _torch_module(need_weights: bool) -> Callable:
    def build(params: MHAParams):
        module = params.to_torch().eval()
        return (lambda x: module(x, x, x, need_weights=need_weights)[0]), list(module.parameters())

    return build


def _package_module(need_weights: bool) -> Callable:
    def build(params: MHAParams):
        from ..multihead import MultiHeadAttention  # imported when used: the harness stands alone

        module = MultiHeadAttention.from_torch(params.to_torch()).eval()
        return (lambda x: module(x, x, x, need_weights=need_weights)[0]), list(module.parameters())

    return build


def _compiled(build: Callable) -> Callable:
    def build_compiled(params: MHAParams):
        run, leaves = build(params)
        return torch.compile(run), leaves

    return build_compiled


SDPA_BACKENDS = {
    "math": "MATH",
    "flash": "FLASH_ATTENTION",
    "mem-efficient": "EFFICIENT_ATTENTION",
    "cuDNN": "CUDNN_ATTENTION",
}
"""SDPA's kernels: the label the harness uses -> the name of torch's ``SDPBackend`` member."""


def sdpa_backends() -> dict[str, object]:
    """SDPA's kernels by label, those this torch knows (forced one at a time with ``sdpa_kernel``)."""
    from torch.nn.attention import SDPBackend

    return {
        label: getattr(SDPBackend, name)
        for label, name in SDPA_BACKENDS.items()
        if hasattr(SDPBackend, name)
    }


def standard_implementations(compile: bool = False) -> list[Implementation]:
    """Everything lesson 06 compares. Forced SDPA kernels the device lacks are reported as
    "unsupported" (on a CPU only math and flash exist; on a GPU older than Ampere, no flash).
    ``compile=True`` adds ``torch.compile`` versions (meant for a GPU; on a CPU it needs a C++
    compiler and takes a while to compile)."""
    impls = [
        Implementation("loop over heads", _functional(mha_loop)),
        Implementation("einsum", _functional(mha_einsum)),
        Implementation("batched matmul (einops)", _functional(mha_einops)),
        Implementation("SDPA", _functional(mha_sdpa), holds_scores=False),
        *(
            Implementation(f"SDPA {label}", _functional(mha_sdpa), kernel, label == "math")
            for label, kernel in sdpa_backends().items()
        ),
        Implementation("package MHA", _package_module(need_weights=False), holds_scores=False),
        Implementation("package MHA, need_weights", _package_module(need_weights=True)),
        # torch's module holds the scores in its CPU inference fast path
        Implementation(BASELINE, _torch_module(need_weights=False)),
        Implementation(f"{BASELINE}, need_weights", _torch_module(need_weights=True)),
    ]
    if compile:
        impls += [
            Implementation("batched matmul, compiled", _compiled(_functional(mha_einops))),
            Implementation("SDPA, compiled", _compiled(_functional(mha_sdpa)), holds_scores=False),
        ]
    return impls
