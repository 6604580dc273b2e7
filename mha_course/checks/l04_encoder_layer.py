"""Lesson 04's encoder layer, post-LN or pre-LN (``norm_first``), given the weights of a
torch.nn.TransformerEncoderLayer and held to it, its masks (True = may attend) turned round."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from .. import encoder, layernorm, masks, reference
from . import families
from ._core import call_candidate, exercise
from ._failure import ExerciseFailure
from ._table import Case, Out, Table, build_module, copy_weight_and_bias, run, seeded_randn
from .l01_attention import accepts


class EncoderLayer(nn.Module):
    """The reference: lesson 04's layer (ReLU, batch first), post-LN, or pre-LN with ``norm_first``;
    its mask (True = may attend) goes to ``self_attn``. ``mha_class``, ``norm_class`` and
    ``activation`` (keyword-only) build it of other parts: the learner's MHA, LayerNorm, GELU."""

    def __init__(
        self,
        d_model,
        nhead,
        dim_feedforward,  # d_ff in the paper
        dropout=0.0,
        norm_first=False,
        *,
        mha_class=None,
        norm_class=layernorm.LayerNorm,
        activation=torch.relu,
    ):
        super().__init__()
        d_ff = dim_feedforward
        self.self_attn = (mha_class or reference.MultiHeadAttention)(d_model, nhead)
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.norm1, self.norm2 = norm_class(d_model), norm_class(d_model)
        self.dropout, self.norm_first, self.activation = nn.Dropout(dropout), norm_first, activation

    def forward(self, x, attn_mask=None):
        def attend(y):  # MultiHead(y): queries, keys and values all from y
            return self.dropout(self.self_attn(y, y, y, attn_mask=attn_mask)[0])

        def ffn(z):  # linear2(activation(linear1(z))), with torch's two dropouts
            return self.dropout(self.linear2(self.dropout(self.activation(self.linear1(z)))))

        x = families.residual(x, attend, self.norm1, self.norm_first)  # Step 2
        return families.residual(x, ffn, self.norm2, self.norm_first)  # Step 3


_POST = "norm1(x + MultiHead(x)) gives z, and the layer's output is norm2(z + FFN(z))"
_PRE = "y is x + MultiHead(norm1(x)), and the layer's output is y + FFN(norm2(y))"
_WHERE = {
    (True, True): "around both sub-layers",
    (True, False): "around the attention",
    (False, True): "around the feed-forward network",
}
_SWAPPED = {  # the whole layer in the other form: the flag read the wrong way round
    False: "you wrote the pre-LN layer (it normalises each sub-layer's input). With norm_first "
    f"False, the default, the layer is post-LN, as the paper's and BERT's: {_POST}.",
    True: "with norm_first True your layer computed the post-LN layer: forward reads its "
    f"norm_first and, when it is True, normalises first: {_PRE}.",
}
_QUERIES_ONLY = "queries normalised, keys and values not"
_QUERIES_WHY = "only the queries are normalised: norm1(x) is the query, the key and the value."


def _forms(norm_first: bool) -> dict:
    """name: (the attention's flaw, the FFN's, why), for the families.RESIDUAL flaws of the form."""
    flaws = families.PRE_LN if norm_first else families.POST_LN
    forms = {
        f"{flaw}, {where}": (flaw if a else "", flaw if b else "", f"{where}, {why}")
        for flaw, why in ((flaw, families.RESIDUAL[flaw]) for flaw in flaws)
        for (a, b), where in _WHERE.items()
    }
    other = flaws[0]  # the whole layer in the other form: the flag read the wrong way round
    forms[f"{other}, {_WHERE[True, True]}"] = (other, other, _SWAPPED[norm_first])
    return forms | {_QUERIES_ONLY: ("", "", _QUERIES_WHY)}


