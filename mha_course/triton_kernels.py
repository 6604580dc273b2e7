"""Lesson 09's kernel: FlashAttention's forward pass, written in Triton.

One program computes one tile of ``BLOCK_M`` queries of one (batch, head). It loads its queries
once, then walks over the keys ``BLOCK_N`` at a time with lesson 06's online softmax: per query a
running max m of the scores, a running sum ℓ of exp(score − m), and an unnormalised output acc,
rescaled whenever m rises. At the end it writes O = acc / ℓ, and the log-sum-exp m + log ℓ that
the backward pass needs. The (L, S) scores never exist in memory: one (BLOCK_M, BLOCK_N) tile of
them at a time, in registers.

The pieces, in the order the lesson builds them:

* :func:`attend_tile`: one step of the inner loop, one tile of keys: the tile of scores, the mask
  where a tile needs one, the update of m and ℓ, the rescaling of acc. The kernel takes it as an
  argument (``STEP``, a compile-time constant), so a learner's own step runs inside this kernel.
* :func:`launch_grid`: one program per tile of queries per (batch, head).
* :func:`flash_forward_kernel`: the loads, the loop over the tiles of keys in two stages, the
  stores. First the tiles that every query of the tile sees whole (no mask at all), then the
  tiles that need a mask: the last, partial tile of keys (past S), and with ``IS_CAUSAL`` the
  tiles on the diagonal, where some queries see a key and some do not. Causal tiles above the
  diagonal (keys after every query of the tile) are never loaded.

Scores are kept in base 2: q·k is multiplied by scale · log₂e, and exp2 of that is exp of the
scaled score. A GPU computes exp2 in one instruction (exp is exp2 and a multiply); the factor rides
in the multiply that scales the scores anyway, and cancels in the softmax.

Causal means torch's convention (``torch.nn.functional.scaled_dot_product_attention``'s
``is_causal``), top-left aligned: query i sees keys 0..i, whatever L and S are. With L > S the
queries from S on see every key; with L < S the last S − L keys are seen by no query.

These functions are Triton code: the caller (:mod:`mha_course.triton_attention`) checks the
arguments, picks the tile sizes, and runs them compiled for the GPU or in Triton's interpreter.
"""

import triton
import triton.language as tl

__all__ = ["attend_tile", "launch_grid", "flash_forward_kernel"]


@triton.jit
def attend_tile(
    q, k, v, m, sum_exp, acc, q_pos, k_pos, S, qk_scale,
    IS_CAUSAL: tl.constexpr, MASKED: tl.constexpr,
):  # fmt: skip
    """One step of the online softmax: the queries of a tile meet one tile of keys.

    q (BLOCK_M, D), k (BLOCK_N, D), v (BLOCK_N, D): the tile's queries, keys and values.
    m, sum_exp (BLOCK_M,) float32: each query's running max of its base-2 scores, and its running
    sum of exp2(score − m). acc (BLOCK_M, D) float32: its running sum of exp2(score − m) · v.
    q_pos (BLOCK_M,), k_pos (BLOCK_N,): the positions of these queries and keys; S, the number of
    keys. qk_scale = scale · log₂e (> 0). ``MASKED``: this tile may hold keys past S or, with
    ``IS_CAUSAL``, keys after some of the queries; without it, every query sees every key.
    Returns the new (m, sum_exp, acc).

    m is finite after the first tile: that tile holds key 0, which every query sees.
    """
    s = tl.dot(q, tl.trans(k))  # (BLOCK_M, BLOCK_N): q·k, not yet scaled
    if MASKED:
        visible = k_pos[None, :] < S
        if IS_CAUSAL:
            visible = visible & (k_pos[None, :] <= q_pos[:, None])
        s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m, tl.max(s, 1) * qk_scale)  # qk_scale > 0: the max of the scaled scores
    p = tl.math.exp2(s * qk_scale - m_new[:, None])  # one multiply-add per score, then exp2
    alpha = tl.math.exp2(m - m_new)  # what the old sums shrink by, now that the max is m_new
    sum_exp = sum_exp * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])  # acc · alpha + p v
    return m_new, sum_exp, acc


