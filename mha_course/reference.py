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

from ._validate import require_divisible
from .attention import scaled_dot_product_attention as _sdpa
from .layernorm import LayerNorm
from .masks import causal_mask as _causal_mask
from .positional import positional_encoding


def __getattr__(name: str):
    """An exercise's reference, as its checker module declares it (mha_course.checks)."""
    from .checks import _registry

    exercise = _registry.find(name)
    if exercise is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return exercise.reference


__all__ = [
    "scaled_dot_product_attention",
    "MultiHeadAttention",
    "load_torch_weights",
    "job_scores",
    "LayerNorm",
    "positional_encoding",
    "EncoderLayer",
    "EncoderModel",
    "train_step",
    "attention_scores",
    "padding_mask",
    "causal_mask",
    "split_heads",
    "merge_heads",
    "post_ln_sublayer",
    "pre_ln_sublayer",
    "ResidualBlock",
    "gradient_norms",
    "FeedForward",
    "EncoderStack",
    "may_attend_mask",
    "SelfAttention",
    "DecoderBlock",
    "CharLM",
    "sample_next",
    "CachedAttention",
    "DecoderLayer",
    "rotary",
    "rope_attention",
    "alibi_bias",
    "grouped_query_attention",
    "sliding_window_attention",
]


def scaled_dot_product_attention(query, key, value, attn_mask=None, is_causal=False, scale=None):
    """Lesson 01: ``(output, weights)``; a bool ``attn_mask`` is True where a query may attend, a
    float one is added to the scores; ``is_causal``: query i may attend to keys 0..i; ``scale``
    defaults to 1/√d_k. A query with nothing to attend to gets zero weights and a zero output."""
    return _sdpa(query, key, value, attn_mask=attn_mask, is_causal=is_causal, scale=scale)


class SelfAttention(torch.nn.Module):
    """Lesson 01: one head of self-attention, softmax((x W^Q)(x W^K)ᵀ / √d_k) (x W^V).

    ``q_proj``, ``k_proj`` (d_model -> d_k) and ``v_proj`` (d_model -> d_v, d_v = d_k by default)
    are ``nn.Linear`` without bias; ``forward(x (..., L, d_model), attn_mask=None)`` returns
    ``(output (..., L, d_v), weights (..., L, L))``, ``attn_mask`` as ``scaled_dot_product_attention``'s.
    """

    def __init__(self, d_model, d_k, d_v=None):
        super().__init__()
        self.q_proj = torch.nn.Linear(d_model, d_k, bias=False)  # W^Q
        self.k_proj = torch.nn.Linear(d_model, d_k, bias=False)  # W^K
        self.v_proj = torch.nn.Linear(d_model, d_k if d_v is None else d_v, bias=False)  # W^V

    def forward(self, x, attn_mask=None):
        return _sdpa(self.q_proj(x), self.k_proj(x), self.v_proj(x), attn_mask=attn_mask)


class MultiHeadAttention(torch.nn.Module):
    """Lesson 02: MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, batch first.

    ``q_proj``, ``k_proj``, ``v_proj`` hold every head's W_i^Q, W_i^K, W_i^V side by side (E × E);
    ``forward(query, key, value, attn_mask=None, need_weights=True)`` returns ``(output (B, L, E),
    weights (B, H, L, S))``, every head's weights, or ``(output, None)`` with ``need_weights=False``.
    ``attn_mask``, broadcastable to (B, H, L, S), is bool, True where a query **may attend** (e.g.
    (L, S) causal or (B, 1, 1, S) padding), or float, added to the scores (e.g. (H, L, S) ALiBi).
    """

    def __init__(self, embed_dim, num_heads):
        super().__init__()
        require_divisible("embed_dim", embed_dim, "num_heads", num_heads)
        self.num_heads = num_heads
        self.q_proj = torch.nn.Linear(embed_dim, embed_dim)  # W^Q
        self.k_proj = torch.nn.Linear(embed_dim, embed_dim)  # W^K
        self.v_proj = torch.nn.Linear(embed_dim, embed_dim)  # W^V
        self.out_proj = torch.nn.Linear(embed_dim, embed_dim)  # W^O

    def forward(self, query, key, value, attn_mask=None, need_weights=True):
        q, k, v = (
            rearrange(proj(x), "b l (h d) -> b h l d", h=self.num_heads)
            for proj, x in ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value))
        )
        heads, weights = _sdpa(q, k, v, attn_mask=attn_mask)  # lesson 01, every head at once
        output = self.out_proj(rearrange(heads, "b h l d -> b l (h d)"))
        return output, (weights if need_weights else None)


