"""Lesson 04's encoder layer, post-LN (the default) or pre-LN (``norm_first``), given the weights
of a torch.nn.TransformerEncoderLayer and held to it; its masks (True = may attend) turned round
for torch. A layer whose signature takes no ``norm_first`` (the older skeleton) is checked post-LN
only."""

from __future__ import annotations

import dataclasses
import inspect

import torch
import torch.nn.functional as F
from torch import nn

from .. import encoder, layernorm, masks, reference
from . import families
from ._core import call_candidate, exercise
from ._failure import ExerciseFailure
from ._table import Case, Out, Table, build_module, copy_weight_and_bias, run, seeded_randn


class EncoderLayer(nn.Module):
    """The reference: lesson 04's layer, ReLU, batch first, post-LN by default and pre-LN with
    ``norm_first``; ``forward(x, attn_mask=None)`` hands the mask (True = may attend) to
    ``self_attn``. ``mha_class``, ``norm_class`` and ``activation`` (keyword-only, not in the
    skeleton) build it from other parts: the learner's MultiHeadAttention and LayerNorm, GELU."""

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


ENCODER_ROUTINES = {  # what the exercise asks the learner to write themselves
    "torch's nn.TransformerEncoderLayer": nn.TransformerEncoderLayer,
    "the course's EncoderLayer (mha_course)": encoder.EncoderLayer,
}

# ---------------------------------------------------------------- torch's layer, taken apart

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
_QUERIES_WHY = (
    "only the queries are normalised: self-attention reads one input three times, so norm1(x) "
    "goes in as the query, the key and the value alike."
)


def _forms(norm_first: bool) -> dict:
    """name: (the attention sub-layer's flaw, the FFN sub-layer's, explanation), for each flaw of
    families.RESIDUAL a layer of this form can have, in either sub-layer or in both."""
    flaws = families.PRE_LN if norm_first else families.POST_LN
    forms = {
        f"{flaw}, {where}": (flaw if a else "", flaw if b else "", f"{where}, {why}")
        for flaw, why in ((flaw, families.RESIDUAL[flaw]) for flaw in flaws)
        for (a, b), where in _WHERE.items()
    }
    other = flaws[0]  # the whole layer in the other form: the flag read the wrong way round
    forms[f"{other}, {_WHERE[True, True]}"] = (other, other, _SWAPPED[norm_first])
    return forms | {_QUERIES_ONLY: ("", "", _QUERIES_WHY)}


_OWN_NORMS = "each sub-layer has its own LayerNorm with its own weights: norm1 goes with the "
_OWN_NORMS += "attention, norm2 with the feed-forward network."
_EITHER = {  # name: explanation (a flaw of the norms, the FFN or the mask)
    "norms swapped": f"norm1 and norm2 are swapped: {_OWN_NORMS}",
    "norm1 twice": f"norm1 is used twice; {_OWN_NORMS}",
    "norm2 twice": f"norm2 is used twice; {_OWN_NORMS}",
    "FFN reads x": "the feed-forward network reads the layer's input x; it reads what the "
    "attention sub-layer gives.",
    "no activation": "the feed-forward network has no activation between its two Linears, so it "
    "is one linear map: FFN(z) is linear2(ReLU(linear1(z))).",
    "GELU": "the activation is GELU; the exercise (and torch's default) uses ReLU.",
    "ReLU after linear2 too": "there is a ReLU after linear2 as well; the network ends with "
    "linear2, so its output can be negative.",
    "ReLU before linear1": "the ReLU is on the feed-forward network's input; it goes between "
    "the two Linears.",
    "a residual inside the FFN": "the feed-forward network adds its own input: the residual is "
    "added once, by the sub-layer around it.",
    "mask ignored": "the mask has no effect: your layer does not hand attn_mask on to its "
    "self-attention.",
    "mask inverted": "the mask is inverted: here True means 'may attend', as your "
    "MultiHeadAttention reads it; the layer hands attn_mask on as it is (torch's src_mask is "
    "the opposite, True = masked out).",
}
_ATTENTION = ["no scale", "scaled by √d_model", "softmax over the queries", *families.HEADS]
_NORMS = {
    "norms swapped": lambda t: (t.norm2, t.norm1),
    "norm1 twice": lambda t: (t.norm1, t.norm1),
    "norm2 twice": lambda t: (t.norm2, t.norm2),
}
_FFN = {  # flaw: (linear1, linear2, z) -> FFN(z) with it
    "no activation": lambda l1, l2, z: l2(l1(z)),
    "GELU": lambda l1, l2, z: l2(F.gelu(l1(z))),
    "ReLU after linear2 too": lambda l1, l2, z: F.relu(l2(F.relu(l1(z)))),
    "ReLU before linear1": lambda l1, l2, z: l2(l1(F.relu(z))),
    "a residual inside the FFN": lambda l1, l2, z: z + l2(F.relu(l1(z))),
}


