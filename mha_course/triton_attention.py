"""Lesson 09: FlashAttention as a Triton kernel, callable like torch's attention.

    flash_attention(q, k, v, *, is_causal=False, scale=None) -> (B, H, L, D)

equals ``torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal,
scale=scale)`` for q (B, H, L, D), k and v (B, H, S, D), and ``torch.autograd`` gives its
gradients. The forward pass is the Triton kernel of :mod:`mha_course.triton_kernels` (tiles of
queries and keys, the online softmax, causal tiles above the diagonal skipped); it also saves each
query's log-sum-exp, from which the backward pass (:func:`attention_backward`) recomputes the
attention weights, in PyTorch.

Where it runs: on an NVIDIA GPU, compiled, in float16, bfloat16 or float32; on a CPU in Triton's
interpreter (``TRITON_INTERPRET=1``), which runs each program of the kernel one after another with
NumPy: the same answers, slowly, on any Linux machine. Triton has builds for Linux only:
elsewhere this module still imports, :func:`triton_unavailable` says why Triton cannot run, and
:func:`flash_attention` raises ImportError with that reason. ``import mha_course`` never imports
Triton.

The interpreter rule. Triton reads ``TRITON_INTERPRET`` when it is first imported in a process (its
own functions, ``tl.zeros`` and the like, are made then), and again at each ``@triton.jit``; a
kernel of one mode cannot call functions of the other. So set it before anything imports Triton:
in a notebook, ``os.environ["TRITON_INTERPRET"] = "1"`` in the first cell; to change it, restart
the kernel. (``torch.compile`` imports Triton too.) This module imports Triton only when
:func:`flash_attention` or :func:`flash_forward` first runs, never at its own import or in
:func:`triton_unavailable`; it runs its kernel, and a step passed to :func:`flash_forward`, in
the mode Triton was imported in, whenever they were defined, and says so plainly when the CPU
needs the interpreter that Triton did not start in.

Tile sizes: in the interpreter, :data:`INTERPRETER_BLOCKS`; on a GPU, Triton's autotuner times
:data:`GPU_CONFIGS` (for this kind of GPU) at the first call for each (L, S, D, causal, dtype),
and keeps the fastest.
"""

from __future__ import annotations

import functools
import importlib.metadata as metadata
import importlib.util
import math
import numbers
import os
import platform
import sys
import types

import torch
import torch.nn.functional as F
from torch import Tensor

from ._validate import require_ndim, require_tensor, shape_str

__all__ = [
    "flash_attention",
    "flash_forward",
    "COURSE_STEP",
    "attention_backward",
    "triton_unavailable",
    "stand_in_for_triton",
    "interpreting",
    "MIN_TRITON",
]

MIN_TRITON = (3, 1)
"""The oldest Triton this kernel is written for (the one torch 2.5.1, the course's oldest, brings)."""
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEAD_DIM = 128
"""D above this does not fit a tile's registers; :func:`flash_attention` pads a smaller D up to
the next power of two, at least 16 (the smallest side ``tl.dot`` takes)."""
INTERPRETER_BLOCKS = (16, 16)
"""(BLOCK_M, BLOCK_N) in the interpreter: small tiles, so that small inputs span several."""
GPU_BLOCKS = (64, 32)
"""(BLOCK_M, BLOCK_N) on a GPU when the launch is not the autotuned one (a learner's launch, or
a grid of theirs): tiles every NVIDIA GPU of the last years takes."""
GPU_CONFIGS = {
    # (BLOCK_M, BLOCK_N, num_warps, num_stages) that the autotuner times, by GPU. Ampere and newer
    # (A100, H100): the fused-attention tutorial's, and 8 warps to share D = 128's accumulator.
    # Turing (a T4): smaller tiles, which fit its registers without spilling at D = 64.
    "ampere+": [(128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3), (64, 64, 4, 3), (64, 32, 4, 2)],
    "turing": [(64, 32, 4, 2), (64, 16, 4, 2), (32, 32, 4, 2)],
}
LOG2_E = 1.4426950408889634
BACKWARD_SCORES = 2**24
"""The backward pass recomputes the weights this many (float32) at a time: blocks of queries."""


# ---------------------------------------------------------------- is Triton here?


