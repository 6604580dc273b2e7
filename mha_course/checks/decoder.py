"""Checkers for lesson 07's language model: the causal block and the model around it.

``DecoderBlock`` is GPT-2's block: pre-LN, causal self-attention, a GELU feed-forward network.
It is ``torch.nn.TransformerEncoderLayer(norm_first=True, activation="gelu")`` run with the
causal mask, so the checker copies such a torch layer's weights into the learner's block by name
(``self_attn.q_proj`` ... ``out_proj``, ``linear1``, ``linear2``, ``norm1``, ``norm2``) and compares.

``CharLM`` is checked with its own parts: whatever blocks it holds, the logits must be
head(norm(blocks(token embedding + position embedding))), with the positions starting at
``start``, the head tied to the token embedding, and no logit depending on a later token.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from .. import lm
from ..attention import scaled_dot_product_attention
from ._core import Mistake, call_candidate, checker, compare, require_shape
from ._failure import ExerciseFailure
from ._steps import build_module, copy_weight_and_bias, seeded_randn

__all__ = ["check_decoder_block", "check_char_lm"]

_ATOL, _RTOL = 1e-4, 1e-3  # the candidate runs in float32, torch in float64

# What lesson 07 asks the learner to write themselves.
BLOCK_ROUTINES = {
    "torch's nn.TransformerEncoderLayer": nn.TransformerEncoderLayer,
    "torch's nn.TransformerDecoderLayer": nn.TransformerDecoderLayer,
}
LM_ROUTINES = {"the course's DecoderLM (mha_course)": lm.DecoderLM}


def causal(L: int, S: int | None = None) -> torch.Tensor:
    """Bool (L, S), True where a query (the last L of S positions) may attend to a key."""
    S = L if S is None else S
    return torch.ones(L, S, dtype=torch.bool).tril(S - L)


# ---------------------------------------------------------------- torch's attention, taken apart


def torch_attend(attn: nn.MultiheadAttention, query, key, value, mask):
    """torch's multi-head attention written out, with the exercise's mask (True = may attend):
    what each classic mistake puts together wrongly. Returns the output (B, L, E)."""
    q, k, v = attn.in_proj_weight.chunk(3)
    bq, bk, bv = attn.in_proj_bias.chunk(3)
    heads = attn.num_heads
    Q, K, V = (
        rearrange(F.linear(x, w, b), "b l (h d) -> b h l d", h=heads)
        for x, w, b in ((query, q, bq), (key, k, bk), (value, v, bv))
    )
    out, _ = scaled_dot_product_attention(Q, K, V, attn_mask=mask)
    return attn.out_proj(rearrange(out, "b h l d -> b l (h d)"))


def part_of(owner, name: str, case: str, what: str, parts: str):
    """``owner.name``, or a failure that lists the parts the exercise names."""
    found = getattr(owner, name, None)
    if found is None:
        raise ExerciseFailure(
            f"Case {case!r}: your {what} has no attribute `{name}`. The exercise names its parts "
            f"{parts}; each attention has q_proj, k_proj, v_proj, out_proj."
        )
    return found


def load_attention(
    attn, source: nn.MultiheadAttention, case: str, where: str, made: str = ""
) -> None:
    """Copy torch's W^Q, W^K, W^V (rows of in_proj_weight) and W^O into the learner's attention
    ``attn`` (the lesson-02 class: q_proj, k_proj, v_proj, out_proj), reached as ``where``."""
    E = source.embed_dim
    linear = f"nn.Linear(d_model, d_model) = nn.Linear({E}, {E})"
    with torch.no_grad():
        if all(hasattr(attn, n) for n in ("q_proj", "k_proj", "v_proj", "out_proj")):
            for name, w, b in zip(
                ("q_proj", "k_proj", "v_proj"),
                source.in_proj_weight.chunk(3),
                source.in_proj_bias.chunk(3),
            ):
                copy_weight_and_bias(
                    getattr(attn, name), w, b, case, f"{where}.{name}", linear, who=name
                )
        elif isinstance(getattr(attn, "in_proj_weight", None), torch.Tensor):  # torch-style MHA
            attn.in_proj_weight.copy_(source.in_proj_weight)
            attn.in_proj_bias.copy_(source.in_proj_bias)
        else:
            raise ExerciseFailure(
                f"Case {case!r}: {where} ({type(attn).__name__}) has no q_proj, k_proj, v_proj. "
                f"Build it with your MultiHeadAttention from lesson 02{made}."
            )
        copy_weight_and_bias(
            attn.out_proj,
            source.out_proj.weight,
            source.out_proj.bias,
            case,
            f"{where}.out_proj",
            linear,
            who="out_proj",
        )


def load_part(owner, name: str, source: nn.Module, case: str, what: str, parts: str, made: str):
    """Copy a torch Linear's or LayerNorm's weight and bias into ``owner.name``."""
    found = part_of(owner, name, case, what, parts)
    copy_weight_and_bias(found, source.weight, source.bias, case, f"self.{name}", made, who=name)


def randomise_(module: nn.Module, seed: int) -> nn.Module:
    """torch's layer with random biases and LayerNorms too (torch starts them at 0 and 1), so a
    dropped bias or two swapped norms show."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.2, generator=g)
            elif name.startswith("norm") and name.endswith("weight"):
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return module