def load_torch_weights(module, torch_mha):
    """Lesson 02: copy a ``torch.nn.MultiheadAttention``'s weights into ``module``'s ``q_proj``,
    ``k_proj``, ``v_proj``, ``out_proj`` (its packed ``in_proj_weight`` is [W^Q; W^K; W^V], each
    block (out, in) as nn.Linear keeps it). Returns ``module``."""
    weights = torch_mha.in_proj_weight.chunk(3)
    biases = torch_mha.in_proj_bias.chunk(3)
    with torch.no_grad():
        for linear, weight, bias in zip(
            (module.q_proj, module.k_proj, module.v_proj), weights, biases, strict=True
        ):
            linear.weight.copy_(weight)
            linear.bias.copy_(bias)
        module.out_proj.weight.copy_(torch_mha.out_proj.weight)
        module.out_proj.bias.copy_(torch_mha.out_proj.bias)
    return module


def job_scores(weights: torch.Tensor, partner: torch.Tensor) -> dict[str, torch.Tensor]:
    """Lesson 02: how much each head does each job of the toy task, ``{job: (H,)}``.

    ``weights`` (B, H, L, L), per head; ``partner`` (B, L), the position of each query's partner.
    A job's score is the weight a head puts on the job's key (previous: i − 1, next: i + 1,
    partner: partner[b, i]), averaged over the batch and every query that has such a key."""
    from .toy_tasks import head_scores, targets_from_partner  # lesson 02's task

    return head_scores(weights, targets_from_partner(partner))


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
        self.self_attn = (mha_class or MultiHeadAttention)(d_model, num_heads)
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


# ---------------------------------------------------------------- the small steps, lesson by lesson
# Each step of the lessons' longer exercises, on its own: what a learner writes before putting the
# pieces together.

# Lesson 00: the two matmuls of attention (the steps of ``soft_lookup``), and the lookup itself.


# Lesson 01: the scaled scores, the two masks and the mask that combines them (bool, True where a
# query may attend).


def attention_scores(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """Q Kᵀ / √d_k: query (..., L, E), key (..., S, E) -> (..., L, S), d_k = query.size(-1)."""
    return query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))


def padding_mask(lengths: torch.Tensor, S: int) -> torch.Tensor:
    """lengths (B,) -> bool (B, S), True where position j < lengths[b]: a real token."""
    return torch.arange(S, device=lengths.device) < lengths[:, None]


def causal_mask(L: int) -> torch.Tensor:
    """Bool (L, L), True where key j <= query i: a query sees itself and the past."""
    return _causal_mask(L, L)


def may_attend_mask(
    S: int, lengths: torch.Tensor | None = None, causal: bool = False
) -> torch.Tensor:
    """Self-attention over S positions: bool (S, S), or (B, S, S) with ``lengths`` (B,), True where
    query i may attend to key j: key j is a real token (j < lengths[b]) and, if ``causal``, j <= i.
    The pads' own rows are not masked (their outputs are ignored later)."""
    device = None if lengths is None else lengths.device
    if causal:
        mask = _causal_mask(S, S, device=device)
    else:
        mask = torch.ones(S, S, dtype=torch.bool, device=device)
    if lengths is not None:
        mask = mask & padding_mask(lengths, S)[:, None, :]
    return mask


