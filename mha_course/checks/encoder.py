"""Checker for lesson 04: the encoder layer (ReLU; post-LN, and pre-LN with ``norm_first=True``),
against torch.nn.TransformerEncoderLayer.

The learner's layer is built as ``EncoderLayer(d_model, num_heads, d_ff)``; torch's weights are
copied into it (torch's packed ``in_proj_weight`` split into ``self_attn.q_proj``, ``k_proj`` and
``v_proj``), and both run on the same inputs. Masks in the exercise are True where a query **may
attend**; torch's ``src_mask`` is True where it may **not**, so the checker inverts them for torch.
A layer whose signature takes ``norm_first`` (the lesson's skeleton) is also checked with
``norm_first=True`` against torch's pre-LN layer; one written to the older skeleton, without it, is
checked post-LN only.
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from .. import encoder
from ..attention import scaled_dot_product_attention
from ._core import Mistake, call_candidate, checker, compare, require_shape
from ._failure import ExerciseFailure
from ._steps import copy_weight_and_bias, seeded_randn

__all__ = ["check_encoder_layer"]


def _torch_masks(mask: torch.Tensor | None):
    """The exercise's mask (True = may attend) as torch's (attn_mask, key_padding_mask)."""
    if mask is None:
        return None, None
    if mask.dim() == 2:  # (L, S)
        return ~mask, None
    return None, ~mask.reshape(mask.size(0), -1)  # (B, 1, 1, S) padding


_NAMES = "self_attn, linear1, linear2, norm1, norm2"

# What lesson 04 asks the learner to write themselves (the checker names the one called).
ENCODER_ROUTINES = {
    "torch's nn.TransformerEncoderLayer": nn.TransformerEncoderLayer,
    "the course's EncoderLayer (mha_course)": encoder.EncoderLayer,
}


# ---------------------------------------------------------------- the layer, piece by piece


class _Parts:
    """torch's layer taken apart, so each classic mistake can put the pieces together wrongly."""

    def __init__(self, layer: nn.TransformerEncoderLayer, mask: torch.Tensor | None):
        self.layer, self.mask = layer, mask

    def attend(self, x, mask=..., kv=None):
        """MultiHead(x, kv, kv) (kv = x by default) with the exercise's mask (True = may attend;
        ``...`` = the case's)."""
        attn = self.layer.self_attn
        mask = self.mask if mask is ... else mask
        kv = x if kv is None else kv
        w_q, w_kv = attn.in_proj_weight.split([attn.embed_dim, 2 * attn.embed_dim])
        b_q, b_kv = attn.in_proj_bias.split([attn.embed_dim, 2 * attn.embed_dim])
        q, (k, v) = F.linear(x, w_q, b_q), F.linear(kv, w_kv, b_kv).chunk(2, dim=-1)
        q, k, v = (rearrange(t, "b l (h d) -> b h l d", h=attn.num_heads) for t in (q, k, v))
        heads, _ = scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return attn.out_proj(rearrange(heads, "b h l d -> b l (h d)"))

    def ffn(self, z, activation=F.relu):
        return self.layer.linear2(activation(self.layer.linear1(z)))

    def n1(self, x):
        return self.layer.norm1(x)

    def n2(self, x):
        return self.layer.norm2(x)


def _post_ln(p: _Parts, x, mask=..., activation=F.relu):
    """The right post-LN layer, Steps 2 and 3, with a wrong mask or activation when asked."""
    z = p.n1(x + p.attend(x, mask))  # Step 2
    return p.n2(z + p.ffn(z, activation))  # Step 3


def _pre_ln(p: _Parts, x, mask=..., activation=F.relu):
    """The right pre-LN layer, with a wrong mask or activation when asked."""
    x = x + p.attend(p.n1(x), mask)
    return x + p.ffn(p.n2(x), activation)


_POST = "z = norm1(x + MultiHead(x)), then norm2(z + FFN(z))"
_PRE = "x = x + MultiHead(norm1(x)), then x + FFN(norm2(x))"


