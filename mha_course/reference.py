"""The exercises' reference answers, with exactly the exercise skeletons' signatures.

The checkers compare a learner's code with these, and a notebook uses them in place of an
unfinished exercise so that the rest of the lesson still runs. Each is a thin adapter over the
package's own implementation (the package is the one place the maths is written).
"""

from __future__ import annotations

import copy
import math

import torch
from einops import rearrange

from .layernorm import LayerNorm
from .positional import positional_encoding


def __getattr__(name: str):
    """An exercise's reference, as its checker module declares it (mha_course.checks)."""
    from .checks import _registry

    exercise = _registry.find(name)
    if exercise is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return exercise.reference


__all__ = [
    "LayerNorm",
    "positional_encoding",
    "EncoderLayer",
    "EncoderModel",
    "train_step",
    "load_layer",
    "attention_in_blocks",
    "post_ln_sublayer",
    "pre_ln_sublayer",
    "ResidualBlock",
    "gradient_norms",
    "FeedForward",
    "EncoderStack",
    "previous_token_score",
    "mean_pool",
    "embed_sentences",
    "head_ablation",
    "attention_flops",
    "scores_memory",
    "attention_cost",
]


# Lesson 03: ``LayerNorm(normalized_shape, eps=1e-5)`` and ``positional_encoding(max_len, d_model)``
# are the package's own (imported above); their signatures extend the exercise skeletons'.


class EncoderLayer(torch.nn.Module):
    """Lesson 04: the exercise's encoder layer, ReLU, batch first; post-LN by default.

        post-LN (``norm_first=False``, the paper's and BERT's):
            Step 2: Z = LayerNorm(X' + MultiHead(X'))
            Step 3: out = LayerNorm(FFN(Z) + Z),  FFN(Z) = linear2(relu(linear1(Z)))
        pre-LN (``norm_first=True``): x + MultiHead(LayerNorm(x)), then x + FFN(LayerNorm(x))

    ``forward(x, attn_mask=None)`` takes a bool mask, True where a query **may attend**, and hands it
    to ``self_attn``. ``mha_class`` and ``norm_class`` (keyword-only, not in the skeleton) build it
    from other parts, e.g. the learner's own MultiHeadAttention and LayerNorm; by default it uses
    this module's MultiHeadAttention and LayerNorm. ``activation`` (keyword-only) replaces the ReLU,
    e.g. ``torch.nn.functional.gelu`` for BERT-style models (lesson 05).
    """

    def __init__(
        self,
        d_model,
        num_heads,
        d_ff,
        dropout=0.0,
        norm_first=False,
        *,
        mha_class=None,
        norm_class=None,
        activation=torch.relu,
    ):
        super().__init__()
        self.activation = activation
        self.self_attn = (mha_class or __getattr__("MultiHeadAttention"))(d_model, num_heads)
        self.linear1 = torch.nn.Linear(d_model, d_ff)
        self.linear2 = torch.nn.Linear(d_ff, d_model)
        self.norm1 = (norm_class or LayerNorm)(d_model)
        self.norm2 = (norm_class or LayerNorm)(d_model)
        self.dropout = torch.nn.Dropout(dropout)
        self.norm_first = norm_first

    def self_attention_block(self, x, attn_mask=None):
        attended, _ = self.self_attn(x, x, x, attn_mask=attn_mask)
        return self.dropout(attended)

    def feed_forward_block(self, x):
        return self.dropout(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, x, attn_mask=None):
        if self.norm_first:
            x = x + self.self_attention_block(self.norm1(x), attn_mask)
            return x + self.feed_forward_block(self.norm2(x))
        z = self.norm1(x + self.self_attention_block(x, attn_mask))  # Step 2
        return self.norm2(z + self.feed_forward_block(z))  # Step 3


class EncoderModel(torch.nn.Module):
    """Lesson 04: token ids in, a score for every token of the vocabulary at every position out.

    Step 1, X' = Embedding + PositionEncoding (the PE table a buffer: it moves with the model and
    is not trained); then ``num_layers`` encoder layers with weights of their own, each on the
    previous one's output, all with the padding mask; then a linear read-out.
    ``forward(tokens (B, L) int, padding (B, L) bool, True at padding) -> (B, L, vocab_size)``.
    ``layer_class`` and ``positional_encoding`` (keyword-only, not in the skeleton) build it from
    other parts, e.g. the learner's own EncoderLayer and positional encoding.
    """

    def __init__(
        self,
        vocab_size,
        max_len,
        d_model,
        num_heads,
        d_ff,
        num_layers,
        *,
        layer_class=None,
        positional_encoding=positional_encoding,
    ):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", positional_encoding(max_len, d_model))
        self.layers = torch.nn.ModuleList(
            (layer_class or EncoderLayer)(d_model, num_heads, d_ff) for _ in range(num_layers)
        )
        self.readout = torch.nn.Linear(d_model, vocab_size)

    def forward(self, tokens, padding):
        x = self.embed(tokens) + self.pe[: tokens.size(1)]  # Step 1   (B, L, d_model)
        may_attend = rearrange(~padding, "b s -> b 1 1 s")  # the same for every head and query
        for layer in self.layers:
            x = layer(x, attn_mask=may_attend)  # Steps 2 and 3, N times
        return self.readout(x)