def launch_grid(B: int, H: int, L: int, BLOCK_M: int) -> tuple[int, int]:
    """How many programs, along the kernel's two axes: (tiles of BLOCK_M queries, B · H)."""
    return triton.cdiv(L, BLOCK_M), B * H


@triton.jit
def flash_forward_kernel(
    Q, K, V, Out, LSE,  # q, k, v, the output (B, H, L, D) and the log-sum-exp (B, H, L) float32
    stride_qb, stride_qh, stride_ql, stride_qd,
    stride_kb, stride_kh, stride_ks, stride_kd,
    stride_vb, stride_vh, stride_vs, stride_vd,
    stride_ob, stride_oh, stride_ol, stride_od,
    H, L, S, qk_scale,  # qk_scale = scale · log₂e
    D: tl.constexpr, IS_CAUSAL: tl.constexpr, STEP: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,  # last: the autotuner's (Triton 3.1 wants them so)
):  # fmt: skip
    """Program (i, b · H + h) computes the output rows of queries i · BLOCK_M ... of head h of
    batch b (the grid: :func:`launch_grid`); ``STEP`` is the inner step (:func:`attend_tile`)."""
    tile = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)  # 64-bit offsets: a large batch has more than 2³¹ elements
    h = (bh % H).to(tl.int64)
    q_pos = tile * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    n = tl.arange(0, BLOCK_N)  # (BLOCK_N,) positions within a tile of keys
    d = tl.arange(0, D)
    q_ptrs = Q + b * stride_qb + h * stride_qh + q_pos[:, None] * stride_ql + d[None, :] * stride_qd
    k_ptrs = K + b * stride_kb + h * stride_kh + n[:, None] * stride_ks + d[None, :] * stride_kd
    v_ptrs = V + b * stride_vb + h * stride_vh + n[:, None] * stride_vs + d[None, :] * stride_vd
    q = tl.load(q_ptrs, mask=q_pos[:, None] < L, other=0.0)  # (BLOCK_M, D); rows past L: zeros

    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    sum_exp = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)

    # Keys [0, whole): tiles every query of this tile sees whole. Keys [whole, end): tiles that
    # need a mask. Causal: a tile of keys is seen whole when its last key is at most the tile's
    # first query; no query here sees a key past its last query.
    first_q = tile * BLOCK_M
    if IS_CAUSAL:
        whole = tl.minimum((first_q + 1) // BLOCK_N, S // BLOCK_N) * BLOCK_N
        end = tl.minimum(first_q + BLOCK_M, S)
    else:
        whole = S // BLOCK_N * BLOCK_N
        end = S
    for start in range(0, whole, BLOCK_N):
        k = tl.load(k_ptrs + start * stride_ks)
        v = tl.load(v_ptrs + start * stride_vs)
        m, sum_exp, acc = STEP(
            q, k, v, m, sum_exp, acc, q_pos, start + n, S, qk_scale, IS_CAUSAL, False
        )
    for start in range(whole, end, BLOCK_N):
        k_pos = start + n
        k = tl.load(k_ptrs + start * stride_ks, mask=k_pos[:, None] < S, other=0.0)
        v = tl.load(v_ptrs + start * stride_vs, mask=k_pos[:, None] < S, other=0.0)
        m, sum_exp, acc = STEP(q, k, v, m, sum_exp, acc, q_pos, k_pos, S, qk_scale, IS_CAUSAL, True)

    o_ptrs = (
        Out + b * stride_ob + h * stride_oh + q_pos[:, None] * stride_ol + d[None, :] * stride_od
    )
    tl.store(o_ptrs, (acc / sum_exp[:, None]).to(Out.dtype.element_ty), mask=q_pos[:, None] < L)
    lse = (m + tl.math.log2(sum_exp)) * 0.6931471805599453  # log-sum-exp in base e: × ln 2
    tl.store(LSE + bh * L + q_pos, lse, mask=q_pos < L)
