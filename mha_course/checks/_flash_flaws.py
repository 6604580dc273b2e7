"""The course's inner step (:func:`mha_course.triton_kernels.attend_tile`) with one classic flaw
switched on, a compile-time constant (``FLAW``) of each built step's globals, for lesson 09's
checker. It imports Triton: imported only where Triton runs, once ``TRITON_INTERPRET`` is set."""

import functools
import types

import triton
import triton.language as tl

__all__ = ["flawed_tile", "build"]

FLAW = tl.constexpr("")  # no flaw: each built step has a FLAW of its own


def flawed_tile(
    q, k, v, m, sum_exp, acc, q_pos, k_pos, S, qk_scale,
    IS_CAUSAL: tl.constexpr, MASKED: tl.constexpr,
):  # fmt: skip
    """attend_tile, with the flaw ``FLAW`` (see :data:`mha_course.checks.l09_flash.STEP_FLAWS`)."""
    s = tl.dot(q, tl.trans(k))
    if FLAW != "no scale":
        s = s * qk_scale
    if MASKED:
        visible = (k_pos[None, :] < S) | (FLAW == "padding")
        if IS_CAUSAL:
            off = (1 if FLAW == "diagonal + 1" else 0) - (1 if FLAW == "diagonal" else 0)
            visible = visible & (k_pos[None, :] <= q_pos[:, None] + off)
        s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m, tl.max(s, 1))
    shifted = s - (m if FLAW == "exp first" else m_new)[:, None]
    p = tl.exp(shifted) if FLAW == "natural exp" else tl.math.exp2(shifted)
    alpha = tl.math.exp2(m - m_new)
    sum_exp = (sum_exp if FLAW == "sum" else sum_exp * alpha) + tl.sum(p, 1)
    acc = tl.dot(p.to(v.dtype), v, acc if FLAW == "acc" else acc * alpha[:, None])
    return (m if FLAW == "max kept" else m_new), sum_exp, acc


@functools.cache
def build(flaw: str):
    """:func:`flawed_tile` with ``flaw``, as a ``@triton.jit`` function (built once per flaw)."""
    scope = {**globals(), "FLAW": tl.constexpr(flaw)}
    function = types.FunctionType(flawed_tile.__code__, scope, flawed_tile.__name__)
    function.__annotations__ = dict(flawed_tile.__annotations__)
    function.__qualname__ = f"flawed_tile[{flaw}]"  # the name Triton files it under
    return triton.jit(function)