def _mistakes(layer: nn.TransformerEncoderLayer, mask, norm_first: bool = False) -> list[Mistake]:
    def run(build):
        return lambda x: build(_Parts(layer, mask), x)

    def ffn_of(p, z):
        return p.ffn(z)

    both = [
        Mistake(
            "no activation",
            run(lambda p, x: (_pre_ln if norm_first else _post_ln)(p, x, activation=lambda t: t)),
            "the feed-forward network has no activation between its two Linears, so it is just one "
            "linear map: FFN(z) = linear2(relu(linear1(z))).",
        ),
        Mistake(
            "GELU",
            run(lambda p, x: (_pre_ln if norm_first else _post_ln)(p, x, activation=F.gelu)),
            "the activation is GELU; the exercise (and torch's default) uses ReLU: "
            "linear2(torch.relu(linear1(z))).",
        ),
        Mistake(
            "mask ignored",
            run(lambda p, x: (_pre_ln if norm_first else _post_ln)(p, x, mask=None)),
            "the mask is ignored: pass attn_mask on to self.self_attn(x, x, x, attn_mask=attn_mask).",
        ),
        Mistake(
            "mask inverted",
            run(
                lambda p, x: (_pre_ln if norm_first else _post_ln)(
                    p, x, mask=None if mask is None else ~mask
                )
            ),
            "the mask is inverted: here True means 'may attend' (as in your MultiHeadAttention); pass "
            "attn_mask on unchanged (torch's src_mask is the opposite, True = masked out).",
        ),
    ]
    if norm_first:
        return _pre_ln_mistakes(run, ffn_of) + both
    return [
        Mistake(
            "pre-LN",
            run(lambda p, x: (lambda y: y + ffn_of(p, p.n2(y)))(x + p.attend(p.n1(x)))),
            "you wrote the pre-LN layer (normalise first: x + MultiHead(LayerNorm(x))). By default "
            f"(norm_first=False) the layer is post-LN, like the original paper and BERT: {_POST}.",
        ),
        Mistake(
            "no residuals",
            run(lambda p, x: (lambda z: p.n2(ffn_of(p, z)))(p.n1(p.attend(x)))),
            "both residual connections are missing: add each sub-layer's input to its output before "
            "the norm: norm1(x + MultiHead(x)) and norm2(z + FFN(z)).",
        ),
        Mistake(
            "no attention residual",
            run(lambda p, x: (lambda z: p.n2(z + ffn_of(p, z)))(p.n1(p.attend(x)))),
            "the residual around the attention is missing: z = norm1(x + MultiHead(x)), not "
            "norm1(MultiHead(x)).",
        ),
        Mistake(
            "no FFN residual",
            run(lambda p, x: p.n2(ffn_of(p, p.n1(x + p.attend(x))))),
            "the residual around the feed-forward network is missing: norm2(z + FFN(z)), not norm2(FFN(z)).",
        ),
        Mistake(
            "norm before the add",
            run(lambda p, x: (lambda z: z + p.n2(ffn_of(p, z)))(x + p.n1(p.attend(x)))),
            "you normalised each sub-layer's output and then added the residual (x + norm(MultiHead(x))); "
            "post-LN adds first and normalises the sum: norm1(x + MultiHead(x)), norm2(z + FFN(z)).",
        ),
        Mistake(
            "norm before the add (attention)",
            run(lambda p, x: (lambda z: p.n2(z + ffn_of(p, z)))(x + p.n1(p.attend(x)))),
            "around the attention you normalised before adding the residual: it is "
            "norm1(x + MultiHead(x)), not x + norm1(MultiHead(x)).",
        ),
        Mistake(
            "norm before the add (FFN)",
            run(lambda p, x: (lambda z: z + p.n2(ffn_of(p, z)))(p.n1(x + p.attend(x)))),
            "around the feed-forward network you normalised before adding the residual: it is "
            "norm2(z + FFN(z)), not z + norm2(FFN(z)).",
        ),
        Mistake(
            "no second norm",
            run(lambda p, x: (lambda z: z + ffn_of(p, z))(p.n1(x + p.attend(x)))),
            "the second LayerNorm is missing: the layer ends with norm2(z + FFN(z)).",
        ),
        Mistake(
            "no first norm",
            run(lambda p, x: (lambda z: p.n2(z + ffn_of(p, z)))(x + p.attend(x))),
            "the first LayerNorm is missing: z = norm1(x + MultiHead(x)).",
        ),
        Mistake(
            "norm1 twice",
            run(lambda p, x: (lambda z: p.n1(z + ffn_of(p, z)))(p.n1(x + p.attend(x)))),
            "you used norm1 twice; each sub-layer has its own LayerNorm with its own weights: "
            "norm1 after the attention, norm2 after the feed-forward network.",
        ),
        Mistake(
            "norm2 twice",
            run(lambda p, x: (lambda z: p.n2(z + ffn_of(p, z)))(p.n2(x + p.attend(x)))),
            "you used norm2 twice; each sub-layer has its own LayerNorm with its own weights: "
            "norm1 after the attention, norm2 after the feed-forward network.",
        ),
        Mistake(
            "FFN reads x",
            run(lambda p, x: (lambda z: p.n2(z + ffn_of(p, x)))(p.n1(x + p.attend(x)))),
            "the feed-forward network reads the layer's input x; it reads z, the output of Step 2: "
            "norm2(z + FFN(z)).",
        ),
        *both,
    ]