def nan_cause(got: torch.Tensor) -> str | None:
    if torch.isnan(got).any():
        return (
            "NaN: some query may attend to no key at all, so its softmax is over a row of -inf. "
            "Is the causal mask inverted, or strictly below the diagonal? A token attends to "
            "itself and to the tokens before it: torch.ones(L, L, dtype=torch.bool).tril()."
        )
    return None


def require_module_output(case: str, got, shape, what: str) -> None:
    if isinstance(got, tuple):
        raise ExerciseFailure(
            f"Case {case!r}: your {what}'s forward returned a tuple of {len(got)}; return only "
            f"its output, a tensor {tuple(shape)}. (Your attention returns (output, weights): "
            f"keep the output, e.g. attended, _ = self.self_attn(...).)"
        )
    require_shape(case, "the output", got, shape, f"the {what} keeps the shape of its input.")


# ---------------------------------------------------------------- DecoderBlock

_BLOCK_PARTS = "self_attn, norm1, norm2, linear1, linear2"
_BLOCK = (
    "h = norm1(x); x = x + self_attn(h, h, h, causal mask)[0]; "
    "then x + linear2(gelu(linear1(norm2(x))))"
)


class _BlockParts:
    """torch's pre-LN layer in pieces, so that each classic mistake can reassemble it wrongly."""

    def __init__(self, layer: nn.TransformerEncoderLayer):
        self.layer = layer

    def attend(self, h, mask):
        return torch_attend(self.layer.self_attn, h, h, h, mask)

    def ffn(self, z, activation=F.gelu):
        return self.layer.linear2(activation(self.layer.linear1(z)))

    def n1(self, x):
        return self.layer.norm1(x)

    def n2(self, x):
        return self.layer.norm2(x)


def _pre_ln(p: _BlockParts, x, mask="causal", activation=F.gelu, n1=None, n2=None):
    """The right block, with one piece swapped when asked."""
    L = x.size(1)
    mask = causal(L) if mask == "causal" else mask
    h = (n1 or p.n1)(x)
    x = x + p.attend(h, mask)
    return x + p.ffn((n2 or p.n2)(x), activation)