def triton_unavailable() -> str | None:
    """None where Triton is installed (at least :data:`MIN_TRITON`); otherwise why not, in one
    line, with the fix. It does not import Triton (see the interpreter rule above): an install
    whose import fails is found by :func:`flash_attention`, which raises ImportError then."""
    stand_in = getattr(sys.modules.get("triton"), STAND_IN, None)
    if stand_in is not None:
        return stand_in
    try:
        found = "triton" in sys.modules or importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):  # a stand-in module, or a broken package
        found = False
    if not found or sys.modules.get("triton", ...) is None:
        if platform.system() != "Linux":
            return (
                f"Triton is not installed, and has builds for Linux only (this is "
                f"{platform.system()}): run lesson 09 on Linux or Colab"
            )
        return f"Triton is not installed: pip install 'triton>={_dotted(MIN_TRITON)}'"
    version = _triton_version()
    if version is not None and _release(version) < MIN_TRITON:
        return (
            f"Triton {version} is older than {_dotted(MIN_TRITON)}: "
            f"pip install --upgrade 'triton>={_dotted(MIN_TRITON)}'"
        )
    return None


STAND_IN = "__mha_course_stand_in__"  # on a stand-in for Triton: why Triton is not there


def stand_in_for_triton() -> str | None:
    """Where Triton is not installed (macOS, Windows), put a stand-in for it in ``sys.modules``
    so that lesson 09's cells that define kernels (``import triton``, ``@triton.jit``) still run
    there: ``triton.jit`` leaves a function as it is, and every launch and check says why nothing
    runs (:func:`triton_unavailable` gives the reason, as before). Returns that reason; where
    Triton is installed (or cannot be imported for another reason) it does nothing."""
    reason = triton_unavailable()
    already = getattr(sys.modules.get("triton"), STAND_IN, None) is not None
    if reason is None or already or "not installed" not in reason:
        return reason
    language = types.ModuleType("triton.language")
    language.constexpr = type("constexpr", (), {"__doc__": "A stand-in: no Triton here."})
    triton = types.ModuleType("triton", "A stand-in for Triton, which is not installed here.")
    triton.jit = lambda fn=None, **options: fn if fn is not None else (lambda fn: fn)
    triton.cdiv = lambda a, b: -(-a // b)
    triton.language = language
    setattr(triton, STAND_IN, reason)
    sys.modules.update({"triton": triton, "triton.language": language})
    return reason


def interpreting() -> bool:
    """Whether Triton runs kernels in its interpreter in this process: whether
    ``TRITON_INTERPRET`` was on when Triton was first imported. Imports Triton (where it is
    installed), which fixes the answer for the rest of the process."""
    if triton_unavailable() is not None:
        return _interpreter_asked()
    try:
        import triton.language as tl
        from triton.runtime.interpreter import InterpretedFunction
    except Exception:  # a broken install: flash_attention says so (ImportError, with the reason)
        return _interpreter_asked()
    return isinstance(tl.zeros, InterpretedFunction)  # one of Triton's own @jit functions


def _interpreter_asked() -> bool:
    """Whether ``TRITON_INTERPRET`` asks for the interpreter now."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def _triton_version() -> str | None:
    """The installed Triton's version, without importing it (PyTorch's ROCm and nightly builds
    name their package differently: pytorch-triton-rocm, pytorch-triton)."""
    module = sys.modules.get("triton")
    if module is not None:
        return getattr(module, "__version__", None)
    for name in metadata.packages_distributions().get("triton", []):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _kernels():
    """:mod:`mha_course.triton_kernels` (importing Triton), or ImportError with the reason."""
    reason = triton_unavailable()
    if reason is None:
        try:
            from . import triton_kernels

            return triton_kernels
        except Exception as error:  # an installed Triton whose import fails, whatever the reason
            reason = f"Triton is installed but its import fails: {type(error).__name__}: {error}"
    raise ImportError(f"flash_attention needs Triton: {reason}")


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("+")[0].split(".")[:2] if part.isdigit())


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


class _CourseStep:
    """The course's inner step, :func:`mha_course.triton_kernels.attend_tile`, named without
    importing Triton (which must wait until a lesson has set ``TRITON_INTERPRET``): the registry
    hands it out as the exercise ``attend_tile``'s reference, and every function here that takes a
    step takes it for the course's own."""

    def resolve(self):
        return _kernels().attend_tile

    def __repr__(self) -> str:
        return "<the course's attend_tile, mha_course.triton_kernels.attend_tile>"


COURSE_STEP = _CourseStep()


def course_step(step):
    """``step`` as the kernel takes it: the course's own for None or :data:`COURSE_STEP`."""
    return _kernels().attend_tile if step is None or step is COURSE_STEP else step