_OWN_NORMS = "each sub-layer has its own LayerNorm: norm1 the attention's, norm2 the FFN's."
_EITHER = {  # name: explanation (a flaw of the norms, the FFN or the mask)
    "norms swapped": f"norm1 and norm2 are swapped: {_OWN_NORMS}",
    "norm1 twice": f"norm1 is used twice; {_OWN_NORMS}",
    "norm2 twice": f"norm2 is used twice; {_OWN_NORMS}",
    "FFN reads x": "the feed-forward network reads the layer's input x, not what attention gives.",
    "no activation": "the feed-forward network has no activation between its Linears: one map.",
    "GELU": "the activation is GELU; the exercise (and torch's default) uses ReLU.",
    "ReLU after linear2 too": "there is a ReLU after linear2 as well; FFN(z) can be negative.",
    "ReLU before linear1": "the ReLU is on the feed-forward network's input, not between.",
    "FFN residual": "the feed-forward network adds its own input; the sub-layer around it does.",
    "mask ignored": "the mask has no effect: your layer does not hand attn_mask on to self_attn.",
    "mask inverted": "the mask is inverted: here True means 'may attend', as your "
    "MultiHeadAttention reads it; the layer hands attn_mask on as it is.",
}
_ATTENTION = ["no scale", "scaled by √d_model", "softmax over the queries", *families.HEADS]
_NORMS = {"norms swapped": (2, 1), "norm1 twice": (1, 1), "norm2 twice": (2, 2)}
_FFN = {  # flaw: (linear1, linear2, z) -> FFN(z) with it
    "no activation": lambda l1, l2, z: l2(l1(z)),
    "GELU": lambda l1, l2, z: l2(F.gelu(l1(z))),
    "ReLU after linear2 too": lambda l1, l2, z: F.relu(l2(F.relu(l1(z)))),
    "ReLU before linear1": lambda l1, l2, z: l2(l1(F.relu(z))),
    "FFN residual": lambda l1, l2, z: z + l2(F.relu(l1(z))),
}


def _layer(x, mask, t: nn.TransformerEncoderLayer, flaw: str = ""):
    """torch's layer ``t`` put together from its parts as the answer is, ``flaw`` switched on."""
    first, second, _ = _forms(t.norm_first).get(flaw, ("", "", ""))
    norm1, norm2 = (getattr(t, f"norm{i}") for i in _NORMS.get(flaw, (1, 2)))

    def attend(y):  # torch's attention module on (y, kv, kv), its flaw switched on
        mha, kv = t.self_attn, x if flaw == _QUERIES_ONLY else y
        qkv = zip((y, kv, kv), mha.in_proj_weight.chunk(3), mha.in_proj_bias.chunk(3))
        q, k, v = (families.split_heads(F.linear(h, w, b), mha.num_heads, flaw) for h, w, b in qkv)
        heads, _ = families.attention(q, k, v, mask, flaw, d_model=mha.embed_dim)
        return mha.out_proj(families.merge_heads(heads, flaw))

    def ffn(z):
        return _FFN.get(flaw, lambda l1, l2, z: l2(F.relu(l1(z))))(t.linear1, t.linear2, z)

    y = families.residual(x, attend, norm1, t.norm_first, first)
    if flaw == "FFN reads x":
        return y + ffn(norm2(x)) if t.norm_first else norm2(y + ffn(x))
    return families.residual(y, ffn, norm2, t.norm_first, second)


def _torch_layer_output(x, mask, t: nn.TransformerEncoderLayer):
    """torch's layer on x, the exercise's mask (True = may attend) in torch's convention."""
    if mask is not None and mask.dim() == 4:  # (B, 1, 1, S): padding, torch's key padding mask
        return t(x, src_key_padding_mask=masks.other_convention(mask.flatten(1)))
    return t(x, src_mask=None if mask is None else masks.other_convention(mask))


_SAME_SHAPE = "the layer keeps the shape of its input, (B, L, d_model)."