def _block_mistakes(layer: nn.TransformerEncoderLayer) -> list[Mistake]:
    p = _BlockParts(layer)

    def post_ln(x):
        z = p.n1(x + p.attend(x, causal(x.size(1))))
        return p.n2(z + p.ffn(z))

    def norm_on_the_path(x):
        h = p.n1(x)
        h = h + p.attend(h, causal(x.size(1)))
        g = p.n2(h)
        return g + p.ffn(g)

    def no_attention_residual(x):
        a = p.attend(p.n1(x), causal(x.size(1)))
        return a + p.ffn(p.n2(a))

    def no_ffn_residual(x):
        a = x + p.attend(p.n1(x), causal(x.size(1)))
        return p.ffn(p.n2(a))

    def ffn_reads_input(x):
        a = x + p.attend(p.n1(x), causal(x.size(1)))
        return a + p.ffn(p.n2(x))

    def ffn_not_normalised(x):
        a = x + p.attend(p.n1(x), causal(x.size(1)))
        return a + p.ffn(a)

    def length(x):
        return x.size(1)

    return [
        Mistake(
            "no causal mask",
            lambda x: _pre_ln(p, x, mask=None),
            "there is no causal mask: every token attends to the tokens after it too, so the "
            "model could read the very token it has to predict. Build the mask from x's length, "
            "True on and below the diagonal, and pass it as attn_mask.",
        ),
        Mistake(
            "mask inverted",
            lambda x: _pre_ln(p, x, mask=~causal(length(x))),
            "the causal mask is inverted: here True means 'may attend' (as in your "
            "MultiHeadAttention), so it is True on and below the diagonal: .tril(), not .triu(1).",
        ),
        Mistake(
            "future instead of past",
            lambda x: _pre_ln(p, x, mask=causal(length(x)).T.contiguous()),
            "your mask lets each token see itself and the tokens *after* it (.triu()); a causal "
            "mask lets it see itself and the ones *before* it: True on and below the diagonal, "
            ".tril().",
        ),
        Mistake(
            "strictly below the diagonal",
            lambda x: _pre_ln(p, x, mask=torch.ones(length(x), length(x)).tril(-1).bool()),
            "your mask hides the diagonal: a token must attend to itself too (token 0 has nothing "
            "else to attend to). True on and below the diagonal: .tril(), not .tril(-1).",
        ),
        Mistake(
            "post-LN",
            post_ln,
            "you wrote the post-LN block of lesson 04 (add, then normalise). GPT-2's block is "
            "pre-LN: normalise each sub-layer's input and add its output to x unchanged: "
            + _BLOCK
            + ".",
        ),
        Mistake(
            "the norm on the residual path",
            norm_on_the_path,
            "the LayerNorm's output replaces x on the residual path (x = norm1(x), then "
            "x + attention(x)). Pre-LN keeps x itself on the path and normalises only what goes "
            "into the sub-layer: x = x + self_attn(norm1(x), ...)[0].",
        ),
        Mistake(
            "no attention residual",
            no_attention_residual,
            "the residual around the attention is missing: x = x + attention(norm1(x)), not "
            "x = attention(norm1(x)).",
        ),
        Mistake(
            "no FFN residual",
            no_ffn_residual,
            "the residual around the feed-forward network is missing: return "
            "x + FFN(norm2(x)), not FFN(norm2(x)).",
        ),
        Mistake(
            "FFN reads the block's input",
            ffn_reads_input,
            "the feed-forward network reads norm2 of the block's input; it reads norm2 of x "
            "after the attention's residual add.",
        ),
        Mistake(
            "FFN input not normalised",
            ffn_not_normalised,
            "the feed-forward network's input is not normalised: x + FFN(norm2(x)).",
        ),
        Mistake(
            "norm1 twice",
            lambda x: _pre_ln(p, x, n2=p.n1),
            "you used norm1 twice; each sub-layer has its own LayerNorm: norm1 before the "
            "attention, norm2 before the feed-forward network.",
        ),
        Mistake(
            "norms swapped",
            lambda x: _pre_ln(p, x, n1=p.n2, n2=p.n1),
            "norm1 and norm2 are swapped: norm1 goes before the attention, norm2 before the "
            "feed-forward network.",
        ),
        Mistake(
            "ReLU",
            lambda x: _pre_ln(p, x, activation=F.relu),
            "the activation is ReLU; GPT-2's block (and this exercise) uses GELU: F.gelu.",
        ),
        Mistake(
            "no activation",
            lambda x: _pre_ln(p, x, activation=lambda t: t),
            "the feed-forward network has no activation between its two Linears: "
            "linear2(gelu(linear1(...))).",
        ),
    ]


def torch_layer(
    kind: type[nn.Module], d_model: int, num_heads: int, d_ff: int, seed: int, **kwargs
):
    """torch's encoder or decoder layer (``kind``), float64, dropout 0, batch first, every parameter
    random; in train mode, which with dropout 0 is torch's plain path (no fused fast path)."""
    with torch.random.fork_rng(devices=[]):  # leave the learner's random stream alone
        torch.manual_seed(seed)
        layer = kind(
            d_model,
            num_heads,
            d_ff,
            dropout=0.0,
            batch_first=True,
            dtype=torch.float64,
            **kwargs,
        )
    return randomise_(layer, seed).train()


def _load_block(block, layer: nn.TransformerEncoderLayer, case: str) -> None:
    d_model, d_ff = layer.linear1.in_features, layer.linear1.out_features
    attn = part_of(block, "self_attn", case, "DecoderBlock", _BLOCK_PARTS)
    load_attention(
        attn,
        layer.self_attn,
        case,
        "self_attn",
        ": self.self_attn = MultiHeadAttention(d_model, num_heads)",
    )
    for name, made in (
        ("linear1", f"nn.Linear(d_model, d_ff) = nn.Linear({d_model}, {d_ff})"),
        ("linear2", f"nn.Linear(d_ff, d_model) = nn.Linear({d_ff}, {d_model})"),
        ("norm1", f"LayerNorm(d_model) = LayerNorm({d_model})"),
        ("norm2", f"LayerNorm(d_model) = LayerNorm({d_model})"),
    ):
        load_part(block, name, getattr(layer, name), case, "DecoderBlock", _BLOCK_PARTS, made)