def train_step(model, optimizer, tokens, targets, padding, max_norm=1.0):
    """Lesson 04: one step of training ``model(tokens, padding) -> scores (B, L, V)``: the mean
    cross-entropy over the real positions (not the padding), gradients clipped to a total norm of
    ``max_norm``, one update. Returns the loss, detached."""
    scores = model(tokens, padding)
    loss = torch.nn.functional.cross_entropy(
        rearrange(scores, "b l v -> (b l) v"), targets.masked_fill(padding, -100).flatten()
    )  # -100: ignored; no host sync, unlike scores[~padding]
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.detach()


def load_layer(layer, weights, i):
    """Lesson 05: copy layer ``i`` of the MiniLM checkpoint ``weights`` into ``layer`` (packed
    ``self_attn.in_proj_weight`` or separate ``q_proj``/``k_proj``/``v_proj``)."""
    from .pretrained import (
        load_layer as _load_layer,  # imported here: loading a model is lesson 05's business
    )

    _load_layer(layer, weights, i)


def attention_in_blocks(q, k, v, block_size, is_causal=False, return_lse=False):
    """Lesson 06: softmax(q kᵀ / √d_k) v, reading the keys ``block_size`` at a time with the online
    softmax (a running max m, a running sum ℓ of exp(s - m), an unnormalised output o, rescaled
    whenever m rises). q (..., L, D), k (..., S, D), v (..., S, Dv) -> (..., L, Dv); the largest
    scores tensor it holds is (..., L, block_size). ``is_causal``: query i attends to keys 0..i
    (torch's convention), each block masked from the positions, no (L, S) mask. ``return_lse``:
    also the log-sum-exp of each query's scores, (..., L). Written here only: the package's
    attention calls the fused kernels that do this (``torch.nn.functional.scaled_dot_product_attention``)."""
    m = q.new_full(q.shape[:-1] + (1,), -math.inf)  # running max of each query's scores
    sum_exp = q.new_zeros(q.shape[:-1] + (1,))  # ℓ: running sum of exp(s - m)
    o = q.new_zeros(q.shape[:-1] + v.shape[-1:])  # running sum of exp(s - m) · v
    query_position = torch.arange(q.size(-2), device=q.device)[:, None]  # (L, 1)
    for j in range(0, k.size(-2), block_size):
        s = q @ k[..., j : j + block_size, :].transpose(-2, -1) / math.sqrt(q.size(-1))
        if is_causal:
            key_position = torch.arange(j, j + s.size(-1), device=q.device)  # (block,)
            s = s.masked_fill(key_position > query_position, -math.inf)
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        rescale = torch.exp(m - m_new)
        p = torch.exp(s - m_new)
        sum_exp = sum_exp * rescale + p.sum(dim=-1, keepdim=True)
        o = o * rescale + p @ v[..., j : j + block_size, :]
        m = m_new
    out = o / sum_exp
    if return_lse:
        return out, (m + sum_exp.log()).squeeze(-1)
    return out


# ---------------------------------------------------------------- the small steps, lesson by lesson
# Each step of the lessons' longer exercises, on its own: what a learner writes before putting the
# pieces together.

# Lesson 00: the two matmuls of attention (the steps of ``soft_lookup``), and the lookup itself.


# Lesson 01: the scaled scores, the two masks and the mask that combines them (bool, True where a
# query may attend).


# Lesson 03: a sub-layer with its residual and LayerNorm, both ways round, and the gradient that
# reaches each block of a stack.


def post_ln_sublayer(x, sublayer, norm):
    """Post-LN, the original paper's "add & norm": norm(x + sublayer(x))."""
    return norm(x + sublayer(x))


def pre_ln_sublayer(x, sublayer, norm):
    """Pre-LN (GPT-2 and most models since): x + sublayer(norm(x))."""
    return x + sublayer(norm(x))


