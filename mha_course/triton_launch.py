"""Lesson 09's launch: the forward kernel called the way any Triton kernel is, with every argument
checked first.

    kernel = flash_kernel(step)             # the course's kernel, with ``step`` as its inner step
    out, lse = launch_kernel(kernel, q, k, v, is_causal=True)

:func:`launch_kernel` is what a kernel's Python side does: allocate the output and the log-sum-exp,
work out the grid, and pass each tensor with its strides. A Triton kernel trusts those numbers: a
stride that is not the tensor's own reads the wrong numbers (or past the tensor's memory), a grid
too small leaves rows unwritten, one too large writes outside the output. So the
:class:`FlashKernel` that :func:`flash_kernel` returns checks each launch before it runs: the
tensors, their strides, the sizes and the grid, with a ValueError naming what is wrong; it fills
the output and the log-sum-exp with NaN first, so that rows no program writes show.

It runs the kernel in Triton's mode of the moment, compiled or interpreted (see
:mod:`mha_course.triton_attention`). Triton is imported when a kernel is made, never before.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import numbers

import torch
from torch import Tensor

from ._validate import shape_str
from .triton_attention import (
    LOG2_E,
    _in_mode,
    _kernels,
    _triton_version,
    course_step,
    interpreting,
)

__all__ = [
    "FlashKernel",
    "flash_kernel",
    "launch_kernel",
    "grid_problem",
    "TritonCannotRun",
    "BLOCK_SIZES",
]

BLOCK_SIZES = (16, 32, 64, 128, 256)
"""The tile sides the kernel takes (``tl.dot`` needs at least 16, and powers of two)."""
_TENSORS = {"Q": "q", "K": "k", "V": "v", "Out": "the output", "LSE": "the log-sum-exp"}
_CONSTANTS = ("D", "IS_CAUSAL", "BLOCK_M", "BLOCK_N")  # the kernel's tl.constexpr, but STEP


def launch_kernel(
    kernel, q: Tensor, k: Tensor, v: Tensor, *, is_causal=False, scale=None, BLOCK_M=16, BLOCK_N=16
) -> tuple[Tensor, Tensor]:
    """The forward pass by ``kernel`` (:func:`flash_kernel`'s): q (B, H, L, D), k and v
    (B, H, S, D) -> (output (B, H, L, D) in q's dtype, log-sum-exp (B, H, L) float32), one
    program per tile of ``BLOCK_M`` queries of each (batch, head). ``scale`` defaults to 1/√D;
    the kernel takes it in base 2, times log₂e."""
    B, H, L, D = q.shape
    S = k.size(2)
    scale = D**-0.5 if scale is None else scale
    out = torch.empty_like(q)
    lse = torch.empty((B, H, L), device=q.device, dtype=torch.float32)
    grid = (math.ceil(L / BLOCK_M), B * H)
    kernel[grid](
        q, k, v, out, lse,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        H, L, S, scale * LOG2_E,
        D=D, IS_CAUSAL=is_causal, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
    )  # fmt: skip
    return out, lse


def flash_kernel(step=None, *, grid=None) -> FlashKernel:
    """The course's forward kernel (:func:`mha_course.triton_kernels.flash_forward_kernel`) with
    ``step`` (a ``@triton.jit`` function with ``attend_tile``'s signature; default: the course's)
    as its inner step, launched as ``kernel[grid](...)``. ``grid(B, H, L, BLOCK_M)``, when given,
    replaces the grid of every launch (checked the same way)."""
    return FlashKernel(step, grid)


class FlashKernel:
    """``kernel[grid](Q, K, V, Out, LSE, <4 strides each of Q, K, V, Out>, H, L, S, qk_scale, D=,
    IS_CAUSAL=, BLOCK_M=, BLOCK_N=)``: the forward kernel's own arguments but its step, each
    checked before the kernel runs (see the module's docstring)."""

    def __init__(self, step=None, grid=None):
        kernels = _kernels()  # ImportError, with the reason, where Triton cannot run
        self.interpret = interpreting()
        self.kernel = _in_mode(kernels.flash_forward_kernel, self.interpret)
        self.step = _in_mode(course_step(step), self.interpret)
        self.grid = grid
        parameters = inspect.signature(kernels.flash_forward_kernel.fn).parameters.values()
        self.signature = inspect.Signature([p for p in parameters if p.name != "STEP"])

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launch(grid, *args, **kwargs)

    def launch(self, grid, *args, **kwargs) -> None:
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as error:
            raise TypeError(f"kernel[grid]{self.signature}: {error}") from None
        a = bound.arguments
        B, H, L, S, D = _check_tensors(a)
        _check_strides(a)
        _check_sizes(a, H, L, S, D)
        if self.grid is not None:
            grid = self.grid(B, H, L, a["BLOCK_M"])
            if not _ints(grid):
                raise TypeError(f"grid must return a tuple of two ints, got {grid!r}")
        elif callable(grid):  # Triton's other form: grid(meta), meta the launch's arguments
            grid = grid(dict(a))
        problem = grid_problem(grid, B, H, L, a["BLOCK_M"])
        if problem is not None:
            raise (ValueError if _ints(grid) else TypeError)(problem)
        a["Out"].fill_(math.nan)  # rows that no program writes show as NaN
        a["LSE"].fill_(math.nan)
        options = {"num_warps": 4, "num_stages": 2}
        if not self.interpret and a["Q"].dtype == torch.float32:
            if not torch.backends.cuda.matmul.allow_tf32:
                options["default_dot_input_precision"] = "ieee"  # float32 means float32
        positional = [a.pop(name) for name in list(a)[: -len(_CONSTANTS)]]
        with running(positional[0], self.interpret):
            self.kernel[tuple(grid)](*positional, STEP=self.step, **a, **options)


class TritonCannotRun(RuntimeError):
    """Triton is installed but cannot run a kernel here, whatever the kernel (its interpreter
    with a NumPy it predates): the message says how to fix the install."""


@contextlib.contextmanager
def running(q: Tensor, interpret: bool):
    """Where a kernel runs: q's GPU; in the interpreter, its failure with NumPy 2.4 named."""
    with torch.cuda.device(q.device) if q.is_cuda else contextlib.nullcontext():
        try:
            yield
        except Exception as error:
            if interpret and "only 0-dimensional arrays" in str(error):  # NumPy 2.4 and up
                raise TritonCannotRun(
                    f"the interpreter of Triton {_triton_version()} fails with this NumPy: "
                    f"pip install --upgrade triton (or 'numpy<2.4')"
                ) from error
            raise


def grid_problem(grid, B: int, H: int, L: int, block_m: int) -> str | None:
    """What is wrong with a grid of programs for B · H heads of L queries in tiles of
    ``block_m``: None, or why (too many programs would write outside the output)."""
    if not _ints(grid):
        return f"the grid must be a tuple of two ints, got {grid!r}"
    got = tuple(grid) + (1,) * (3 - len(grid))
    most = (math.ceil(L / block_m), B * H, 1)
    if any(n > m for n, m in zip(got, most)) or min(got) < 0:
        return (
            f"for B={B}, H={H}, L={L} and BLOCK_M={block_m}, the grid = {tuple(grid)} launches "
            f"programs with no queries to compute: at most {most[:2]} here (tiles of queries, "
            f"then (batch, head) pairs), and a program past them would write outside the output"
        )
    return None


def _ints(grid) -> bool:
    """A grid as Triton takes it: a tuple (or list) of one to three ints."""
    return (
        isinstance(grid, (tuple, list))
        and 1 <= len(grid) <= 3
        and all(isinstance(n, int) and not isinstance(n, bool) for n in grid)
    )


# ---------------------------------------------------------------- what a launch is checked for


def _check_tensors(a: dict) -> tuple[int, int, int, int, int]:
    for name, what in _TENSORS.items():
        if not isinstance(a[name], Tensor):
            raise TypeError(f"{name} ({what}) must be a torch.Tensor, got {type(a[name]).__name__}")
    q, k, v, out, lse = (a[name] for name in _TENSORS)
    if q.dim() != 4 or k.dim() != 4:
        raise ValueError(
            f"Q must be (B, H, L, D) and K (B, H, S, D), got {shape_str(q.shape)} and "
            f"{shape_str(k.shape)}"
        )
    B, H, L, D = q.shape
    S = k.size(2)
    expected = {"K": (B, H, S, D), "V": (B, H, S, D), "Out": (B, H, L, D)}
    for name, shape in expected.items():
        if tuple(a[name].shape) != shape:
            raise ValueError(
                f"{name} ({_TENSORS[name]}) must be {shape_str(shape)} for Q {shape_str(q.shape)} "
                f"and K {shape_str(k.shape)}, got {shape_str(a[name].shape)}"
            )
    if len({x.device for x in (q, k, v, out, lse)}) != 1:
        raise ValueError("Q, K, V, Out and LSE must be on one device")
    if lse.numel() != B * H * L or lse.dtype != torch.float32 or not lse.is_contiguous():
        raise ValueError(
            f"LSE (the log-sum-exp) must be a contiguous float32 tensor of B·H·L = {B * H * L} "
            f"numbers, one per query: the kernel writes query i of (batch, head) bh at bh·L + i; "
            f"got a {lse.dtype} tensor {shape_str(lse.shape)}"
            + ("" if lse.is_contiguous() else " that is not contiguous")
        )
    return B, H, L, S, D


def _check_strides(a: dict) -> None:
    """Each tensor's four strides, as passed, are its own (where its size is above 1: a stride
    over an axis of size 1 is never used)."""
    names = [name for name in a if name.startswith("stride_")]  # 4 per tensor, in order
    for i, name in enumerate(("Q", "K", "V", "Out")):
        x, axes = a[name], names[4 * i : 4 * i + 4]
        given = tuple(a[axis] for axis in axes)
        wrong = [
            axis for axis, g, own, n in zip(axes, given, x.stride(), x.shape) if n > 1 and g != own
        ]
        if wrong:
            raise ValueError(
                f"the strides passed for {name} ({_TENSORS[name]}) are {given}, but its own are "
                f"{tuple(x.stride())} (shape {shape_str(x.shape)}{_layout(x)}): "
                f"{', '.join(wrong)} would {'write to other places than' if name == 'Out' else 'read other numbers than'} {_TENSORS[name]}'s"
            )


def _layout(x: Tensor) -> str:
    return ", contiguous" if x.is_contiguous() else ", a view that is not contiguous"


def _check_sizes(a: dict, H: int, L: int, S: int, D: int) -> None:
    for name, own in (("H", H), ("L", L), ("S", S)):
        if not isinstance(a[name], int) or isinstance(a[name], bool) or a[name] != own:
            raise ValueError(f"{name} must be {own} for these tensors, got {a[name]!r}")
    if a["D"] != D or D not in BLOCK_SIZES[:-1]:
        raise ValueError(
            f"D must be the head dim, {D}, a power of two from 16 to 128; got D = {a['D']!r}"
        )
    scale = a["qk_scale"]
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not 0 < scale < math.inf:
        raise ValueError(f"qk_scale must be a number > 0, got {scale!r}")
    if not isinstance(a["IS_CAUSAL"], bool):
        raise TypeError(f"IS_CAUSAL must be a bool, got {a['IS_CAUSAL']!r}")
    for name in ("BLOCK_M", "BLOCK_N"):
        if a[name] not in BLOCK_SIZES or isinstance(a[name], bool):
            raise ValueError(f"{name} must be one of {BLOCK_SIZES}, got {a[name]!r}")
