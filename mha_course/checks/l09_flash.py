"""Lesson 09's kernel: the learner's inner step (``attend_tile``) run in the course's FlashAttention
kernel, and their launch (``flash_launch``) run with the course's step, on small odd shapes, held to
softmax(q kᵀ · scale) v in float64. Where Triton cannot run, a check says why and checks nothing."""

from __future__ import annotations

import contextlib
import inspect
import math
import warnings

import torch

from ..triton_attention import COURSE_STEP, LOG2_E, interpreting, triton_unavailable
from ..triton_launch import TritonCannotRun, launch_kernel
from ..work import TODO
from . import families
from ._core import Mistake, NotDoneYet, crashed, exercise
from ._failure import ExerciseFailure
from ._table import Case, Out, Table, _crash_cause, pair

BLOCKS = (16, 16)  # the interpreter's tiles: small odd shapes span several, partial ones included

# ---------------------------------------------------------------- can Triton run here?


def _cannot_run(name: str) -> None:
    """NotDoneYet, saying why, where this machine cannot run a Triton kernel."""
    reason = triton_unavailable()
    if reason is None and not torch.cuda.is_available() and not interpreting():
        reason = (
            "on a CPU Triton runs kernels only in its interpreter, which TRITON_INTERPRET turns on "
            "if set before anything imports triton: set it, then restart"
        )
    if reason is not None:
        raise NotDoneYet(f"{name} cannot be checked on this machine: {reason}.")