def _block_cases():
    randn = seeded_randn(70)
    # (case, d_model, num_heads, d_ff, x)
    yield "d_model=16, 4 heads, d_ff=32; x (2, 5, 16)", 16, 4, 32, randn(2, 5, 16)
    yield "d_model=12, 3 heads, d_ff=24; one sequence x (1, 7, 12)", 12, 3, 24, randn(1, 7, 12)
    yield (
        "one token per sequence (a generation step): x (3, 1, 8), 2 heads",
        8,
        2,
        16,
        randn(3, 1, 8),
    )
    yield "d_model=8, 1 head, d_ff=16; x (2, 9, 8)", 8, 1, 16, randn(2, 9, 8)


@checker(
    "DecoderBlock",
    "Replace `raise NotImplementedError` in DecoderBlock: its five parts in __init__; in "
    "forward, the causal mask, then the two pre-LN sub-layers.",
    own_work=BLOCK_ROUTINES,
)
def check_decoder_block(candidate) -> int:
    """Check ``candidate(d_model, num_heads, d_ff)`` (a DecoderBlock class: parts ``self_attn``,
    ``norm1``, ``norm2``, ``linear1``, ``linear2``; ``forward(x)`` pre-LN with the causal mask and
    GELU) against ``torch.nn.TransformerEncoderLayer(norm_first=True, activation="gelu")`` run
    with the causal mask, with the same weights."""
    with torch.random.fork_rng(devices=[]):  # building the layers must not shift the learner's seed
        n = 0
        for seed, (case, d_model, num_heads, d_ff, x) in enumerate(_block_cases()):
            block = build_module(
                candidate, case, "DecoderBlock", (d_model, num_heads, d_ff), "check_decoder_block"
            )
            block.eval()
            layer = torch_layer(
                nn.TransformerEncoderLayer,
                d_model,
                num_heads,
                d_ff,
                seed,
                activation="gelu",
                norm_first=True,
            )
            _load_block(block, layer, case)
            L = x.size(1)
            with torch.no_grad():
                got = call_candidate(
                    block,
                    case,
                    x.clone(),
                    crash_hint="forward(x) takes only x: build the causal mask inside, from x's "
                    "length L = x.size(1).",
                )
                expected = layer(x.double(), src_mask=~causal(L))
            require_module_output(case, got, x.shape, "block")
            compare(
                case,
                "outputs",
                got,
                expected,
                atol=_ATOL,
                rtol=_RTOL,
                mistakes=_block_mistakes(layer),
                args=(x.double(),),
                cause=nan_cause(got),
                fallback_cause="compare your forward with the steps: " + _BLOCK + ".",
            )
            n += 1
        return n


# ---------------------------------------------------------------- CharLM

_LM_PARTS = "token_embedding, position_embedding, blocks, norm, head"
_TIE = "self.head.weight = self.token_embedding.weight"


def _embedding(model, name: str, rows: int, cols: int, case: str, what: str):
    found = part_of(model, name, case, "CharLM", _LM_PARTS)
    weight = getattr(found, "weight", None)
    if not isinstance(found, nn.Embedding) or weight is None:
        raise ExerciseFailure(
            f"Case {case!r}: self.{name} is a {type(found).__name__}; make it an "
            f"nn.Embedding({what}): one learned vector per row."
        )
    if tuple(weight.shape) != (rows, cols):
        raise ExerciseFailure(
            f"Case {case!r}: self.{name} has {weight.size(0)} rows of {weight.size(1)}, expected "
            f"nn.Embedding({what}) = nn.Embedding({rows}, {cols})."
        )
    return found


