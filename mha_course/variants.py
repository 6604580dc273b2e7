"""Multi-head attention written the four ways lesson 02 teaches, over one shared set of weights.

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,   head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)

Every function here computes exactly that, batch first, and returns ``(output, weights)``:

* :func:`mha_loop`: one small projection per head, a Python loop, the heads concatenated;
* :func:`mha_einsum`: all heads at once, the head axis written into einsum subscripts;
* :func:`mha_sdpa`: one big projection cut into heads with view/transpose, then PyTorch's fused
  ``F.scaled_dot_product_attention`` (it never hands back the weights, so ``weights`` is None);
* :func:`mha_einops`: ``rearrange('b l (h d) -> b h l d')`` and explicit batched matmuls.

The "batched matmul" style (view/transpose, then ``Q @ Kᵀ`` over a head axis) is :func:`mha_einops`
with the reshapes spelled differently: the same kernels run on the same memory, so there is one
function for both.

Shapes: query (B, L, E), key (B, S, E_k), value (B, S, E_v); H heads of size D = E / H;
output (B, L, E), weights (B, H, L, S). ``attn_mask`` is a bool tensor, True where a query **may
attend** (the convention of ``F.scaled_dot_product_attention``), of shape (L, S), (B, L, S) or
(B or 1, H or 1, L, S). A query that may attend to nothing gets zero weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import torch
from einops import rearrange
from torch import Tensor

from . import masks
from ._validate import require_divisible, require_positive_int, require_tensor, shape_str
from .attention import scaled_dot_product_attention
from .kernel import attention_weights, fused_attention
from .masks import MAY_ATTEND, AttentionMask

__all__ = ["MHAParams", "mha_loop", "mha_einsum", "mha_sdpa", "mha_einops", "VARIANTS"]


@dataclass
class MHAParams:
    """The weights of one multi-head attention layer in the lesson's notation (x @ W + b).

    ``W_Q`` is (E, H·D): its columns ``i·D:(i+1)·D`` are head i's W_i^Q ∈ R^{d_model×d_k}, and the
    same for ``W_K`` (E_k, H·D) and ``W_V`` (E_v, H·D). ``W_O`` is W^O ∈ R^{H·D×d_model}. The
    biases are (E,) each; a layer without biases has zero biases.
    """

    W_Q: Tensor
    W_K: Tensor
    W_V: Tensor
    W_O: Tensor
    b_Q: Tensor
    b_K: Tensor
    b_V: Tensor
    b_O: Tensor
    num_heads: int

    def __post_init__(self):
        require_positive_int("num_heads", self.num_heads)
        E = self.W_Q.size(0)
        require_divisible("embed_dim", E, "num_heads", self.num_heads)
        for name, W, rows in (
            ("W_Q", self.W_Q, E),
            ("W_K", self.W_K, None),
            ("W_V", self.W_V, None),
            ("W_O", self.W_O, E),
        ):
            if W.dim() != 2 or W.size(1) != E or (rows is not None and W.size(0) != rows):
                want = f"({rows}, {E})" if rows is not None else f"(E_in, {E})"
                raise ValueError(f"{name} has shape {shape_str(W.shape)}, expected {want}")
        for name in ("b_Q", "b_K", "b_V", "b_O"):
            if getattr(self, name).shape != (E,):
                raise ValueError(
                    f"{name} has shape {tuple(getattr(self, name).shape)}, expected ({E},)"
                )

    @property
    def embed_dim(self) -> int:
        return self.W_Q.size(0)

    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.num_heads

    @classmethod
    def from_module(cls, module: torch.nn.Module) -> MHAParams:
        """The weights of a ``torch.nn.MultiheadAttention`` (or the package's ``MultiHeadAttention``,
        which stores them the same way), as transposed *views*: gradients flow back to the module."""
        if getattr(module, "bias_k", None) is not None or getattr(module, "add_zero_attn", False):
            raise ValueError("bias_k/bias_v and add_zero_attn are not part of the lesson's MHA")
        E = module.embed_dim
        if getattr(module, "in_proj_weight", None) is not None:  # packed (3E, E): [W_Q; W_K; W_V]ᵀ
            W_Q, W_K, W_V = (w.T for w in module.in_proj_weight.chunk(3))
        else:
            W_Q, W_K, W_V = module.q_proj_weight.T, module.k_proj_weight.T, module.v_proj_weight.T
        if module.in_proj_bias is not None:
            b_Q, b_K, b_V = module.in_proj_bias.chunk(3)
        else:
            b_Q = b_K = b_V = W_Q.new_zeros(E)
        out = module.out_proj
        b_O = out.bias if out.bias is not None else W_Q.new_zeros(E)
        return cls(W_Q, W_K, W_V, out.weight.T, b_Q, b_K, b_V, b_O, module.num_heads)

    @classmethod
    def random(
        cls,
        embed_dim: int,
        num_heads: int,
        *,
        kdim: int | None = None,
        vdim: int | None = None,
        seed: int = 0,
        dtype=torch.float32,
        device=None,
    ) -> MHAParams:
        """Xavier-uniform weights and small random (nonzero, so a forgotten bias shows) biases."""
        require_positive_int("embed_dim", embed_dim)
        generator = torch.Generator().manual_seed(seed)
        E = embed_dim

        def uniform(*shape, bound):
            x = (torch.rand(*shape, generator=generator, dtype=torch.float64) * 2 - 1) * bound
            return x.to(dtype=dtype, device=device)

        def weight(rows):
            return uniform(rows, E, bound=math.sqrt(6 / (rows + E)))

        return cls(
            weight(E),
            weight(kdim or E),
            weight(vdim or E),
            weight(E),
            *(uniform(E, bound=0.1) for _ in range(4)),
            num_heads,
        )

    def tensors(self) -> list[Tensor]:
        """The eight weight and bias tensors, in field order."""
        return [getattr(self, f.name) for f in fields(self) if f.name != "num_heads"]

    def to(self, dtype=None, device=None) -> MHAParams:
        """A copy in another dtype and/or on another device (fresh leaf tensors, no grad)."""
        return replace(
            self,
            **{
                f.name: getattr(self, f.name).detach().to(dtype=dtype, device=device).clone()
                for f in fields(self)
                if f.name != "num_heads"
            },
        )

    def requires_grad_(self, requires_grad: bool = True) -> MHAParams:
        for t in self.tensors():
            t.requires_grad_(requires_grad)
        return self

    def to_torch(self, batch_first: bool = True) -> torch.nn.MultiheadAttention:
        """A ``torch.nn.MultiheadAttention`` holding a copy of these weights."""
        E, Ek, Ev = self.embed_dim, self.W_K.size(0), self.W_V.size(0)
        module = torch.nn.MultiheadAttention(
            E,
            self.num_heads,
            kdim=Ek,
            vdim=Ev,
            batch_first=batch_first,
            dtype=self.W_O.dtype,
            device=self.W_O.device,
        )
        with torch.no_grad():
            if module._qkv_same_embed_dim:
                module.in_proj_weight.copy_(torch.cat([self.W_Q.T, self.W_K.T, self.W_V.T]))
            else:
                module.q_proj_weight.copy_(self.W_Q.T)
                module.k_proj_weight.copy_(self.W_K.T)
                module.v_proj_weight.copy_(self.W_V.T)
            module.in_proj_bias.copy_(torch.cat([self.b_Q, self.b_K, self.b_V]))
            module.out_proj.weight.copy_(self.W_O.T)
            module.out_proj.bias.copy_(self.b_O)
        return module


# --- argument checks, shared by the four styles ----------------------------------------------------


def _check(query: Tensor, key: Tensor, value: Tensor, params: MHAParams, attn_mask) -> None:
    """Validate the inputs and the mask."""
    if not isinstance(params, MHAParams):
        raise TypeError(f"params must be an MHAParams, got {type(params).__name__}")
    for name, x, width in (
        ("query", query, params.embed_dim),
        ("key", key, params.W_K.size(0)),
        ("value", value, params.W_V.size(0)),
    ):
        require_tensor(name, x)
        if x.dim() != 3 or x.size(-1) != width:
            raise ValueError(
                f"{name} must be (B, length, {width}) batch first, got shape {shape_str(x.shape)}"
            )
        if x.dtype != params.W_O.dtype:
            raise ValueError(f"{name} has dtype {x.dtype} but the weights are {params.W_O.dtype}")
    if not query.size(0) == key.size(0) == value.size(0):
        raise ValueError(
            f"query, key and value must share the batch size B, got shapes "
            f"{shape_str(query.shape)}, {shape_str(key.shape)}, {shape_str(value.shape)}"
        )
    if key.size(1) != value.size(1):
        raise ValueError(
            f"key and value must have the same length S, got shapes "
            f"{shape_str(key.shape)} and {shape_str(value.shape)}"
        )
    if attn_mask is None:
        return
    masks.require_mask("attn_mask", attn_mask, query.dtype, MAY_ATTEND, floats=False)
    B, L, S, H = query.size(0), query.size(1), key.size(1), params.num_heads
    if attn_mask.dim() not in (2, 3, 4) or not masks.broadcasts_to(
        _with_head_axis(attn_mask).shape, (B, H, L, S)
    ):
        raise ValueError(
            f"attn_mask of shape {shape_str(attn_mask.shape)} does not fit the scores: expected "
            f"(L, S) = ({L}, {S}), (B, L, S) = ({B}, {L}, {S}) or (B, H, L, S) = ({B}, {H}, {L}, {S})"
        )


def _with_head_axis(attn_mask: Tensor) -> Tensor:
    """The mask (L, S), (B, L, S) or (B, H, L, S) as (B or 1, H or 1, L, S)."""
    if attn_mask.dim() == 2:  # (L, S): the same for every sequence and head
        return attn_mask[None, None]
    if attn_mask.dim() == 3:  # (B, L, S): one per sequence, the same for every head
        return attn_mask[:, None]
    return attn_mask


def _checked_mask(query, key, value, params: MHAParams, attn_mask) -> AttentionMask:
    """Check everything; return the mask in the kernel's canonical form."""
    _check(query, key, value, params, attn_mask)
    mask = None if attn_mask is None else _with_head_axis(attn_mask)
    scores = (query.size(0), params.num_heads, query.size(1), key.size(1))  # (B, H, L, S)
    return masks.from_may_attend(mask, scores, query.dtype)