def _pre_ln_mistakes(run, ffn_of) -> list[Mistake]:
    """The classic wrong versions of the pre-LN layer (``norm_first=True``)."""
    return [
        Mistake(
            "norm_first ignored",
            run(lambda p, x: _post_ln(p, x)),
            "with norm_first=True your layer computed the post-LN layer: forward must read "
            f"self.norm_first and, when it is True, normalise first: {_PRE}.",
        ),
        Mistake(
            "residual from the normalised input",
            run(lambda p, x: (lambda z: p.n2(z) + ffn_of(p, p.n2(z)))(p.n1(x) + p.attend(p.n1(x)))),
            "you added each sub-layer's output to the normalised input. Pre-LN normalises only what "
            f"goes into the sub-layer; the residual path carries x itself: {_PRE}.",
        ),
        Mistake(
            "norms swapped",
            run(lambda p, x: (lambda y: y + ffn_of(p, p.n1(y)))(x + p.attend(p.n2(x)))),
            f"norm1 and norm2 are swapped: norm1 goes before the attention, norm2 before the FFN: {_PRE}.",
        ),
        Mistake(
            "norm1 twice",
            run(lambda p, x: (lambda y: y + ffn_of(p, p.n1(y)))(x + p.attend(p.n1(x)))),
            "you used norm1 twice; each sub-layer has its own LayerNorm with its own weights: "
            f"{_PRE}.",
        ),
        Mistake(
            "norm2 twice",
            run(lambda p, x: (lambda y: y + ffn_of(p, p.n2(y)))(x + p.attend(p.n2(x)))),
            "you used norm2 twice; each sub-layer has its own LayerNorm with its own weights: "
            f"{_PRE}.",
        ),
        Mistake(
            "only the attention pre-LN",
            run(lambda p, x: (lambda y: p.n2(y + ffn_of(p, y)))(x + p.attend(p.n1(x)))),
            "only the attention sub-layer is pre-LN; the feed-forward one is still post-LN. With "
            f"norm_first=True both normalise first: {_PRE}.",
        ),
        Mistake(
            "only the FFN pre-LN",
            run(lambda p, x: (lambda z: z + ffn_of(p, p.n2(z)))(p.n1(x + p.attend(x)))),
            "only the feed-forward sub-layer is pre-LN; the attention one is still post-LN. With "
            f"norm_first=True both normalise first: {_PRE}.",
        ),
        Mistake(
            "queries normalised, keys and values not",
            run(lambda p, x: (lambda y: y + ffn_of(p, p.n2(y)))(x + p.attend(p.n1(x), kv=x))),
            "only the queries are normalised: self-attention reads one input three times, so pass "
            "norm1(x) as query, key and value alike.",
        ),
        Mistake(
            "no residuals (pre-LN)",
            run(lambda p, x: (lambda y: ffn_of(p, p.n2(y)))(p.attend(p.n1(x)))),
            f"both residual connections are missing: add each sub-layer's output to its input: {_PRE}.",
        ),
        Mistake(
            "no attention residual (pre-LN)",
            run(lambda p, x: (lambda y: y + ffn_of(p, p.n2(y)))(p.attend(p.n1(x)))),
            f"the residual around the attention is missing: {_PRE}.",
        ),
        Mistake(
            "no FFN residual (pre-LN)",
            run(lambda p, x: (lambda y: ffn_of(p, p.n2(y)))(x + p.attend(p.n1(x)))),
            f"the residual around the feed-forward network is missing: {_PRE}.",
        ),
        Mistake(
            "FFN reads x (pre-LN)",
            run(lambda p, x: (lambda y: y + ffn_of(p, p.n2(x)))(x + p.attend(p.n1(x)))),
            "the feed-forward network reads the layer's input x; it reads the attention sub-layer's "
            f"result: {_PRE}.",
        ),
        Mistake(
            "a LayerNorm after the adds too",
            run(lambda p, x: (lambda y: p.n2(y + ffn_of(p, p.n2(y))))(p.n1(x + p.attend(p.n1(x))))),
            "you normalised after each add as well. Pre-LN normalises only the sub-layers' inputs; "
            f"the layer ends with the add: {_PRE}.",
        ),
    ]