def _structure(model, V: int, d: int, N: int, max_len: int, case: str) -> list[nn.Module]:
    """The model's parts, checked: the two embeddings, N distinct blocks, a norm, a tied head."""
    tokens = _embedding(model, "token_embedding", V, d, case, "vocab_size, d_model")
    _embedding(model, "position_embedding", max_len, d, case, "max_len, d_model")
    blocks = part_of(model, "blocks", case, "CharLM", _LM_PARTS)
    if isinstance(blocks, (list, tuple)):
        raise ExerciseFailure(
            f"Case {case!r}: self.blocks is a Python {type(blocks).__name__}; wrap it in "
            f"nn.ModuleList, so that PyTorch sees the blocks' weights (model.parameters(), "
            f".to(device), .eval())."
        )
    blocks = list(blocks) if isinstance(blocks, (nn.ModuleList, nn.Sequential)) else None
    if blocks is None or len(blocks) != N:
        got = "not a list of blocks" if blocks is None else f"{len(blocks)} blocks"
        raise ExerciseFailure(
            f"Case {case!r}: self.blocks holds {got}, expected an nn.ModuleList of "
            f"num_layers = {N} DecoderBlock(d_model, num_heads, d_ff)."
        )
    if len({id(b) for b in blocks}) != N:
        raise ExerciseFailure(
            f"Case {case!r}: some of self.blocks are one and the same block ([block] * n repeats "
            f"one object): build a new DecoderBlock for each layer."
        )
    part_of(model, "norm", case, "CharLM", _LM_PARTS)
    head = part_of(model, "head", case, "CharLM", _LM_PARTS)
    if getattr(head, "weight", None) is not tokens.weight:
        raise ExerciseFailure(
            f"Case {case!r}: the output head is not tied to the token embedding. Tie them: "
            f"{_TIE}. One (vocab_size, d_model) matrix then reads each token in and scores each "
            f"token out (GPT-2 does this)."
        )
    return blocks


def _randomise_lm(model: nn.Module, blocks: list[nn.Module], seed: int) -> None:
    """Random embeddings, a random final norm, and blocks made different from one another, so
    that a missing part, a block skipped or the blocks' order shows in the logits."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for embedding in (model.token_embedding, model.position_embedding):
            embedding.weight.copy_(torch.randn(embedding.weight.shape, generator=g))
        for p in model.norm.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
        for block in blocks:
            for p in block.parameters():
                p.add_(0.2 * torch.randn(p.shape, generator=g, dtype=p.dtype))


def _lm_logits(model, blocks, ids, positions, *, norm=True, chain=True):
    """What the model should give, built from its own parts; the keywords make mistakes."""
    x0 = model.token_embedding(ids)
    if positions is not None:
        x0 = x0 + model.position_embedding(positions)
    x = x0
    for block in blocks:
        x = block(x if chain else x0)
    return model.head(model.norm(x) if norm else x)


def _lm_mistakes(model, blocks, ids, start: int) -> list[Mistake]:
    T = ids.size(1)
    right = torch.arange(start, start + T)
    restart = torch.arange(T)

    def run(positions, order=blocks, **kw):
        return lambda: _lm_logits(model, order, ids, positions, **kw)

    return [
        Mistake(
            "positions restart at 0",
            run(restart),
            f"your positions start at 0 whatever `start` is. ids[:, 0] is at position start "
            f"({start} here): the positions are start, start + 1, ..., start + T - 1. Fed one new "
            f"token at a time, a model with positions from 0 sees every token at position 0.",
        ),
        Mistake(
            "no position embedding",
            run(None),
            "the position embedding is missing: x = token_embedding(ids) + "
            "position_embedding(positions). Without it, attention cannot tell the order of the "
            "tokens.",
        ),
        Mistake(
            "positions indexed by the ids",
            lambda: _positions_by_ids(model, blocks, ids),
            "you looked up the position embedding with the token ids; it is indexed by the "
            "positions, torch.arange(start, start + T).",
        ),
        Mistake(
            "no final norm",
            run(right, norm=False),
            "the final LayerNorm is missing: logits = head(norm(x)) after the last block (pre-LN "
            "models end with one, since no block normalises its output).",
        ),
        Mistake(
            "blocks in reverse order",
            run(right, order=blocks[::-1]),
            "the blocks run in reverse order; block 0 comes first.",
        ),
        Mistake(
            "every block on the embeddings",
            run(right, chain=False),
            "your logits are the last block applied to the embeddings: every block runs, in "
            "order, each on the previous block's output: for block in self.blocks: x = block(x).",
        ),
        Mistake(
            "probabilities",
            lambda: torch.softmax(_lm_logits(model, blocks, ids, right), dim=-1),
            "you returned probabilities (a softmax): return the logits, the head's output. The "
            "loss (F.cross_entropy) and the sampling apply the softmax themselves.",
        ),
    ]


def _positions_by_ids(model, blocks, ids):
    """The position embedding looked up with the token ids (it raises where an id is beyond
    max_len: then this mistake cannot be the cause)."""
    x = model.token_embedding(ids) + model.position_embedding(ids)
    for block in blocks:
        x = block(x)
    return model.head(model.norm(x))


def _lm_cases():
    g = torch.Generator().manual_seed(71)
    # (case, vocab_size, d_model, num_heads, d_ff, num_layers, max_len, ids, start)
    # fmt: off
    yield ("vocab 11, d_model 16, 2 heads, 2 layers, max_len 12; ids (2, 6)",
           11, 16, 2, 32, 2, 12, torch.randint(0, 11, (2, 6), generator=g), 0)
    yield ("ids (2, 4) with start=5: the tokens at positions 5..8 of a longer text",
           11, 16, 2, 32, 2, 12, torch.randint(0, 11, (2, 4), generator=g), 5)
    yield ("one new token per sequence, ids (3, 1), start=9 (a step of generation)",
           7, 8, 2, 16, 3, 12, torch.randint(0, 7, (3, 1), generator=g), 9)
    yield ("1 layer, vocab 5, one sequence as long as max_len: ids (1, 10)",
           5, 8, 1, 16, 1, 10, torch.randint(0, 5, (1, 10), generator=g), 0)
    # fmt: on


def _call_lm(model, case: str, ids: torch.Tensor, start: int):
    hint = (
        "forward(ids, start=0) looks up the token embedding of ids (B, T) and the position "
        "embedding of torch.arange(start, start + T), adds them, runs the blocks, the final norm "
        "and the head."
    )
    if start == 0:
        return call_candidate(model, case, ids.clone(), crash_hint=hint)
    return call_candidate(model, case, ids.clone(), start=start, crash_hint=hint)


def _require_causal(model, case: str, ids: torch.Tensor, start: int, got) -> None:
    """Changing the last token must leave every earlier position's logits as they were."""
    T = ids.size(1)
    if T < 2:
        return
    changed = ids.clone()
    changed[:, -1] = (changed[:, -1] + 1) % model.token_embedding.weight.size(0)
    with torch.no_grad():
        again = _call_lm(model, case, changed, start)
    if not torch.allclose(again[:, :-1], got[:, :-1], atol=1e-5, rtol=1e-4):
        raise ExerciseFailure(
            f"Case {case!r}: changing only the last token changed the logits at earlier "
            f"positions: your model looks ahead.\nLikely cause: the blocks attend to later "
            f"tokens. Build the model from your DecoderBlock, which applies the causal mask."
        )


