"""The course's inner step (:func:`mha_course.triton_kernels.attend_tile`) with one classic flaw
switched on: lesson 09's checker (:mod:`.l09_flash`) names a learner's mistake by the flawed step
that gives what theirs gives.

The step is written once, :func:`flawed_tile`, with the flaw a compile-time constant read from its
globals (``FLAW``); :func:`build` makes one ``@triton.jit`` function per flaw, each with globals
of its own. Triton code: this module imports Triton, so it is imported only where Triton runs, once
``TRITON_INTERPRET`` is settled.
"""

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
        visible = k_pos[None, :] < S
        if FLAW == "padding":
            visible = k_pos[None, :] >= 0
        if IS_CAUSAL:
            if FLAW == "diagonal":
                visible = visible & (k_pos[None, :] < q_pos[:, None])
            elif FLAW == "diagonal + 1":
                visible = visible & (k_pos[None, :] <= q_pos[:, None] + 1)
            else:
                visible = visible & (k_pos[None, :] <= q_pos[:, None])
        s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m, tl.max(s, 1))
    if FLAW == "exp first":
        p = tl.math.exp2(s - m[:, None])
    elif FLAW == "natural exp":
        p = tl.exp(s - m_new[:, None])
    else:
        p = tl.math.exp2(s - m_new[:, None])
    alpha = tl.math.exp2(m - m_new)
    if FLAW == "sum":
        sum_exp = sum_exp + tl.sum(p, 1)
    else:
        sum_exp = sum_exp * alpha + tl.sum(p, 1)
    if FLAW == "acc":
        acc = tl.dot(p.to(v.dtype), v, acc)
    else:
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    if FLAW == "max kept":
        m_new = m
    return m_new, sum_exp, acc


_BUILT: dict[str, object] = {}


def build(flaw: str):
    """:func:`flawed_tile` with ``flaw``, as a ``@triton.jit`` function (built once per flaw)."""
    if flaw not in _BUILT:
        scope = {**globals(), "FLAW": tl.constexpr(flaw)}
        function = types.FunctionType(flawed_tile.__code__, scope, flawed_tile.__name__)
        function.__annotations__ = dict(flawed_tile.__annotations__)
        function.__qualname__ = f"flawed_tile[{flaw}]"  # the name Triton files it under
        _BUILT[flaw] = triton.jit(function)
    return _BUILT[flaw]