# ---------------------------------------------------------------- attention, and its gradients


def flash_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """softmax(q kᵀ · scale) v, causal or not, by the Triton kernel: q (B, H, L, D), k and v
    (B, H, S, D) -> (B, H, L, D), in q's dtype. ``scale`` defaults to 1/√D.

    The same answer as ``torch.nn.functional.scaled_dot_product_attention`` with the same
    arguments, its causal convention included: top-left, query i sees keys 0..i, also when
    L ≠ S. A head dim D that is not a power of two from 16 to 128 is padded with zeros up to one
    (q·k and the output's first D columns do not change); D > 128 is refused. No other mask than
    ``is_causal`` (``attn_mask`` is refused), no dropout.

    The backward pass is PyTorch, not Triton (:func:`attention_backward`): it recomputes the
    weights from the log-sum-exp the kernel saved, as FlashAttention's backward does, a block of
    queries at a time. It is there so that ``torch.autograd`` gives SDPA's gradients; the lesson
    is the forward kernel, and PyTorch's version shows the maths of the backward in a dozen
    lines that run anywhere, at the price of speed (it is not fused).
    """
    scale = _check_inputs(q, k, v, attn_mask, is_causal, scale)
    D = q.size(-1)
    padded = max(16, 1 << (D - 1).bit_length())  # the next power of two, at least 16
    if padded != D:
        q, k, v = (F.pad(x, (0, padded - D)) for x in (q, k, v))
    output = _FlashAttention.apply(q, k, v, is_causal, scale)
    return output[..., :D] if padded != D else output


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, is_causal, scale):
        output, lse = _launch(q, k, v, is_causal, scale)
        ctx.save_for_backward(q, k, v, output, lse)
        ctx.is_causal, ctx.scale = is_causal, scale
        return output

    @staticmethod
    def backward(ctx, d_output):
        q, k, v, output, lse = ctx.saved_tensors
        dq, dk, dv = attention_backward(d_output, q, k, v, output, lse, ctx.is_causal, ctx.scale)
        return dq, dk, dv, None, None