def _layer_mistakes(case: Case):
    texts = {name: why for name, (_, _, why) in _forms(case.args[2].norm_first).items()}
    return families.flawed(_layer, [*texts, *_EITHER, *_ATTENTION], **texts, **_EITHER)


def _layer_cases():
    randn, seeds = seeded_randn(5), iter(range(100))
    causal = families.causal(6, 6)
    padding = torch.tensor([[True] * 6, [True] * 4 + [False] * 2]).view(2, 1, 1, 6)

    def data(shape, heads, d_ff, mask=None, dropout=0.0, norm_first=False):  # a Case's fields
        # torch's layer, float64, every parameter random (so that swapping the norms or dropping a
        # bias shows), in train mode with dropout 0: torch's plain path, no fused fast path
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(next(seeds))
            t = nn.TransformerEncoderLayer(
                shape[-1], heads, d_ff, 0.0, batch_first=True, norm_first=norm_first
            ).double()
            with torch.no_grad():
                for p in (t.self_attn.in_proj_bias, t.self_attn.out_proj.bias):
                    p.normal_(0, 0.2)
                for norm in (t.norm1, t.norm2):
                    norm.weight.normal_(1, 0.3)
                    norm.bias.normal_(0, 0.3)
        options = {"dropout": dropout} | ({"norm_first": True} if norm_first else {})
        extra = {"sizes": (shape[-1], heads, d_ff), "options": options}
        return {"args": (randn(*shape), mask, t), "extra": extra}

    yield Case("nhead=4, dim_feedforward=32; x (2, 5, 16)", **data((2, 5, 16), 4, 32))
    yield Case("nhead=3, dim_feedforward=20; x (1, 7, 12)", **data((1, 7, 12), 3, 20))
    yield Case("causal mask (6, 6), True = may attend", **data((2, 6, 16), 2, 24, causal))
    fields = data((2, 6, 16), 4, 32, padding)
    yield Case("padding mask (2, 1, 1, 6), True = may attend: sentence 2 ends in 2 pads", **fields)
    yield Case("dropout=0.3 in eval mode: no dropout at all", **data((2, 4, 8), 2, 16, dropout=0.3))
    fields = data((2, 5, 16), 4, 32, norm_first=True)
    yield Case("norm_first=True (pre-LN); x (2, 5, 16)", **fields)
    fields = data((2, 6, 16), 2, 24, padding, norm_first=True)
    yield Case("norm_first=True (pre-LN); padding mask (2, 1, 1, 6), True = may attend", **fields)


_NAMES = (
    "The exercise's EncoderLayer names its parts self_attn, linear1, linear2, norm1, norm2, and "
    "self_attn has q_proj, k_proj, v_proj, out_proj."
)
_QKV = ("q_proj", "k_proj", "v_proj")


def _load(layer: nn.Module, t: nn.TransformerEncoderLayer, case: str) -> None:
    """torch's weights into the learner's layer, part by part."""

    def part(owner, name: str, what: str):
        if getattr(owner, name, None) is None:
            raise ExerciseFailure(f"Case {case!r}: your {what} has no attribute `{name}`. {_NAMES}")
        return getattr(owner, name)

    E, d_ff, src = t.linear1.in_features, t.linear1.out_features, t.self_attn
    attn = part(layer, "self_attn", "EncoderLayer")
    square, norm = f"a Linear of {E} features", f"a LayerNorm over d_model = {E} features"
    qkv = zip(_QKV, src.in_proj_weight.chunk(3), src.in_proj_bias.chunk(3))
    copies = [("self_attn", name, w, b, square) for name, w, b in qkv]  # (owner, name, w, b, what)
    if not all(hasattr(attn, name) for name in _QKV):
        if not isinstance(getattr(attn, "in_proj_weight", None), torch.Tensor):
            raise ExerciseFailure(
                f"Case {case!r}: self_attn ({type(attn).__name__}) has no q_proj, k_proj, v_proj: "
                "it is your MultiHeadAttention of lesson 02, built from d_model and nhead."
            )
        with torch.no_grad():  # a torch-style attention, its projections packed in one
            attn.in_proj_weight.copy_(src.in_proj_weight)
            attn.in_proj_bias.copy_(src.in_proj_bias)
        copies = []
    copies += [("self_attn", "out_proj", src.out_proj.weight, src.out_proj.bias, square)]
    made = {"linear1": f"a Linear from d_model = {E} to dim_feedforward = {d_ff} features"}
    made["linear2"] = f"a Linear from dim_feedforward = {d_ff} to d_model = {E} features"
    for name in ("linear1", "linear2", "norm1", "norm2"):
        own = getattr(t, name)
        copies.append(("", name, own.weight, own.bias, made.get(name, norm)))
    for owner, name, weight, bias, made in copies:
        where = f"self.{owner}.{name}" if owner else f"self.{name}"
        found = part(attn if owner else layer, name, owner or "EncoderLayer")
        copy_weight_and_bias(found, weight, bias, case, where, made)