class ResidualBlock(torch.nn.Module):
    """``sublayer`` (a module or function that keeps the shape (..., d_model)) wrapped with its
    residual connection, dropout and LayerNorm, post-LN or pre-LN from one flag, as in
    ``torch.nn.TransformerEncoderLayer``: ``norm_first=False`` (the default) gives
    ``norm(x + dropout(sublayer(x)))``, ``norm_first=True`` gives ``x + dropout(sublayer(norm(x)))``."""

    def __init__(self, sublayer, d_model, norm_first=False, dropout=0.0):
        super().__init__()
        self.sublayer = sublayer
        self.norm = LayerNorm(d_model)
        self.dropout = torch.nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x):
        add_norm = pre_ln_sublayer if self.norm_first else post_ln_sublayer
        return add_norm(x, lambda t: self.dropout(self.sublayer(t)), self.norm)


def gradient_norms(blocks, x, target):
    """Run ``x`` through ``blocks`` in turn; for ``F.mse_loss(output, target)``, the norm of the
    gradient at each block's input, as a list of ``len(blocks)`` floats (item 0 is at x itself)."""
    inputs, hidden = [], x.detach().requires_grad_()
    for block in blocks:
        inputs.append(hidden)
        hidden = block(hidden)
    loss = torch.nn.functional.mse_loss(hidden, target)
    grads = torch.autograd.grad(loss, inputs, allow_unused=True)
    return [0.0 if g is None else g.norm().item() for g in grads]


# Lesson 04: the position-wise feed-forward network, and a stack of layers.


class FeedForward(torch.nn.Module):
    """FFN(x) = linear2(relu(linear1(x))), d_model -> d_ff -> d_model, each position on its own."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = torch.nn.Linear(d_model, d_ff)
        self.linear2 = torch.nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.linear2(torch.relu(self.linear1(x)))


class EncoderStack(torch.nn.Module):
    """``num_layers`` independent deep copies of ``layer``, run in order, each on the previous one's
    output (as ``torch.nn.TransformerEncoder`` does); ``forward(x, attn_mask=None)`` hands the bool
    mask (True = may attend) to every layer."""

    def __init__(self, layer, num_layers):
        super().__init__()
        self.layers = torch.nn.ModuleList(copy.deepcopy(layer) for _ in range(num_layers))

    def forward(self, x, attn_mask=None):
        for layer in self.layers:
            x = layer(x, attn_mask=attn_mask)
        return x


# Lesson 05: reading a pretrained encoder's outputs.


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """weights (..., L, L), rows = queries -> (...): the mean of weights[..., i, i - 1] over the
    queries that have a previous token, i = 1 … L-1 (the diagonal just below the main one)."""
    return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).mean(dim=-1)


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """hidden (B, L, E), attention_mask (B, L) of 1/0 -> (B, E): the mean of the real tokens."""
    from .pretrained import mean_pool as _mean_pool  # lesson 05's module, imported when used

    return _mean_pool(hidden, attention_mask)


def embed_sentences(model, sentences):
    """Lesson 05: sentences -> (N, E) embeddings, each the mean of its real tokens' last hidden
    states (padding left out), normalised to length 1."""
    from .pretrained import embed_sentences as _embed_sentences

    return _embed_sentences(model, sentences)


def head_ablation(model, score):
    """Lesson 05: (layers, H), how much ``score(model)`` drops when each head alone is switched
    off (its columns of W^O zeroed); the model is left as it was."""
    from .pretrained import head_ablation as _head_ablation

    return _head_ablation(model, score)


# Lesson 06: what attention costs.


def attention_flops(B: int, H: int, L: int, S: int, D: int) -> int:
    """FLOPs of Q Kᵀ and weights @ V, a multiply-add counting 2: 2·B·H·L·S·D each. The scale
    and the softmax, O(B·H·L·S), are left out."""
    return 4 * B * H * L * S * D


def scores_memory(B: int, H: int, L: int, S: int, dtype: torch.dtype) -> int:
    """Bytes of one (B, H, L, S) tensor of ``dtype``."""
    return B * H * L * S * dtype.itemsize


def attention_cost(B: int, H: int, L: int, S: int, D: int, dtype: torch.dtype) -> dict[str, int]:
    """What softmax(Q Kᵀ/√d_k) V costs for B sequences, H heads, L queries, S keys, head size D:
    ``{"flops", "score_bytes", "unfused_bytes", "fused_bytes"}``, all ints. ``flops``: the two
    matmuls (:func:`attention_flops`); ``score_bytes``: one (B, H, L, S) tensor
    (:func:`scores_memory`); ``fused_bytes``: q, k, v read and the output written once;
    ``unfused_bytes``: that, plus four passes over a (B, H, L, S) tensor (the scores written, read
    by the softmax, the weights written, read by weights @ V)."""
    score_bytes = scores_memory(B, H, L, S, dtype)
    fused_bytes = 2 * B * H * (L + S) * D * dtype.itemsize
    return {
        "flops": attention_flops(B, H, L, S, D),
        "score_bytes": score_bytes,
        "unfused_bytes": fused_bytes + 4 * score_bytes,
        "fused_bytes": fused_bytes,
    }
