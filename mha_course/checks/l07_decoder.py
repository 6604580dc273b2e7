"""Lesson 07's language model: GPT-2's causal block (DecoderBlock), held to torch's pre-LN layer
with the same weights, the mistakes torch's layer written out with a flaw (:func:`with_flaw`); and
CharLM, held to its own parts, the positions from ``start``, no logit seeing a later token."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import masks, reference
from ..layernorm import LayerNorm
from ..lm import DecoderLM
from . import families
from ._core import call_candidate, exercise
from ._failure import ExerciseFailure
from ._table import Case, Out, Table, build_module, copy_weight_and_bias, require_tensor

_TORCH_LAYERS = (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)
LAYERS = {f"torch's nn.{layer.__name__}": layer for layer in _TORCH_LAYERS}


def causal(L: int, device=None) -> torch.Tensor:
    return masks.causal_mask(L, L, device)


# ---------------------------------------------------------------- the references (notebooks)


class DecoderBlock(nn.Module):
    """GPT-2's block: x + attention(norm1(x)) over the causal mask, then + FFN(norm2(·)) with
    GELU. ``mha_class``, ``norm_class`` build it from other parts (the learner's)."""

    def __init__(self, d_model, nhead, dim_feedforward, *, mha_class=None, norm_class=None):
        super().__init__()
        self.self_attn = (mha_class or reference.MultiHeadAttention)(d_model, nhead)
        self.norm1, self.norm2 = ((norm_class or LayerNorm)(d_model) for _ in range(2))
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.linear2 = nn.Linear(dim_feedforward, d_model)

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.self_attn(h, h, h, attn_mask=causal(x.size(-2), x.device))[0]
        return x + self.linear2(F.gelu(self.linear1(self.norm2(x))))


class CharLM(nn.Module):
    """Token and position embeddings, ``num_layers`` blocks, a final norm, a head tied to the
    token embedding: ``forward(ids (B, T), start=0)`` -> logits (B, T, vocab_size), the tokens at
    positions start .. start + T - 1. ``block_class``, ``norm_class``: the learner's parts."""

    def __init__(
        self,
        vocab_size,
        d_model,
        nhead,
        num_layers,
        dim_feedforward,
        max_len,
        *,
        block_class=None,
        norm_class=None,
    ):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(max_len, d_model)
        block = block_class or DecoderBlock
        blocks = (block(d_model, nhead, dim_feedforward) for _ in range(num_layers))
        self.blocks = nn.ModuleList(blocks)
        self.norm = (norm_class or LayerNorm)(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.token_embedding.weight

    def forward(self, ids, start=0):
        positions = torch.arange(start, start + ids.size(1), device=ids.device)
        x = self.token_embedding(ids) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


# ---------------------------------------------------------------- torch's layers, taken apart


def torch_layer(kind: type[nn.Module], sizes, seed: int, activation: str, **settings):
    """torch's layer in float64, dropout 0, batch first, every parameter random (norms too)."""
    torch.manual_seed(seed)  # the checker runs in a random stream of its own
    settings.update(dropout=0.0, batch_first=True, dtype=torch.float64, activation=activation)
    layer = kind(*sizes[:3], **settings)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if name.endswith("bias") or name.startswith("norm"):
                p.add_(0.2 * torch.randn_like(p))
    return layer


def with_flaw(src, x, memory=None, memory_mask=None, flaw: str = ""):
    """torch's encoder (pre-LN) or decoder layer (post-LN, reading ``memory``) with ``flaw``."""
    pre = src.norm_first != (flaw == "the norms in the other place")
    order = {"norm1 twice": "113", "norm1 and norm2 swapped": "213"}.get(flaw, "123")
    norms = [getattr(src, f"norm{i}", None) for i in order]
    other = {F.gelu: F.relu, F.relu: F.gelu}[src.activation]
    act = {"the other activation": other, "no activation": lambda t: t}.get(flaw, src.activation)
    self_mask = None if flaw == "no causal mask" else families.causal(x.size(1), x.size(1), flaw)
    kv, cross_mask = {  # kv None: the decoder's own
        "keys and values from the decoder": (None, self_mask),
        "keys and values from the decoder (no mask)": (None, None),
        "memory mask forgotten": (memory, None),
    }.get(flaw, (memory, memory_mask))
    inverted = {"causal mask inverted": "self_attn", "memory mask inverted": "multihead_attn"}

    def attend(name, query, kv, mask):  # torch's attention written out, the flaw of its mask
        a, inverts = getattr(src, name), "mask inverted, empty rows zeroed"
        packed = zip((query, kv, kv), a.in_proj_weight.chunk(3), a.in_proj_bias.chunk(3))
        q, k, v = (families.split_heads(F.linear(t, w, b), a.num_heads) for t, w, b in packed)
        out, _ = families.attention(q, k, v, mask, inverts if inverted.get(flaw) == name else "")
        return a.out_proj(families.merge_heads(out))

    def cross(t):
        q = x if flaw == "cross-attention reads x" else t
        return attend("multihead_attn", q, t if kv is None else kv, cross_mask)

    sublayers = {
        "self-attention": lambda t: attend("self_attn", t, t, self_mask),
        "cross-attention": cross,
        "FFN": lambda t: src.linear2(act(src.linear1(t))),
    }
    order = list(sublayers) if memory is not None else ["self-attention", "FFN"]
    if flaw == "cross-attention first":
        order[:2] = order[1::-1]
    h = before = x  # the residual stream, and the input of the sub-layer before
    for norm, name in zip(norms, order):
        read = before if name == "FFN" and flaw == "FFN reads the input of the one before" else h
        if pre and flaw == "the norm on the residual path":
            h = read = norm(read)
        elif pre and not (name == "FFN" and flaw == "FFN input not normalised"):
            read = norm(read)
        out = sublayers[name](read) + (0 if flaw == f"no {name} residual" else h)
        before, h = h, out if pre else norm(out)
    return h


TEXTS = {
    "no causal mask": "there is no causal mask: each token sees the tokens after it too, the very "
    "token it has to predict among them.",
    "causal mask inverted": "the causal mask is inverted: True means 'may attend' (as in your "
    "MultiHeadAttention), on and below the diagonal.",
    "the norms in the other place": "the LayerNorms sit in the other place: GPT-2's block is "
    "pre-LN (a sub-layer normalises its input, adds its output to x), the original decoder layer "
    "post-LN (a sub-layer adds its output to its input, then normalises).",
    "the norm on the residual path": "the LayerNorm's output replaces x on the residual path; "
    "pre-LN normalises only what goes into the sub-layer.",
    "no self-attention residual": "the residual around the self-attention is missing.",
    "no FFN residual": "the residual around the feed-forward network is missing.",
    "FFN reads the input of the one before": "the feed-forward network reads what the sub-layer "
    "before it read, not that sub-layer's result after its residual add.",
    "FFN input not normalised": "the feed-forward network's input is not normalised first.",
    "norm1 twice": "you used norm1 twice: each sub-layer has its own LayerNorm, in order.",
    "norm1 and norm2 swapped": "norm1 and norm2 are swapped: norm1 goes with the self-attention.",
    "the other activation": "the activation is the other one: GPT-2's block uses GELU, the "
    "original decoder layer (as torch's default) ReLU.",
    "no activation": "the feed-forward network has no activation between its two Linears.",
}
_NAN = (
    "NaN: some query may attend to no key at all (a softmax over a row of -inf). Is the causal "
    "mask inverted, or strictly below the diagonal? A token sees itself too."
)
_PARTS = (  # the learner's parts: a block's, a decoder layer's
    "self_attn, norm1, norm2, linear1, linear2",
    "self_attn, multihead_attn, linear1, linear2, norm1, norm2, norm3",
)
_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "out_proj")


def _part(module, name: str, case: Case, parts: str):
    alias = "cross_attn" if name == "multihead_attn" else name  # a name the learner may give it
    found = getattr(module, name, getattr(module, alias, None))
    if found is None:
        raise ExerciseFailure(
            f"Case {case.name!r}: your {type(module).__name__} has no attribute `{name}`. The "
            f"exercise names its parts {parts}; each attention has q_proj, k_proj, v_proj, "
            "out_proj."
        )
    return found


def _load(module, source: nn.Module, case: Case) -> dict:
    """torch's ``source`` copied into the learner's parts, by name (in_proj cut in three)."""
    d, ff = source.linear1.in_features, source.linear1.out_features
    made = {
        "linear1": f"a Linear d_model → dim_feedforward ({d} → {ff})",
        "linear2": f"a Linear dim_feedforward → d_model ({ff} → {d})",
        "attn": f"a Linear d_model → d_model ({d} → {d}), as in your MultiHeadAttention",
    }
    parts, found = _PARTS[isinstance(source, nn.TransformerDecoderLayer)], {}
    for name in parts.split(", "):
        part = found[name] = _part(module, name, case, parts)
        src = getattr(source, name)
        if "attn" not in name:
            what = made.get(name, f"a LayerNorm of d_model = {d} features")
            copy_weight_and_bias(part, src.weight, src.bias, case.name, f"self.{name}", what)
            continue
        if not all(hasattr(part, p) for p in _PROJECTIONS):
            raise ExerciseFailure(
                f"Case {case.name!r}: self.{name} ({type(part).__name__}) has no q_proj, k_proj, "
                "v_proj, out_proj: build it with your MultiHeadAttention of lesson 02."
            )
        weights = [*src.in_proj_weight.chunk(3), src.out_proj.weight]
        biases = [*src.in_proj_bias.chunk(3), src.out_proj.bias]
        for p, w, b in zip(_PROJECTIONS, weights, biases):
            where = f"self.{name}.{p}"
            copy_weight_and_bias(getattr(part, p), w, b, case.name, where, made["attn"])
    return found


def call_layer(candidate, case: Case, table: Table):
    """The learner's layer, built, loaded with torch's weights, called on the case (eval mode)."""
    source, *inputs = case.args
    layer = build_module(candidate, case, case.extra["sizes"]).eval()
    cross = _load(layer, source, case).get("multihead_attn")
    queries = []

    def record(module, args, kwargs):  # the length of the queries the cross-attention is given
        queries.append(getattr(args[0] if args else kwargs.get("query"), "shape", (0, 0))[-2])

    def run():
        with torch.no_grad():
            clones = (t.clone() for t in inputs)
            return call_candidate(layer, case.name, *clones, crash_hint=table.crash, **case.kwargs)

    if cross is not None:  # the layer is the case's own: the hook goes with it
        cross.register_forward_pre_hook(record, with_kwargs=True)
    try:
        got = run()
    except ExerciseFailure as crash:
        T, S = inputs[0].size(1), inputs[-1].size(1)
        if S == T or S not in queries:
            raise
        raise crash.with_cause(
            f"the cross-attention's roles are swapped: its queries are the encoder's {S} tokens; "
            f"they come from the decoder's {T} (one output per target token), its keys and "
            "values from memory."
        ) from crash.raised
    if isinstance(got, tuple):
        raise ExerciseFailure(
            f"Case {case.name!r}: your {type(layer).__name__}'s forward returned a tuple of "
            f"{len(got)}; it returns its output alone.\nLikely cause: your attention returns a "
            "pair (output, weights): only the output is added to x."
        )
    if case.extra.get("dropout") and not torch.equal(got, run()):
        raise ExerciseFailure(
            f"Case {case.name!r}: two calls on the same inputs gave different outputs in eval "
            "mode.\nLikely cause: dropout is still on: an nn.Dropout module is switched off by "
            "eval mode, a dropout function is not."
        )
    return got


def layer_table(cases, reference, flaws, texts, fallback: str, crash: str) -> Table:
    """A layer's table: :func:`call_layer`, torch's ``reference``, :func:`with_flaw`'s mistakes."""
    keeps, mistakes = "the output has the shape of x.", families.flawed(with_flaw, flaws, **texts)
    nan = lambda got, case: _NAN if torch.isnan(got).any() else None  # noqa: E731
    outputs = [Out("outputs", shape_hint=keeps, cause=nan, fallback=fallback)]
    return Table(cases, reference, mistakes, outputs, call_layer, crash, atol=1e-4, rtol=1e-3)


# ---------------------------------------------------------------- DecoderBlock


_BLOCKS = [  # name, (d_model, nhead, dim_feedforward), x's shape
    ("d_model 16, 4 heads, dim_feedforward 32; x (2, 5, 16)", (16, 4, 32), (2, 5, 16)),
    ("d_model 12, 3 heads, dim_feedforward 24; x (1, 7, 12)", (12, 3, 24), (1, 7, 12)),
    ("one token per sequence (a generation step): x (3, 1, 8)", (8, 2, 16), (3, 1, 8)),
    ("d_model 8, 1 head, dim_feedforward 16; x (2, 9, 8)", (8, 1, 16), (2, 9, 8)),
]
_BLOCK_FLAWS = [*TEXTS, "causal upper triangle", "causal without the diagonal"]
_PRE_LN = (
    "GPT-2's block is pre-LN: each sub-layer normalises its input (norm1 before the attention, "
    "norm2 before the feed-forward network) and adds its output to x."
)
_BLOCK_CRASH = "forward takes x alone: the block builds its causal mask itself, from x's length."
_BLOCK_TODO = (
    "Replace `raise NotImplementedError` in DecoderBlock: its five parts in __init__; in "
    "forward, the causal mask, then the two pre-LN sub-layers."
)


def _block_cases():
    g = torch.Generator().manual_seed(70)
    for seed, (name, sizes, shape) in enumerate(_BLOCKS):
        layer = torch_layer(nn.TransformerEncoderLayer, sizes, seed, "gelu", norm_first=True)
        yield Case(name, (layer, torch.randn(*shape, generator=g)), extra={"sizes": sizes})


def _torch_block(layer, x):
    return layer(x, src_mask=masks.other_convention(causal(x.size(1))))


_TABLE = layer_table(_block_cases, _torch_block, _BLOCK_FLAWS, TEXTS, _PRE_LN, _BLOCK_CRASH)
check_decoder_block = exercise(
    "DecoderBlock", "07", reference=DecoderBlock, todo=_BLOCK_TODO, own_work=LAYERS, table=_TABLE
)

# ---------------------------------------------------------------- CharLM

_LM_TODO = (
    "Replace `raise NotImplementedError` in CharLM: the embeddings, the blocks, the final norm "
    "and the tied head in __init__; in forward, embed, run the blocks, normalise, score."
)
_LM_OWN = {"the course's DecoderLM (mha_course)": DecoderLM}
_LM_ARGS = ("vocab_size", "d_model", "nhead", "num_layers", "dim_feedforward", "max_len")
_LM_PARTS = "token_embedding, position_embedding, blocks, norm, head"
_LM_STEPS = (
    "the token embeddings of ids (B, T) plus the position embeddings of start .. start + T - 1, "
    "the blocks in order, the final norm, the head."
)
_LM_SHAPE = "one score per token of the vocabulary at every position: (B, T, vocab_size)."
_LM_CASES = [  # name, sizes (as _LM_ARGS), ids' shape, start
    ("vocab 11, d_model 16, 2 heads, 2 layers; ids (2, 6)", (11, 16, 2, 2, 32, 12), (2, 6), 0),
    ("ids (2, 4) from start 5: positions 5..8 of a text", (11, 16, 2, 2, 32, 12), (2, 4), 5),
    ("one new token, ids (3, 1), start 9 (a generation step)", (7, 8, 2, 3, 16, 12), (3, 1), 9),
    ("1 layer, vocab 5, ids (1, 10) as long as max_len", (5, 8, 1, 1, 16, 10), (1, 10), 0),
]


def _lm(model, blocks, ids, start: int, flaw: str = ""):
    """The logits the model's own parts give, with ``flaw`` switched on."""
    T = ids.size(1)
    positions = {"positions restart at 0": torch.arange(T), "positions indexed by the ids": ids}
    x0 = model.token_embedding(ids)
    if flaw != "no position embedding":
        x0 = x0 + model.position_embedding(positions.get(flaw, torch.arange(start, start + T)))
    x = x0
    for block in blocks[::-1] if flaw == "blocks in reverse order" else blocks:
        x = block(x0 if flaw == "every block on the embeddings" else x)
    logits = model.head(x if flaw == "no final norm" else model.norm(x))
    return logits.softmax(-1) if flaw == "probabilities" else logits


_LM_TEXTS = {
    "positions restart at 0": "your positions start at 0 whatever `start` is: the T tokens are "
    "at start .. start + T - 1. Fed one token at a time, such a model sees each at position 0.",
    "no position embedding": "the position embedding is missing: without it, attention cannot "
    "tell the order of the tokens.",
    "positions indexed by the ids": "you looked up the position embedding with the token ids; "
    "it is indexed by the positions.",
    "no final norm": "the final LayerNorm is missing: the head reads the last block's output "
    "normalised (no pre-LN block normalises its own output).",
    "blocks in reverse order": "the blocks run in reverse order; block 0 comes first.",
    "every block on the embeddings": "your logits are the last block applied to the "
    "embeddings: each block runs on the previous block's output.",
    "probabilities": "you returned probabilities (a softmax); the model gives the logits, the "
    "head's output (the loss and the sampling take the softmax themselves).",
}
_LM_MISTAKES = families.flawed(_lm, _LM_TEXTS, **_LM_TEXTS)


def _blocks(model, case: Case) -> list[nn.Module]:
    """The blocks, once the parts are checked: two embeddings, N distinct blocks, a tied head."""
    sizes = case.extra["sizes"]
    d, N = sizes["d_model"], sizes["num_layers"]
    for name, what in (("position", "max_len"), ("token", "vocab_size")):  # found: the token one
        found = getattr(_part(model, f"{name}_embedding", case, _LM_PARTS), "weight", None)
        if not isinstance(found, torch.Tensor) or tuple(found.shape) != (sizes[what], d):
            made = "no weight" if found is None else f"{found.size(0)} rows of {found.size(-1)}"
            raise ExerciseFailure(
                f"Case {case.name!r}: self.{name}_embedding has {made}, expected an nn.Embedding "
                f"({what}, d_model) = ({sizes[what]}, {d}): one learned vector per row."
            )
    blocks, problem = _part(model, "blocks", case, _LM_PARTS), None
    if isinstance(blocks, (list, tuple)):
        problem = f"a Python {type(blocks).__name__}: PyTorch does not see the blocks' weights"
    elif not isinstance(blocks, (nn.ModuleList, nn.Sequential)) or len(blocks) != N:
        problem = f"not a list of num_layers = {N} blocks"
    elif len({id(b) for b in blocks}) != N:
        problem = "one and the same block several times: each layer is a block of its own"
    if problem:
        raise ExerciseFailure(
            f"Case {case.name!r}: self.blocks is {problem}.\nLikely cause: the blocks go in an "
            "nn.ModuleList, which registers them, one new DecoderBlock per layer."
        )
    _part(model, "norm", case, _LM_PARTS)
    if getattr(_part(model, "head", case, _LM_PARTS), "weight", None) is not found:
        raise ExerciseFailure(
            f"Case {case.name!r}: the output head is not tied to the token embedding: the "
            "head's weight is the token embedding's weight itself, one Parameter that reads each "
            "token in and scores each token out (GPT-2 does this)."
        )
    g = torch.Generator().manual_seed(N)
    with torch.no_grad():  # random parts, blocks unlike each other: a skipped part shows
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return list(blocks)


def _lm_cases():
    g = torch.Generator().manual_seed(71)
    for name, sizes, shape, start in _LM_CASES:
        ids = torch.randint(0, sizes[0], shape, generator=g)
        yield Case(name, (ids, start), extra={"sizes": dict(zip(_LM_ARGS, sizes))})


def _logits(model, case: Case, ids):
    start = {"start": case.args[1]} if case.args[1] else {}
    with torch.no_grad():
        return call_candidate(model, case.name, ids.clone(), crash_hint=_LM_STEPS, **start)


@exercise("CharLM", "07", reference=CharLM, todo=_LM_TODO, points=2, own_work=_LM_OWN)
def check_char_lm(candidate) -> int:
    """Check ``candidate(vocab_size, d_model, nhead, num_layers, dim_feedforward, max_len)``'s
    logits (B, T, vocab_size) against its own parts, none depending on a later token."""
    for case in _lm_cases():
        try:  # with the lesson's keywords, torch's names
            model = build_module(candidate, case, (), **case.extra["sizes"]).eval()
        except ExerciseFailure as failure:
            if "keyword argument" not in str(failure.raised):
                raise
            raise failure.with_cause(
                "CharLM's arguments have torch's names, as in nn.TransformerDecoderLayer and the "
                f"course's DecoderLM: {', '.join(_LM_ARGS)}; the lesson passes them by name."
            ) from failure.raised
        blocks, (ids, start) = _blocks(model, case), case.args
        got, args = _logits(model, case, ids), (model, blocks, ids, start)
        with torch.no_grad():
            hints = {"shape_hint": _LM_SHAPE, "fallback": _LM_STEPS}
            require_tensor(case.name, "logits", got, _lm(*args), _LM_MISTAKES, args, **hints)
        changed = ids.clone()
        changed[:, -1] = (changed[:, -1] + 1) % case.extra["sizes"]["vocab_size"]
        if not torch.allclose(_logits(model, case, changed)[:, :-1], got[:, :-1], 1e-4, 1e-5):
            raise ExerciseFailure(
                f"Case {case.name!r}: changing only the last token changed the logits at earlier "
                "positions: your model looks ahead.\nLikely cause: the blocks attend to later "
                "tokens. Build the model from your DecoderBlock, which applies the causal mask."
            )
    return len(_LM_CASES)