def _call_layer(candidate, case: Case, table: Table):
    x, mask, t = case.args
    layer = build_module(candidate, case, case.extra["sizes"], **case.extra["options"]).eval()
    _load(layer, t, case.name)
    with torch.no_grad():
        got = call_candidate(layer, case.name, x.clone(), attn_mask=mask, crash_hint=_CRASH)
        if case.extra["options"]["dropout"] and isinstance(got, torch.Tensor):
            if not torch.equal(got, call_candidate(layer, case.name, x.clone(), attn_mask=mask)):
                raise ExerciseFailure(
                    f"Case {case.name!r}: two calls on the same input gave different outputs in "
                    "eval mode.\nLikely cause: dropout is still on: an nn.Dropout module stops in "
                    "eval mode by itself, a functional dropout only when told the training flag."
                )
    return got


_CRASH = "a shape mix-up: self_attn gives a pair; linear1 goes from d_model to d_ff, linear2 back."


def _fallback(got, case: Case) -> str:
    if torch.isnan(got).any():
        return "NaN: a query has no key left to attend to (a row of −∞). Is the mask inverted?"
    steps = _PRE if case.args[2].norm_first else _POST
    return (
        f"compare your forward with the steps: {steps}, where MultiHead(y) is self_attn's output "
        "with y as query, key and value and the mask, and FFN(z) is linear2(ReLU(linear1(z)))."
    )


ENCODER_LAYER = Table(
    cases=_layer_cases,
    reference=_torch_layer_output,
    mistakes=_layer_mistakes,
    call=_call_layer,
    outputs=[Out("the outputs", shape_hint=_SAME_SHAPE, fallback=_fallback)],
    atol=1e-4,
    rtol=1e-3,
)


@exercise(
    "EncoderLayer",
    "04",
    reference=EncoderLayer,
    todo="Replace `raise NotImplementedError` in your EncoderLayer: its parts, then its forward.",
    points=3,
    own_work={  # what the exercise asks the learner to write themselves
        "torch's nn.TransformerEncoderLayer": nn.TransformerEncoderLayer,
        "the course's EncoderLayer (mha_course)": encoder.EncoderLayer,
    },
)
def check_encoder_layer(candidate) -> int:
    """Check ``candidate(d_model, nhead, dim_feedforward, dropout=0.0, norm_first=False)`` against
    torch.nn.TransformerEncoderLayer with the same weights: post-LN, and pre-LN too when its
    signature takes ``norm_first`` (the older skeleton did not)."""
    pre_ln = accepts(candidate, "norm_first")
    cases = lambda: (c for c in _layer_cases() if pre_ln or not c.args[2].norm_first)  # noqa: E731
    return run(candidate, dataclasses.replace(ENCODER_LAYER, cases=cases), "EncoderLayer")


check_encoder_layer.table = ENCODER_LAYER