# --- (1) a loop over heads ---------------------------------------------------------------------------


def mha_loop(
    query: Tensor, key: Tensor, value: Tensor, params: MHAParams, attn_mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V), one head at a time, then Concat(...) W^O."""
    _check(query, key, value, params, attn_mask)
    H, D = params.num_heads, params.head_dim
    head_masks = (  # head i's mask, (B or 1, L, S), True = may attend
        [None] * H
        if attn_mask is None
        else _with_head_axis(attn_mask).expand(-1, H, -1, -1).unbind(1)
    )
    heads, weights = [], []
    for i in range(H):
        cols = slice(i * D, (i + 1) * D)  # head i's columns: W_i^Q = W_Q[:, cols]
        Q_i = query @ params.W_Q[:, cols] + params.b_Q[cols]  # (B, L, D)
        K_i = key @ params.W_K[:, cols] + params.b_K[cols]  # (B, S, D)
        V_i = value @ params.W_V[:, cols] + params.b_V[cols]  # (B, S, D)
        head_i, weights_i = scaled_dot_product_attention(Q_i, K_i, V_i, attn_mask=head_masks[i])
        heads.append(head_i)
        weights.append(weights_i)
    concat = torch.cat(heads, dim=-1)  # (B, L, H·D)
    return concat @ params.W_O + params.b_O, torch.stack(weights, dim=1)


# --- (2) einsum over a head axis ---------------------------------------------------------------------


def mha_einsum(
    query: Tensor, key: Tensor, value: Tensor, params: MHAParams, attn_mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """All heads at once: the weights get a head axis h, and einsum's subscripts say the shapes."""
    mask = _checked_mask(query, key, value, params, attn_mask)
    H, D = params.num_heads, params.head_dim
    W_Q, W_K, W_V = (
        W.unflatten(1, (H, D)) for W in (params.W_Q, params.W_K, params.W_V)
    )  # (E, H, D)
    Q = torch.einsum("ble,ehd->bhld", query, W_Q) + params.b_Q.view(H, 1, D)
    K = torch.einsum("bse,ehd->bhsd", key, W_K) + params.b_K.view(H, 1, D)
    V = torch.einsum("bse,ehd->bhsd", value, W_V) + params.b_V.view(H, 1, D)
    scores = torch.einsum("bhld,bhsd->bhls", Q / math.sqrt(D), K)
    weights = attention_weights(scores, mask)  # softmax(scores + M), (B, H, L, S)
    heads = torch.einsum("bhls,bhsd->bhld", weights, V)
    W_O = params.W_O.unflatten(0, (H, D))  # (H, D, E): head h's rows of W^O
    return torch.einsum("bhld,hde->ble", heads, W_O) + params.b_O, weights