@contextlib.contextmanager
def _quiet():
    """NumPy's warnings of a kernel gone wrong in the interpreter stay out of the notebook."""
    import numpy as np

    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _inputs(seed, B, H, L, S, D, dtype=torch.float32, q_scale=1.0, q_view=False):
    """q (B, H, L, D), k and v (B, H, S, D); with ``q_view``, q is a (B, L, H, D) tensor's view."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, L, H, D, generator=g).transpose(1, 2) * q_scale
    q = q if q_view else q.contiguous()
    k, v = (torch.randn(B, H, S, D, generator=g) for _ in range(2))
    device = "cpu" if interpreting() else "cuda"
    return tuple(x.to(device, dtype) for x in (q, k, v))


def attention(q, k, v, is_causal=False, scale=None):
    """The reference: (softmax(q kᵀ · scale) v in q's dtype, log-sum-exp (B, H, L) float32), in
    float64; causal as torch's (query i sees keys 0..i)."""
    scale = q.size(-1) ** -0.5 if scale is None else scale
    scores = q.double() @ k.double().mT * scale
    if is_causal:
        hidden = ~families.causal(*scores.shape[-2:], device=q.device)
        scores = scores.masked_fill(hidden, -math.inf)
    lse = scores.logsumexp(-1)
    return ((scores - lse[..., None]).exp() @ v.double()).to(q.dtype), lse.float()


def _memo(flaws: dict, run_flawed) -> list[Mistake]:
    """The classic mistakes of a case, each ``run_flawed(flaw)`` run once (a kernel is slow)."""
    done = {}

    def ran(flaw: str):
        if flaw not in done:
            try:
                with _quiet():
                    done[flaw] = (run_flawed(flaw), None)
            except Exception as error:  # raised again, the same, at each call
                done[flaw] = (None, error)
        if done[flaw][1] is not None:
            raise done[flaw][1]
        return done[flaw][0]

    return [Mistake(flaw, lambda *_, f=flaw, **__: ran(f), why) for flaw, why in flaws.items()]


def _in_kernel(name: str, case: Case, call, crash: str, mistakes=()):
    """``call()``, a kernel run with the learner's code in it: NotDoneYet for the skeleton, and for
    a crash a failure naming the classic mistake that raises the same error, else ``crash``."""
    try:
        with _quiet():
            return call()
    except Exception as error:
        cause = error
        while cause is not None:
            if isinstance(cause, NotImplementedError):
                raise NotDoneYet() from None
            cause = cause.__cause__ or cause.__context__
        while type(error).__name__ == "InterpreterError" and error.__cause__ is not None:
            error = error.__cause__  # the learner's own error, inside the interpreter's wrapping
        if isinstance(error, TritonCannotRun):  # the install's fault, not the answer's
            raise NotDoneYet(f"{name} cannot be checked on this machine: {error}.") from None
        raise crashed(case.name, error, _crash_cause(error, mistakes, case) or crash) from error


# ---------------------------------------------------------------- attend_tile: the inner step

_RESCALE = "what a query summed under its old max m is brought to the new max (e^(m − m_new))"
STEP_FLAWS = {
    "acc": f"the output accumulator is not rescaled: {_RESCALE}, acc as well as the sum.",
    "sum": f"the running sum is not rescaled: {_RESCALE}, the sum as well as acc.",
    "exp first": "the exponentials are taken before the new max is known (this tile may raise it).",
    "diagonal": "the causal mask is off by one on the diagonal: query i sees key i itself.",
    "diagonal + 1": "the causal mask is off by one on the diagonal: query i sees keys 0..i and no "
    "later one, by positions.",
    "padding": "the last tile's padding is not masked: its keys from S on score 0, not −∞.",
    "no scale": "the scores are not scaled: q·k is multiplied by qk_scale before the max.",
    "natural exp": "the scores are in base 2 (qk_scale includes log₂e), so are their exponentials.",
    "max kept": "the running max is not carried: the step returns the new max.",
}


def _step_cases():
    _cannot_run("attend_tile")
    shapes = [  # name, seed, (B, H, L, S, D), causal, other inputs
        ("one tile of keys: L = S = 16, D = 16", 0, (1, 1, 16, 16, 16), False, {}),
        ("3 tiles of keys, the last partial: L = 19, S = 45, D = 32", 1, (1, 2, 19, 45, 32), False, {}),
        ("causal, L = S = 37: the diagonal crosses 3 tiles", 2, (2, 1, 37, 37, 16), True, {}),
        ("causal, L = 29 > S = 21", 3, (1, 2, 29, 21, 16), True, {}),
        ("large scores (q × 30), 2 tiles of keys", 4, (1, 1, 20, 32, 16), False, {"q_scale": 30.0}),
        ("float16 q, k, v (a GPU's dtype), causal, L = 21, S = 18", 5, (1, 2, 21, 18, 32), True,
         {"dtype": torch.float16}),
    ]  # fmt: skip
    for name, seed, shape, causal, more in shapes:
        yield Case(name, _inputs(seed, *shape, **more), {"is_causal": causal})


def _in_forward(step, case: Case):
    """The course's kernel on the case with ``step``: a Triton function, or a flaw's name."""
    from ..triton_attention import flash_forward

    if isinstance(step, str):
        from ._flash_flaws import build  # imports Triton: only once it can run

        step = build(step)
    return flash_forward(*case.args, **case.kwargs, step=step, blocks=BLOCKS)


_DTYPE_CRASH = "tl.dot multiplies two tiles of one dtype: float16 v, float32 exponentials."
_STEP_CRASH = (
    "a shape or dtype mix-up inside your step. Its tiles: q (BLOCK_M, D), k and v (BLOCK_N, D), "
    "m and sum_exp (BLOCK_M,), acc (BLOCK_M, D), all float32 but q, k and v."
)
_NAN = "NaN comes from −∞ − (−∞) or 0/0: a running max still −∞ when subtracted, or a sum of 0."
_LSE = "the log-sum-exp is (m + log₂ Σ) · ln 2: look at the m and the sum your step returns."
_ACC = "the log-sum-exp is right, so m and the sum are: look at acc and how it is rescaled."


def _step_call(candidate, case: Case, table: Table):
    """The learner's step in the course's kernel, once it is one: not the skeleton, a Triton one."""
    from ..triton_attention import _is_triton_function

    candidate = COURSE_STEP.resolve() if candidate is COURSE_STEP else candidate
    try:
        source = inspect.getsource(getattr(candidate, "fn", candidate))
    except (OSError, TypeError):  # a function without a file: it runs, and tells that way
        source = ""
    if TODO in source:
        raise NotDoneYet()
    if not _is_triton_function(candidate):
        raise ExerciseFailure(
            f"attend_tile is a {type(candidate).__name__}, not a Triton function.\nLikely cause: "
            "the kernel runs only functions compiled by Triton: keep the @triton.jit line."
        )
    crash = _DTYPE_CRASH if case.args[0].dtype == torch.float16 else _STEP_CRASH
    return _in_kernel("attend_tile", case, lambda: _in_forward(candidate, case), crash)


def _if_nan(text: str):
    """A likely cause: ``text`` where the answer's values hold NaN."""
    return lambda got, case: text if got.isnan().any() else None


STEP_TABLE = Table(
    cases=_step_cases,
    reference=attention,
    mistakes=lambda case: _memo(STEP_FLAWS, lambda flaw: _in_forward(flaw, case)),
    outputs=[  # the log-sum-exp first: it holds m and the sum alone, whatever acc is
        Out("the log-sum-exp values", 1, cause=_if_nan(_NAN), fallback=_LSE),
        Out("the outputs", 0, cause=_if_nan(_NAN), fallback=_ACC),
    ],
    call=_step_call,
    double=False,
    atol=3e-3,  # float16's; a classic mistake is off by far more
    rtol=3e-3,
)
check_attend_tile = exercise(
    "attend_tile",
    "09",
    reference=COURSE_STEP,
    todo="Replace `raise NotImplementedError` with the online softmax's step over a tile of keys.",
    points=3,
    table=STEP_TABLE,
)

# ---------------------------------------------------------------- flash_launch: the launch


def _flawed_launch(kernel, q, k, v, is_causal, scale, BLOCK_M=16, BLOCK_N=16, flaw=""):
    """:func:`mha_course.triton_launch.launch_kernel` with ``flaw`` switched on."""
    B, H, L, D = q.shape
    S = L if flaw == "S = L" else k.size(2)
    scale = D**-0.5 if scale is None else scale
    qk_scale = {"no log2e": scale, "no scale": LOG2_E}.get(flaw, scale * LOG2_E)
    out = torch.empty(q.shape, device=q.device, dtype=q.dtype)
    lse_dtype = q.dtype if flaw == "lse dtype" else torch.float32
    lse = torch.empty((B, H, L), device=q.device, dtype=lse_dtype)
    tiles = L // BLOCK_M if flaw == "floor" else math.ceil(L / BLOCK_M)
    grid = {"heads": (tiles, H), "swapped": (B * H, tiles)}.get(flaw, (tiles, B * H))
    passed = {"k's strides for v": (q, k, k, out), "q's strides for out": (q, k, v, q)}
    passed = passed.get(flaw, (q, k, v, out))  # the tensors whose strides go for q, k, v, out
    strides = [(x.contiguous() if flaw == "contiguous strides" else x).stride() for x in passed]
    kernel[grid](
        q, k, v, out, lse, *(n for s in strides for n in s), H, L, S, qk_scale,
        D=D, IS_CAUSAL=is_causal and flaw != "not causal", BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
    )  # fmt: skip
    return out, lse


_VIEW = "a view's strides are its own: a transposed q (as multi-head attention makes it) is not laid out like a contiguous tensor of its shape"
LAUNCH_FLAWS = {
    "floor": "the grid rounds the tiles of queries down: a last, partial tile gets no program.",
    "heads": "the grid's second axis counts the heads of one sequence, not the B·H pairs.",
    "swapped": "the grid's two axes are swapped: program_id(0) is the tile of queries.",
    "contiguous strides": f"strides computed from the shape: {_VIEW}.",
    "q's strides for out": f"the output's strides are q's: {_VIEW}.",
    "k's strides for v": f"v's strides are k's: {_VIEW}.",
    "S = L": "S is the number of keys, k's length; it equals L in self-attention only.",
    "no log2e": "qk_scale lacks log₂e: the kernel's exponentials are powers of 2.",
    "no scale": "qk_scale lacks the scale: the default is 1/√D (or the scale given), times log₂e.",
    "not causal": "is_causal does not reach the kernel (its IS_CAUSAL).",
    "lse dtype": "the log-sum-exp is kept in float32 whatever q's dtype.",
}


def _launch_cases():
    from ..triton_launch import flash_kernel

    _cannot_run("flash_launch")
    kernel = flash_kernel()
    shapes = [  # name, seed, (B, H, L, S, D), keyword arguments, other inputs
        ("B = 2, H = 3, L = 37, S = 29, D = 32", 0, (2, 3, 37, 29, 32), {}, {}),
        ("causal, B = 1, H = 2, L = S = 40, D = 16", 1, (1, 2, 40, 40, 16), {"is_causal": True}, {}),
        ("q a transposed view (B, L, H, D), as multi-head attention gives it; causal, L = 33 > S = 20",
         2, (2, 2, 33, 20, 16), {"is_causal": True}, {"q_view": True}),
        ("scale = 0.3, BLOCK_M = 32, BLOCK_N = 16, L = 45, S = 50", 3, (1, 2, 45, 50, 16),
         {"scale": 0.3, "BLOCK_M": 32}, {}),
        ("float16, B = 1, H = 2, L = 19, S = 24, D = 32", 4, (1, 2, 19, 24, 32), {},
         {"dtype": torch.float16}),
    ]  # fmt: skip
    for name, seed, shape, kwargs, more in shapes:
        q, k, v = _inputs(seed, *shape, **more)
        if name.startswith("q a transposed view"):
            v = v.transpose(2, 3).contiguous().transpose(2, 3)  # (B, H, D, S) in memory
        yield Case(name, (kernel, q, k, v), {"is_causal": False, "scale": None, **kwargs})


LAUNCH_CRASH = "the launch's arguments: the kernel checks them first; its error above says which."
_UNCOVERED = "rows that no program computed are NaN: the grid covers each (batch, head)'s tiles."


def _launch_call(candidate, case: Case, table: Table):
    kernel, q, k, v = case.args
    call = lambda: candidate(kernel, q.clone(), k.clone(), v.clone(), **case.kwargs)  # noqa: E731
    return _in_kernel("flash_launch", case, call, LAUNCH_CRASH, table.mistakes_for(case))


LAUNCH_TABLE = Table(
    cases=_launch_cases,
    reference=lambda kernel, q, k, v, is_causal, scale, **_: attention(q, k, v, is_causal, scale),
    mistakes=lambda case: _memo(
        LAUNCH_FLAWS, lambda flaw: _flawed_launch(*case.args, **case.kwargs, flaw=flaw)
    ),
    shape_checks=[pair("the output", "the log-sum-exp")],  # the pair's parts, as it names them
    outputs=[
        Out("the outputs", 0, dtype=True, cause=_if_nan(_UNCOVERED)),
        Out("the log-sum-exp values", 1, dtype=True),
    ],
    call=_launch_call,
    double=False,
    atol=3e-3,
    rtol=3e-3,
)
check_flash_launch = exercise(
    "flash_launch",
    "09",
    reference=launch_kernel,
    todo="Replace `raise NotImplementedError` with the launch: outputs, grid, the kernel's call.",
    points=2,
    table=LAUNCH_TABLE,
)