# ---------------------------------------------------------------- copying torch's weights in


def _part(owner, name: str, case: str, what: str):
    part = getattr(owner, name, None)
    if part is None:
        raise ExerciseFailure(
            f"Case {case!r}: your {what} has no attribute `{name}`. The exercise's "
            f"EncoderLayer names its parts {_NAMES}, and self_attn has q_proj, k_proj, "
            f"v_proj, out_proj."
        )
    return part


def _copy(
    owner, name: str, case: str, what: str, weight: torch.Tensor, bias: torch.Tensor, made: str
):
    """Copy torch's weight and bias into ``owner.name`` (a Linear or a LayerNorm)."""
    part = _part(owner, name, case, what)
    copy_weight_and_bias(part, weight, bias, case, f"{what}.{name}", made, who=name, quote="`")


def _load_torch_weights(layer, torch_layer: nn.TransformerEncoderLayer, case: str) -> None:
    d_model, d_ff = torch_layer.linear1.in_features, torch_layer.linear1.out_features
    src = torch_layer.self_attn
    attn = _part(layer, "self_attn", case, "EncoderLayer")
    with torch.no_grad():
        if all(hasattr(attn, name) for name in ("q_proj", "k_proj", "v_proj", "out_proj")):
            linear = f"nn.Linear(d_model, d_model) = nn.Linear({d_model}, {d_model})"
            for name, w, b in zip(
                ("q_proj", "k_proj", "v_proj"),
                src.in_proj_weight.chunk(3),
                src.in_proj_bias.chunk(3),
                strict=True,
            ):
                _copy(attn, name, case, "self_attn", w, b, linear)
        elif isinstance(getattr(attn, "in_proj_weight", None), torch.Tensor):  # torch-style MHA
            attn.in_proj_weight.copy_(src.in_proj_weight)
            attn.in_proj_bias.copy_(src.in_proj_bias)
        else:
            raise ExerciseFailure(
                f"Case {case!r}: self_attn ({type(attn).__name__}) has no q_proj, k_proj, "
                f"v_proj (nn.Linear(d_model, d_model) each). Build it with your "
                f"MultiHeadAttention from lesson 02: self.self_attn = MultiHeadAttention("
                f"d_model, num_heads)."
            )
        _copy(
            attn,
            "out_proj",
            case,
            "self_attn",
            src.out_proj.weight,
            src.out_proj.bias,
            f"nn.Linear(d_model, d_model) = nn.Linear({d_model}, {d_model})",
        )
        for name, torch_part, made in (
            (
                "linear1",
                torch_layer.linear1,
                f"nn.Linear(d_model, d_ff) = nn.Linear({d_model}, {d_ff})",
            ),
            (
                "linear2",
                torch_layer.linear2,
                f"nn.Linear(d_ff, d_model) = nn.Linear({d_ff}, {d_model})",
            ),
            ("norm1", torch_layer.norm1, f"LayerNorm(d_model) = LayerNorm({d_model})"),
            ("norm2", torch_layer.norm2, f"LayerNorm(d_model) = LayerNorm({d_model})"),
        ):
            _copy(layer, name, case, "EncoderLayer", torch_part.weight, torch_part.bias, made)