def _attention(mha: nn.MultiheadAttention, query, kv, mask, flaw: str):
    """torch's attention module ``mha`` on (query, kv, kv), the mask True = may attend, with a
    flaw of the attention families switched on."""
    H = mha.num_heads
    inputs = (query, kv, kv)
    projected = zip(inputs, mha.in_proj_weight.chunk(3), mha.in_proj_bias.chunk(3), strict=True)
    q, k, v = (families.split_heads(F.linear(x, w, b), H, flaw) for x, w, b in projected)
    heads, _ = families.attention(q, k, v, mask, flaw, d_model=mha.embed_dim)
    return mha.out_proj(families.merge_heads(heads, flaw))


def _layer(x, mask, t: nn.TransformerEncoderLayer, flaw: str = ""):
    """torch's layer ``t`` put together from its parts as the exercise's answer is (post-LN, or
    pre-LN with ``t.norm_first``), with ``flaw`` switched on."""
    first, second, _ = _forms(t.norm_first).get(flaw, ("", "", ""))
    norm1, norm2 = _NORMS.get(flaw, lambda t: (t.norm1, t.norm2))(t)

    def attend(y):
        kv = x if flaw == _QUERIES_ONLY else y
        return _attention(t.self_attn, y, kv, mask, flaw)

    def ffn(z):
        return _FFN.get(flaw, lambda l1, l2, z: l2(F.relu(l1(z))))(t.linear1, t.linear2, z)

    y = families.residual(x, attend, norm1, t.norm_first, first)
    if flaw == "FFN reads x":
        return y + ffn(norm2(x)) if t.norm_first else norm2(y + ffn(x))
    return families.residual(y, ffn, norm2, t.norm_first, second)


def _torch_layer_output(x, mask, t: nn.TransformerEncoderLayer):
    """torch's layer on x, the exercise's mask (True = may attend) in torch's convention."""
    if mask is None:
        return t(x)
    if mask.dim() == 4:  # (B, 1, 1, S): padding, torch's key padding mask (B, S)
        return t(x, src_key_padding_mask=masks.other_convention(mask.flatten(1)))
    return t(x, src_mask=masks.other_convention(mask))


def _layer_mistakes(case: Case):
    texts = {name: why for name, (_, _, why) in _forms(case.args[2].norm_first).items()}
    run = lambda flaw: lambda x, mask, t: _layer(x, mask, t, flaw)  # noqa: E731
    return families.mistakes(run, [*texts, *_EITHER, *_ATTENTION], **texts, **_EITHER)


# ---------------------------------------------------------------- the cases