# Lesson 02: the features split into heads, and merged back.


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, L, E) -> (B, H, L, D), D = E // H: head h gets features h·D … (h+1)·D − 1."""
    return rearrange(x, "b l (h d) -> b h l d", h=num_heads)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, L, D) -> (B, L, H·D), the inverse of :func:`split_heads`: Concat(head_1, ..., head_h)."""
    return rearrange(x, "b h l d -> b l (h d)")


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


# Lesson 07: the decoder.


def _causal(L: int, S: int, device) -> torch.Tensor:
    """Bool (L, S), True where query i (the last L of S positions) may attend to key j."""
    return _causal_mask(L, S, device, offset=S - L)


class DecoderBlock(torch.nn.Module):
    """Lesson 07: a GPT-style block, pre-LN, with causal self-attention and a GELU feed-forward:

        x = x + MultiHead(norm1(x)), each position attending to itself and the ones before it
        out = x + linear2(gelu(linear1(norm2(x))))

    ``forward(x)`` (B, L, d_model) -> the same shape; the block builds its causal mask itself.
    ``mha_class`` and ``norm_class`` (keyword-only, not in the skeleton) build it from other
    parts, e.g. the learner's own MultiHeadAttention and LayerNorm.
    """

    def __init__(self, d_model, num_heads, d_ff, *, mha_class=None, norm_class=None):
        super().__init__()
        self.self_attn = (mha_class or MultiHeadAttention)(d_model, num_heads)
        self.norm1 = (norm_class or LayerNorm)(d_model)
        self.norm2 = (norm_class or LayerNorm)(d_model)
        self.linear1 = torch.nn.Linear(d_model, d_ff)
        self.linear2 = torch.nn.Linear(d_ff, d_model)

    def forward(self, x):
        h = self.norm1(x)
        attended, _ = self.self_attn(h, h, h, attn_mask=_causal(x.size(-2), x.size(-2), x.device))
        x = x + attended
        return x + self.linear2(torch.nn.functional.gelu(self.linear1(self.norm2(x))))


class CharLM(torch.nn.Module):
    """Lesson 07: a decoder-only language model. Token embedding + learned position embedding,
    ``num_layers`` DecoderBlocks, a final LayerNorm and an output head tied to the token
    embedding (GPT-2's layout).

    ``forward(ids (B, T), start=0)`` -> logits (B, T, vocab_size); ``start`` is the position of
    ``ids[:, 0]`` (0 for a whole sequence; a new token after n cached ones is at position n).
    ``block_class`` and ``norm_class`` (keyword-only) build it from other parts.
    """

    def __init__(
        self,
        vocab_size,
        d_model,
        num_heads,
        d_ff,
        num_layers,
        max_len,
        *,
        block_class=None,
        norm_class=None,
    ):
        super().__init__()
        block_class = block_class or DecoderBlock
        self.token_embedding = torch.nn.Embedding(vocab_size, d_model)
        self.position_embedding = torch.nn.Embedding(max_len, d_model)
        self.blocks = torch.nn.ModuleList(
            block_class(d_model, num_heads, d_ff) for _ in range(num_layers)
        )
        self.norm = (norm_class or LayerNorm)(d_model)
        self.head = torch.nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.token_embedding.weight  # tied

    def forward(self, ids, start=0):
        positions = torch.arange(start, start + ids.size(1), device=ids.device)
        x = self.token_embedding(ids) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    """Lesson 07: one token id per row of ``logits`` (B, V) -> (B, 1): softmax(logits / temperature)
    over the ``top_k`` highest logits (all of them when None), drawn with ``generator``;
    ``top_k=1`` is greedy (the argmax)."""
    from .generation import sample_next as _sample_next

    return _sample_next(logits, temperature, top_k, generator)


class CachedAttention(torch.nn.Module):
    """Lesson 07: ``attn`` (a MultiHeadAttention with q_proj, k_proj, v_proj, out_proj and
    ``num_heads`` heads) with a KV cache, for a causal block that gets its tokens a few at a time.

    ``forward(query, key, value, attn_mask=None)``, called as the block calls its attention
    (query = key = value = the T new tokens, (B, T, E)): the new keys and values are appended to
    the cached ones (``self.k``, ``self.v``, (B, H, S, D), S tokens so far), and the new queries
    attend over all S + T of them, each to the keys up to its own position: the causal mask
    aligned bottom-right. ``attn_mask``, the block's causal mask over the new tokens alone, is
    replaced by that one. Returns ``(output (B, T, E), weights (B, H, T, S + T))``.
    """

    def __init__(self, attn, num_heads):
        super().__init__()
        self.attn, self.num_heads = attn, num_heads
        self.k = self.v = None  # (B, H, S, D) each: the keys and values of the tokens so far

    def forward(self, query, key, value, attn_mask=None):
        q, k, v = (
            rearrange(proj(x), "b l (h d) -> b h l d", h=self.num_heads)
            for proj, x in (
                (self.attn.q_proj, query),
                (self.attn.k_proj, key),
                (self.attn.v_proj, value),
            )
        )
        if self.k is not None:  # the tokens' axis: (B, H, S, D) + (B, H, T, D) -> (B, H, S + T, D)
            k, v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
        self.k, self.v = k, v
        L, S = q.size(2), k.size(2)
        heads, weights = _sdpa(q, k, v, attn_mask=_causal(L, S, q.device))
        return self.attn.out_proj(rearrange(heads, "b h l d -> b l (h d)")), weights


class DecoderLayer(torch.nn.Module):
    """Lesson 07: the decoder layer of an encoder-decoder, post-LN as in the original paper and
    ``torch.nn.TransformerDecoderLayer`` (ReLU):

        z1 = norm1(x + SelfAttention(x)), causal
        z2 = norm2(z1 + CrossAttention(queries z1, keys and values memory)), ``memory_mask``
        out = norm3(z2 + FFN(z2))

    ``forward(x (B, T, d_model), memory (B, S, d_model), memory_mask=None)``; ``memory_mask`` is a
    bool mask broadcastable to (B, H, T, S), True where a query **may attend** (a real source
    token), e.g. (B, 1, 1, S). ``multihead_attn`` is the cross-attention (torch's name).
    ``mha_class``, ``norm_class`` (keyword-only) build it from other parts.
    """

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, *, mha_class=None, norm_class=None):
        super().__init__()
        mha, norm = mha_class or MultiHeadAttention, norm_class or LayerNorm
        self.self_attn = mha(d_model, num_heads)
        self.multihead_attn = mha(d_model, num_heads)
        self.linear1 = torch.nn.Linear(d_model, d_ff)
        self.linear2 = torch.nn.Linear(d_ff, d_model)
        self.norm1, self.norm2, self.norm3 = norm(d_model), norm(d_model), norm(d_model)
        self.dropout = torch.nn.Dropout(dropout)

    def forward(self, x, memory, memory_mask=None):
        L = x.size(-2)
        attended, _ = self.self_attn(x, x, x, attn_mask=_causal(L, L, x.device))
        z = self.norm1(x + self.dropout(attended))
        read, _ = self.multihead_attn(z, memory, memory, attn_mask=memory_mask)
        z = self.norm2(z + self.dropout(read))
        ffn = self.linear2(self.dropout(torch.relu(self.linear1(z))))
        return self.norm3(z + self.dropout(ffn))


# Lesson 08: attention in today's models.


def rotary(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoPE, rotate-half layout: x (..., L, D) with feature i paired with i + D/2, pair i of the
    token at position p turned by the angle p · base^(-2i/D); positions (L,). Same shape and
    dtype as x."""
    from .rope import RotaryEmbedding  # lesson 08's module, imported when used

    return RotaryEmbedding(x.size(-1), base).to(x.device)(x, positions)


def rope_attention(q, k, v, positions, rotate):
    """Causal attention with RoPE: q (B, H, L, D) are the last L of the S tokens whose keys and
    values are k, v (B, H, S, D|Dv); positions (S,) the keys' positions. Queries and keys are
    rotated by their positions with ``rotate(x, positions)``, the values are not; query i sees
    keys 0 .. S - L + i. Returns the output (B, H, L, Dv)."""
    L, S = q.size(-2), k.size(-2)
    allowed = _causal_mask(L, S, q.device, offset=S - L)  # the queries are the last L tokens
    q, k = rotate(q, positions[S - L :]), rotate(k, positions)
    return _sdpa(q, k, v, attn_mask=allowed)[0]


def alibi_bias(num_heads: int, L: int, S: int) -> torch.Tensor:
    """ALiBi: float32 (num_heads, L, S), bias[h, i, j] = -m_h · (i - j) with
    m_h = 2^(-8(h+1)/num_heads) (num_heads a power of two)."""
    from .alibi import alibi_bias as _alibi_bias

    return _alibi_bias(num_heads, L, S)


def grouped_query_attention(query, key, value, attn_mask=None):
    """GQA: query (B, H, L, D), key and value (B, H_kv, S, D|Dv), H a multiple of H_kv; query
    head h reads key/value head h // (H / H_kv). Returns ``(output (B, H, L, Dv), weights
    (B, H, L, S))``; a bool ``attn_mask`` is True where a query may attend."""
    return _sdpa(query, key, value, attn_mask=attn_mask, enable_gqa=True)


def sliding_window_attention(q, k, v, window):
    """Causal sliding-window self-attention: query i sees keys j with i - window < j <= i.
    q, k (..., L, D), v (..., L, Dv) -> (..., L, Dv), one block of queries at a time, never an
    (L, L) tensor."""
    from .modern import sliding_window_attention as _sliding

    return _sliding(q, k, v, window)