def _torch_layer(
    d_model: int, num_heads: int, d_ff: int, seed: int, norm_first: bool = False
) -> nn.TransformerEncoderLayer:
    """torch's ReLU layer (post-LN, or pre-LN with ``norm_first``), float64, every parameter random
    (norms and biases included, so that swapping norm1 and norm2 or dropping a bias shows)."""
    with torch.random.fork_rng(devices=[]):  # leave the learner's random stream alone
        torch.manual_seed(seed)
        layer = nn.TransformerEncoderLayer(
            d_model,
            num_heads,
            d_ff,
            dropout=0.0,
            activation="relu",
            batch_first=True,
            norm_first=norm_first,
            dtype=torch.float64,
        )
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        layer.self_attn.in_proj_bias.normal_(0, 0.2, generator=g)
        layer.self_attn.out_proj.bias.normal_(0, 0.2, generator=g)
        for norm in (layer.norm1, layer.norm2):
            norm.weight.copy_(1 + 0.3 * torch.randn(d_model, generator=g, dtype=torch.float64))
            norm.bias.normal_(0, 0.3, generator=g)
    return layer.train()  # train mode with dropout 0: torch's plain path, no fused fast path


def _cases(norm_first: bool):
    """(case, d_model, num_heads, d_ff, dropout, norm_first, x, mask); the pre-LN cases only when
    the candidate takes ``norm_first``."""
    randn = seeded_randn(5)

    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    padding = torch.tensor([[True] * 6, [True] * 4 + [False] * 2]).view(2, 1, 1, 6)
    cases = [
        (
            "d_model=16, 4 heads, d_ff=32; a batch (2, 5, 16)",
            16,
            4,
            32,
            0.0,
            False,
            (2, 5, 16),
            None,
        ),
        (
            "d_model=12, 3 heads, d_ff=20; one sentence (1, 7, 12)",
            12,
            3,
            20,
            0.0,
            False,
            (1, 7, 12),
            None,
        ),
        ("causal mask (6, 6), True = may attend", 16, 2, 24, 0.0, False, (2, 6, 16), causal),
        (
            "padding mask (2, 1, 1, 6), True = may attend: the last 2 tokens of sentence 2 are padding",
            16,
            4,
            32,
            0.0,
            False,
            (2, 6, 16),
            padding,
        ),
        (
            "dropout=0.3 in eval mode (model.eval()): no dropout at all",
            8,
            2,
            16,
            0.3,
            False,
            (2, 4, 8),
            None,
        ),
        ("norm_first=True (pre-LN); a batch (2, 5, 16)", 16, 4, 32, 0.0, True, (2, 5, 16), None),
        (
            "norm_first=True (pre-LN); padding mask (2, 1, 1, 6), True = may attend",
            16,
            2,
            24,
            0.0,
            True,
            (2, 6, 16),
            padding,
        ),
    ]
    for case, d_model, num_heads, d_ff, dropout, pre_ln, shape, mask in cases:
        x = randn(*shape)  # drawn for every case, so each case's input is the same either way
        if norm_first or not pre_ln:
            yield case, d_model, num_heads, d_ff, dropout, pre_ln, x, mask


def _takes_norm_first(candidate) -> bool:
    """Whether ``candidate(...)`` accepts ``norm_first`` (the lesson's skeleton does; the older one
    did not, and is checked post-LN only)."""
    try:
        parameters = inspect.signature(candidate).parameters.values()
    except (TypeError, ValueError):  # no signature to read: check post-LN only
        return False
    return any(
        p.name == "norm_first" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters
    )