@checker(
    "CharLM",
    "Replace `raise NotImplementedError` in CharLM: the embeddings, the blocks, the final norm "
    "and the tied head in __init__; in forward, embed the tokens and their positions, run the "
    "blocks, normalise, score.",
    own_work=LM_ROUTINES,
)
def check_char_lm(candidate) -> int:
    """Check ``candidate(vocab_size, d_model, num_heads, d_ff, num_layers, max_len)`` (a CharLM
    class: ``token_embedding``, ``position_embedding``, ``blocks``, ``norm``, ``head`` tied to the
    token embedding; ``forward(ids, start=0)`` -> logits (B, T, vocab_size)) with its own parts."""
    with torch.random.fork_rng(devices=[]):
        n = 0
        for seed, (case, V, d, h, ff, N, max_len, ids, start) in enumerate(_lm_cases()):
            model = build_module(
                candidate, case, "CharLM", (V, d, h, ff, N, max_len), "check_char_lm"
            )
            blocks = _structure(model, V, d, N, max_len, case)
            _randomise_lm(model, blocks, seed)
            model.eval()
            with torch.no_grad():
                got = _call_lm(model, case, ids, start)
                positions = torch.arange(start, start + ids.size(1))
                expected = _lm_logits(model, blocks, ids, positions)
                require_shape(
                    case,
                    "the logits",
                    got,
                    (*ids.shape, V),
                    "one score per token of the vocabulary at every position: (B, T, vocab_size), "
                    "the head's output.",
                )
                compare(
                    case,
                    "logits",
                    got,
                    expected,
                    mistakes=_lm_mistakes(model, blocks, ids, start),
                    fallback_cause="logits = head(norm(blocks(token_embedding(ids) + "
                    "position_embedding(positions)))), with positions = torch.arange(start, "
                    "start + T) and the blocks run in order.",
                )
            _require_causal(model, case, ids, start, got)
            n += 1
        return n