# --- (3) view/transpose and PyTorch's fused kernel ---------------------------------------------------


def mha_sdpa(
    query: Tensor, key: Tensor, value: Tensor, params: MHAParams, attn_mask: Tensor | None = None
) -> tuple[Tensor, None]:
    """One projection per Q, K, V cut into heads by view/transpose; F.scaled_dot_product_attention
    does softmax(Q Kᵀ/√D) V in one fused call and never returns the (B, H, L, S) weights."""
    mask = _checked_mask(query, key, value, params, attn_mask)
    (B, L, E), S, H, D = query.shape, key.size(1), params.num_heads, params.head_dim
    Q = (query @ params.W_Q + params.b_Q).view(B, L, H, D).transpose(1, 2)  # (B, H, L, D)
    K = (key @ params.W_K + params.b_K).view(B, S, H, D).transpose(1, 2)  # (B, H, S, D)
    V = (value @ params.W_V + params.b_V).view(B, S, H, D).transpose(1, 2)
    heads = fused_attention(Q, K, V, mask)  # F.scaled_dot_product_attention, (B, H, L, D)
    concat = heads.transpose(1, 2).reshape(B, L, E)  # the transpose back before merging heads
    return concat @ params.W_O + params.b_O, None


# --- (4) einops rearrange and batched matmuls --------------------------------------------------------


def mha_einops(
    query: Tensor, key: Tensor, value: Tensor, params: MHAParams, attn_mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """The shapes written in the code: 'b l (h d) -> b h l d', then Q Kᵀ and A V batched over (b, h)."""
    mask = _checked_mask(query, key, value, params, attn_mask)
    H, D = params.num_heads, params.head_dim
    Q = rearrange(query @ params.W_Q + params.b_Q, "b l (h d) -> b h l d", h=H)
    K = rearrange(key @ params.W_K + params.b_K, "b s (h d) -> b h s d", h=H)
    V = rearrange(value @ params.W_V + params.b_V, "b s (h d) -> b h s d", h=H)
    scores = (Q / math.sqrt(D)) @ K.transpose(-2, -1)  # (B, H, L, S)
    weights = attention_weights(scores, mask)  # softmax(scores + M)
    heads = weights @ V  # (B, H, L, D)
    return rearrange(heads, "b h l d -> b l (h d)") @ params.W_O + params.b_O, weights


VARIANTS = {"loop": mha_loop, "einsum": mha_einsum, "sdpa": mha_sdpa, "einops": mha_einops}
"""The four styles by name, in the order lesson 02 teaches them."""