@checker(
    "EncoderLayer",
    "Replace `raise NotImplementedError` in your EncoderLayer: its parts in __init__, then both "
    "sub-layers, each inside its residual, in the order norm_first asks for.",
    own_work=ENCODER_ROUTINES,
)
def check_encoder_layer(candidate) -> int:
    """Check ``candidate(d_model, num_heads, d_ff, dropout=0.0)`` (an EncoderLayer class: post-LN,
    ReLU, parts ``self_attn``, ``linear1``, ``linear2``, ``norm1``, ``norm2``;
    ``forward(x, attn_mask=None)``) against ``torch.nn.TransformerEncoderLayer`` with the same weights.
    When its signature takes ``norm_first``, ``norm_first=True`` is checked against torch's pre-LN
    layer too."""
    with torch.random.fork_rng(devices=[]):  # building the layers must not shift the learner's seed
        return _run_cases(candidate)


def _run_cases(candidate) -> int:
    n = 0
    cases = _cases(_takes_norm_first(candidate))
    for seed, (case, d_model, num_heads, d_ff, dropout, norm_first, x, mask) in enumerate(cases):
        flag = {"norm_first": True} if norm_first else {}
        layer = call_candidate(candidate, case, d_model, num_heads, d_ff, dropout=dropout, **flag)
        if not isinstance(layer, nn.Module):
            raise ExerciseFailure(
                f"Case {case!r}: EncoderLayer(...) gave a {type(layer).__name__}; make the "
                f"class an nn.Module (class EncoderLayer(nn.Module)) and call super().__init__()."
            )
        layer.eval()
        reference_layer = _torch_layer(d_model, num_heads, d_ff, seed, norm_first)
        _load_torch_weights(layer, reference_layer, case)
        src_mask, padding = _torch_masks(mask)  # torch's src_mask, src_key_padding_mask
        with torch.no_grad():
            got = call_candidate(layer, case, x.clone(), attn_mask=mask)
            expected = reference_layer(x.double(), src_mask=src_mask, src_key_padding_mask=padding)
        if isinstance(got, tuple):
            raise ExerciseFailure(
                f"Case {case!r}: your forward returned a tuple of {len(got)}; return only the "
                f"layer's output, a tensor (B, L, d_model). (self_attn returns (output, "
                f"weights): keep the output, e.g. attended, _ = self.self_attn(x, x, x, ...).)"
            )
        require_shape(
            case,
            "the output",
            got,
            x.shape,
            "the layer keeps the shape of its input (B, L, d_model).",
        )
        if dropout > 0:
            _require_no_dropout_in_eval(layer, case, x, got)
        compare(
            case,
            "outputs",
            got,
            expected,
            atol=1e-4,
            rtol=1e-3,
            mistakes=_mistakes(reference_layer, mask, norm_first),
            args=(x.double(),),
            cause=_nan_hint(got, mask),
            fallback_cause=f"compare your forward with the steps: {_PRE if norm_first else _POST}, "
            "with MultiHead(y) = self_attn(y, y, y, attn_mask)[0] and FFN(z) = "
            "linear2(relu(linear1(z))).",
        )
        n += 1
    return n


def _nan_hint(got: torch.Tensor, mask: torch.Tensor | None) -> str | None:
    """NaN in a masked case: some query was left with no key to attend to."""
    if not torch.isnan(got).any() or mask is None:
        return None
    if not (~mask).any(dim=-1).all():  # the inverted mask blanks out whole rows: the NaN rows
        return (
            "the mask is inverted: here True means 'may attend' (as in your MultiHeadAttention); pass "
            "attn_mask on unchanged. Inverted, some queries may attend to nothing, and the softmax "
            "of a row of -inf is NaN."
        )
    return "NaN: some query may attend to no key, so its softmax is over a row of -inf."


def _require_no_dropout_in_eval(layer, case: str, x: torch.Tensor, got: torch.Tensor) -> None:
    """In eval mode the layer is deterministic: two calls give the same output."""
    with torch.no_grad():
        again = call_candidate(layer, case, x.clone())
    if not torch.equal(got, again):
        raise ExerciseFailure(
            f"Case {case!r}: two calls on the same input gave different outputs, although the layer is "
            f"in eval mode.\nLikely cause: dropout is still on. Use nn.Dropout modules (model.eval() "
            f"switches them off), or F.dropout(x, p, training=self.training)."
        )