def _torch_layer(d_model, nhead, dim_feedforward, seed, norm_first):
    """torch's ReLU layer, float64, every parameter random (the norms' and the biases too, so
    that swapping norm1 and norm2 or dropping a bias shows)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layer = nn.TransformerEncoderLayer(
            d_model, nhead, dim_feedforward, 0.0, batch_first=True, norm_first=norm_first
        ).double()
        with torch.no_grad():
            for p in (layer.self_attn.in_proj_bias, layer.self_attn.out_proj.bias):
                p.normal_(0, 0.2)
            for norm in (layer.norm1, layer.norm2):
                norm.weight.normal_(1, 0.3)
                norm.bias.normal_(0, 0.3)
    return layer.train()  # train mode with dropout 0: torch's plain path, no fused fast path


def _layer_cases():
    randn, seeds = seeded_randn(5), iter(range(100))
    causal = families.causal(6, 6)
    padding = torch.tensor([[True] * 6, [True] * 4 + [False] * 2]).view(2, 1, 1, 6)

    def data(shape, d_model, heads, d_ff, mask=None, dropout=0.0, norm_first=False):
        t = _torch_layer(d_model, heads, d_ff, next(seeds), norm_first)
        options = {"dropout": dropout} | ({"norm_first": True} if norm_first else {})
        return (randn(*shape), mask, t), {}, {"sizes": (d_model, heads, d_ff), "options": options}

    yield Case("nhead=4, dim_feedforward=32; x (2, 5, 16)", *data((2, 5, 16), 16, 4, 32))
    yield Case("nhead=3, dim_feedforward=20; x (1, 7, 12)", *data((1, 7, 12), 12, 3, 20))
    yield Case("causal mask (6, 6), True = may attend", *data((2, 6, 16), 16, 2, 24, causal))
    yield Case(
        "padding mask (2, 1, 1, 6), True = may attend: the last 2 tokens of sentence 2 are padding",
        *data((2, 6, 16), 16, 4, 32, padding),
    )
    yield Case(
        "dropout=0.3 in eval mode (model.eval()): no dropout at all",
        *data((2, 4, 8), 8, 2, 16, dropout=0.3),
    )
    yield Case(
        "norm_first=True (pre-LN); a batch (2, 5, 16)",
        *data((2, 5, 16), 16, 4, 32, norm_first=True),
    )
    yield Case(
        "norm_first=True (pre-LN); padding mask (2, 1, 1, 6), True = may attend",
        *data((2, 6, 16), 16, 2, 24, padding, norm_first=True),
    )


# ---------------------------------------------------------------- the learner's layer

_NAMES = (
    "The exercise's EncoderLayer names its parts self_attn, linear1, linear2, norm1, norm2, and "
    "self_attn has q_proj, k_proj, v_proj, out_proj."
)


def _part(owner, name: str, case: str, what: str):
    if getattr(owner, name, None) is None:
        raise ExerciseFailure(f"Case {case!r}: your {what} has no attribute `{name}`. {_NAMES}")
    return getattr(owner, name)


def _load(layer: nn.Module, t: nn.TransformerEncoderLayer, case: str) -> None:
    """torch's weights into the learner's layer, part by part."""
    E, d_ff, src = t.linear1.in_features, t.linear1.out_features, t.self_attn
    attn, square = _part(layer, "self_attn", case, "EncoderLayer"), f"a Linear of {E} features"
    copies = []  # (owner, name, weight, bias, what it should be)
    if all(hasattr(attn, name) for name in ("q_proj", "k_proj", "v_proj")):
        weights, biases = src.in_proj_weight.chunk(3), src.in_proj_bias.chunk(3)
        for name, w, b in zip(("q_proj", "k_proj", "v_proj"), weights, biases, strict=True):
            copies.append((attn, name, w, b, square))
    elif isinstance(getattr(attn, "in_proj_weight", None), torch.Tensor):  # a torch-style one
        with torch.no_grad():
            attn.in_proj_weight.copy_(src.in_proj_weight)
            attn.in_proj_bias.copy_(src.in_proj_bias)
    else:
        raise ExerciseFailure(
            f"Case {case!r}: self_attn ({type(attn).__name__}) has no q_proj, k_proj, v_proj: it "
            "is your MultiHeadAttention of lesson 02, built from d_model and nhead."
        )
    norm = f"a LayerNorm over d_model = {E} features"
    for owner, name, made in (
        (attn, "out_proj", square),
        (layer, "linear1", f"a Linear from d_model = {E} to dim_feedforward = {d_ff} features"),
        (layer, "linear2", f"a Linear from dim_feedforward = {d_ff} to d_model = {E} features"),
        (layer, "norm1", norm),
        (layer, "norm2", norm),
    ):
        source = getattr(src if owner is attn else t, name)
        copies.append((owner, name, source.weight, source.bias, made))
    for owner, name, weight, bias, made in copies:
        where = f"self.self_attn.{name}" if owner is attn else f"self.{name}"
        part = _part(owner, name, case, "self_attn" if owner is attn else "EncoderLayer")
        copy_weight_and_bias(part, weight, bias, case, where, made)


def _call_layer(candidate, case: Case, table: Table):
    x, mask, t = case.args
    layer = build_module(candidate, case, case.extra["sizes"], **case.extra["options"])
    layer.eval()
    _load(layer, t, case.name)
    with torch.no_grad():
        got = call_candidate(layer, case.name, x.clone(), attn_mask=mask, crash_hint=_CRASH)
        if case.extra["options"]["dropout"] and isinstance(got, torch.Tensor):
            again = call_candidate(layer, case.name, x.clone(), attn_mask=mask)
            if not torch.equal(got, again):
                raise ExerciseFailure(
                    f"Case {case.name!r}: two calls on the same input gave different outputs, "
                    "although the layer is in eval mode.\nLikely cause: dropout is still on: an "
                    "nn.Dropout module stops in eval mode by itself, a functional dropout only "
                    "when it is told the module's training flag."
                )
    return got


_CRASH = (
    "a shape mix-up: self_attn gives a pair (output, weights), linear1 goes from d_model to "
    "dim_feedforward features and linear2 back."
)


def _fallback(got, case: Case) -> str:
    steps = _PRE if case.args[2].norm_first else _POST
    return (
        f"compare your forward with the steps: {steps}, where MultiHead(y) is the output of "
        "self_attn with y as query, key and value and the mask, and FFN(z) is "
        "linear2(ReLU(linear1(z)))."
    )


def _nan_cause(got, case: Case) -> str | None:
    if not torch.isnan(got).any():
        return None
    return (
        "NaN: some query was left with no key to attend to, and the softmax of a row of −∞ is "
        "0/0. Is the mask inverted?"
    )


ENCODER_LAYER = Table(
    cases=_layer_cases,
    reference=_torch_layer_output,
    mistakes=_layer_mistakes,
    call=_call_layer,
    outputs=[
        Out(
            "the outputs",
            shape_hint="the layer keeps the shape of its input, (B, L, d_model).",
            cause=_nan_cause,
            fallback=_fallback,
        )
    ],
    atol=1e-4,
    rtol=1e-3,
)


def _takes_norm_first(candidate) -> bool:
    """Whether ``candidate(...)`` accepts ``norm_first`` (the lesson's skeleton does; the older
    one did not, and is checked post-LN only)."""
    try:
        parameters = inspect.signature(candidate).parameters.values()
    except (TypeError, ValueError):  # no signature to read: check post-LN only
        return False
    kinds = (p.name == "norm_first" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    return any(kinds)


@exercise(
    "EncoderLayer",
    "04",
    reference=EncoderLayer,
    todo="Replace `raise NotImplementedError` in your EncoderLayer: its parts, then its forward.",
    points=3,
    own_work=ENCODER_ROUTINES,
)
def check_encoder_layer(candidate) -> int:
    """Check ``candidate(d_model, nhead, dim_feedforward, dropout=0.0, norm_first=False)`` against
    torch.nn.TransformerEncoderLayer with the same weights: post-LN, and pre-LN too when its
    signature takes ``norm_first``."""
    pre_ln = _takes_norm_first(candidate)
    cases = lambda: (c for c in _layer_cases() if pre_ln or not c.args[2].norm_first)  # noqa: E731
    return run(candidate, dataclasses.replace(ENCODER_LAYER, cases=cases), "EncoderLayer")


check_encoder_layer.table = ENCODER_LAYER