def attention_backward(
    d_output: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    output: Tensor,
    lse: Tensor,
    is_causal: bool,
    scale: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv) of O = P v, P = softmax(q kᵀ · scale), from dO = ``d_output`` (B, H, L, D)
    and what the forward pass kept: O and the log-sum-exp ``lse`` (B, H, L) of each query's
    scores, so that P = exp(q kᵀ · scale − lse) is recomputed, never stored:

        dv = Pᵀ dO      dP = dO vᵀ      dS = P ∘ (dP − rowsum(dO ∘ O))      dq = dS k · scale
        dk = dSᵀ q · scale

    (rowsum(dO ∘ O) = rowsum(P ∘ dP), the softmax's backward.) In float32, BACKWARD_SCORES
    weights at a time: a block of queries against the keys they may see (causal: up to the
    block's last query)."""
    B, H, L, D = q.shape
    S = k.size(-2)
    dtype = q.dtype
    q, k, v, d_output = (x.float() for x in (q, k, v, d_output))
    delta = (d_output * output.float()).sum(-1, keepdim=True)  # (B, H, L, 1)
    dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
    rows = max(1, BACKWARD_SCORES // max(1, B * H * S))
    for i in range(0, L, rows):
        block = slice(i, i + rows)
        seen = min(S, i + rows) if is_causal else S  # the keys this block's queries may see
        q_i, do_i, k_i, v_i = q[:, :, block], d_output[:, :, block], k[:, :, :seen], v[:, :, :seen]
        scores = q_i @ k_i.mT * scale  # (B, H, rows, seen)
        if is_causal:
            query = torch.arange(i, i + scores.size(-2), device=q.device)[:, None]
            key = torch.arange(seen, device=q.device)
            scores = scores.masked_fill(key > query, -math.inf)
        p = torch.exp(scores - lse[:, :, block, None])
        dv[:, :, :seen] += p.mT @ do_i
        ds = p * (do_i @ v_i.mT - delta[:, :, block])
        dq[:, :, block] = ds @ k_i * scale
        dk[:, :, :seen] += ds.mT @ q_i * scale
    return dq.to(dtype), dk.to(dtype), dv.to(dtype)


# ---------------------------------------------------------------- the forward kernel


def flash_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    step=None,
    grid=None,
    blocks: tuple[int, int] | None = None,
    launch=None,
) -> tuple[Tensor, Tensor]:
    """The forward kernel alone: (output (B, H, L, D), lse (B, H, L) float32, each query's
    log-sum-exp of its scaled scores). No autograd; D a power of two from 16 to 128.

    For the lesson's exercises: ``step``, a ``@triton.jit`` inner step with
    :func:`~mha_course.triton_kernels.attend_tile`'s signature, runs in the kernel in place of
    it; ``launch(kernel, q, k, v, *, is_causal, scale, BLOCK_M, BLOCK_N) -> (output, lse)`` in
    place of :func:`~mha_course.triton_launch.launch_kernel`, and ``grid(B, H, L, BLOCK_M)`` in
    place of its grid (both launched through :class:`~mha_course.triton_launch.FlashKernel`,
    which checks every launch; the rows of a tile that no program computes come out NaN);
    ``blocks`` = (BLOCK_M, BLOCK_N), powers of two from 16 to 256, instead of the defaults (the
    interpreter's, or on a GPU the autotuner's).
    """
    scale = _check_inputs(q, k, v, None, is_causal, scale)
    D = q.size(-1)
    if D not in (16, 32, 64, 128):
        raise ValueError(
            f"flash_forward needs a head dim D that is a power of two from 16 to {MAX_HEAD_DIM}, "
            f"got D = {D} (q {shape_str(q.shape)}); flash_attention pads any D up to one"
        )
    _kernels()  # ImportError, with the reason, where Triton cannot run
    step = course_step(step)
    if not _is_triton_function(step):
        raise TypeError(f"step must be a @triton.jit function, got {type(step).__name__}")
    if blocks is not None:
        _check_blocks(blocks)
    return _launch(q, k, v, is_causal, scale, step, grid, blocks, launch)


def _launch(q, k, v, is_causal, scale, step=None, grid=None, blocks=None, launch=None):
    """Run the kernel: (output, lse). On a GPU, with nothing but ``step`` asked for, the
    autotuned kernel; otherwise ``launch`` (default: the package's) through the checked
    :class:`~mha_course.triton_launch.FlashKernel`."""
    from . import triton_launch

    interpret = interpreting()
    if q.numel() == 0:
        B, H, L, _ = q.shape
        return torch.empty_like(q), torch.empty((B, H, L), device=q.device, dtype=torch.float32)
    if interpret or blocks is not None or grid is not None or launch is not None:
        block_m, block_n = blocks or (INTERPRETER_BLOCKS if interpret else GPU_BLOCKS)
        kernel = triton_launch.flash_kernel(step, grid=grid)
        launch = launch or triton_launch.launch_kernel
        return launch(
            kernel, q, k, v, is_causal=is_causal, scale=scale, BLOCK_M=block_m, BLOCK_N=block_n
        )
    return _launch_autotuned(q, k, v, is_causal, scale, step)


def _launch_autotuned(q, k, v, is_causal, scale, step):
    """The kernel on a GPU, its tile sizes chosen by Triton's autotuner (:func:`_autotuned`)."""
    from .triton_launch import running

    kernels = _kernels()
    B, H, L, D = q.shape
    output = torch.empty_like(q)
    lse = torch.empty((B, H, L), device=q.device, dtype=torch.float32)
    newer = torch.cuda.get_device_capability(q.device) >= (8, 0)
    kernel = _autotuned(
        _in_mode(kernels.flash_forward_kernel, False), "ampere+" if newer else "turing"
    )
    options = {}
    if q.dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32:
        options["default_dot_input_precision"] = "ieee"  # float32 means float32, as in torch
    step = _in_mode(course_step(step), False)
    with running(q, False):
        kernel[lambda meta: kernels.launch_grid(B, H, L, meta["BLOCK_M"])](
            q, k, v, output, lse,
            *q.stride(), *k.stride(), *v.stride(), *output.stride(),
            H, L, k.size(-2), scale * LOG2_E,
            D=D, IS_CAUSAL=is_causal, STEP=step, **options,
        )  # fmt: skip
    return output, lse


def _is_triton_function(function) -> bool:
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    return isinstance(function, (JITFunction, InterpretedFunction))


@functools.cache
def _in_mode(function, interpret: bool):
    """A ``@triton.jit`` function in the mode asked for: Triton fixed its mode when it was
    defined (see the module's docstring); the same Python code, wrapped again if need be."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    if isinstance(function, InterpretedFunction) == interpret:
        return function
    return (InterpretedFunction if interpret else JITFunction)(function.fn)


@functools.cache
def _autotuned(kernel, gpu: str):
    """The compiled kernel under Triton's autotuner: at the first call for each (L, S, D, causal,
    dtype), each of this kind of ``gpu``'s :data:`GPU_CONFIGS` is timed; the fastest runs from
    then on."""
    import triton

    configs = [
        triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=warps, num_stages=stages)
        for m, n, warps, stages in GPU_CONFIGS[gpu]
    ]
    return triton.autotune(configs, key=["L", "S", "D", "IS_CAUSAL"])(kernel)


# ---------------------------------------------------------------- argument checks


def _check_inputs(q, k, v, attn_mask, is_causal, scale) -> float:
    """Every argument checked at the door; returns the scale (1/√D unless given)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        require_tensor(name, x)
    if attn_mask is not None:
        raise ValueError(
            "flash_attention takes no attn_mask: its kernel knows one mask, is_causal=True "
            "(torch's, top-left); for any other mask use mha_course.scaled_dot_product_attention"
        )
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be a bool, got {type(is_causal).__name__} {is_causal!r}")
    require_ndim("q", q, (4,), "(B, H, L, D)")
    require_ndim("k", k, (4,), "(B, H, S, D)")
    require_ndim("v", v, (4,), "(B, H, S, D)")
    B, H, L, D = q.shape
    S = k.size(2)
    if k.shape[:2] != q.shape[:2] or k.size(3) != D:
        raise ValueError(
            f"k must be (B, H, S, D) = ({B}, {H}, S, {D}) to match q {shape_str(q.shape)}, "
            f"got {shape_str(k.shape)}"
        )
    if v.shape != k.shape:
        raise ValueError(
            f"v must have k's shape (B, H, S, D) = {shape_str(k.shape)}, got {shape_str(v.shape)}"
        )
    if S == 0 or D == 0:
        raise ValueError(
            f"each query needs at least one key and D >= 1: got k {shape_str(k.shape)} (S = {S}) "
            f"and q {shape_str(q.shape)} (D = {D})"
        )
    if D > MAX_HEAD_DIM:
        raise ValueError(
            f"the head dim D must be at most {MAX_HEAD_DIM} for this kernel's tiles, got D = {D} "
            f"(q {shape_str(q.shape)})"
        )
    _check_dtypes_and_devices(q, k, v)
    return _check_scale(scale, D)


def _check_dtypes_and_devices(q, k, v) -> None:
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in DTYPES:
        raise ValueError(
            f"q, k and v must share one dtype of {', '.join(map(str, DTYPES))}; got "
            f"{q.dtype}, {k.dtype}, {v.dtype}"
        )
    if not (q.device == k.device == v.device):
        raise ValueError(
            f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}"
        )
    if q.device.type not in ("cuda", "cpu"):
        raise ValueError(
            f"flash_attention runs on an NVIDIA GPU (cuda) or, in Triton's interpreter, on the "
            f"CPU; got tensors on {q.device}"
        )
    interpret = interpreting()
    if q.device.type == "cpu" and not interpret:
        raise ValueError(
            "q, k and v are on the CPU, where Triton runs only in its interpreter, and "
            + (
                "TRITON_INTERPRET is set, but Triton was imported before it was: restart Python "
                "(the notebook's kernel) and set it before anything imports triton"
                if _interpreter_asked()
                else "TRITON_INTERPRET is not set: set os.environ['TRITON_INTERPRET'] = '1' "
                "before anything imports triton (in a notebook, in its first cell; restart the "
                "kernel if triton is imported already), or move them to a GPU"
            )
        )
    if interpret and q.dtype == torch.bfloat16:
        raise ValueError(
            "Triton's interpreter has no bfloat16 (its tl.dot multiplies the raw bits: "
            "triton-lang/triton#11584): use float32 or float16 in the interpreter, bfloat16 on a GPU"
        )


def _check_blocks(blocks) -> None:
    sizes = (16, 32, 64, 128, 256)
    if not (isinstance(blocks, tuple) and len(blocks) == 2 and all(b in sizes for b in blocks)):
        raise ValueError(
            f"blocks must be (BLOCK_M, BLOCK_N), each a power of two from 16 to 256, got {blocks!r}"
        )


def _check_scale(scale, D: int) -> float:
    if scale is None:
        return D**-0.5
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a float, got {type(scale).__name__} {scale!r}")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0, got {scale}")
    return float(scale)
