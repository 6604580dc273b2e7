"""Checkers for lesson 04's two modules around the encoder layer: the feed-forward network, and
the stack of N layers.

``FeedForward`` is compared with torch's own parts, ``linear2(relu(linear1(x)))`` built from
``nn.Linear`` modules whose weights are copied into the learner's. ``EncoderStack`` is built from a
small encoder layer; the checker then makes each copy different, so that the order of the layers,
a layer applied twice and a shared layer all show in the output.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import nn

from .. import reference
from ._core import Mistake, call_candidate, checker
from ._failure import ExerciseFailure
from ._steps import build_module, call_diagnosed, copy_linear, randn, require_tensor

__all__ = ["check_feed_forward", "check_encoder_stack"]


# ---------------------------------------------------------------- FeedForward

_FFN = "self.linear2(torch.relu(self.linear1(x)))"


def _ffn_mistakes(linear1: nn.Linear, linear2: nn.Linear) -> list[Mistake]:
    return [
        Mistake(
            "no ReLU",
            lambda x: linear2(linear1(x)),
            f"there is no ReLU between the two Linears, so the network is one linear map: {_FFN}.",
        ),
        Mistake(
            "ReLU after linear2 too",
            lambda x: F.relu(linear2(F.relu(linear1(x)))),
            "you applied ReLU after linear2 as well; the network ends with linear2, so its output "
            f"can be negative: {_FFN}.",
        ),
        Mistake(
            "GELU",
            lambda x: linear2(F.gelu(linear1(x))),
            "the activation is GELU; the lesson's layer (like the original paper's) uses ReLU: "
            f"{_FFN}. (BERT and MiniLM use GELU: that is lesson 05.)",
        ),
        Mistake(
            "Linears in the wrong order",
            lambda x: linear1(F.relu(linear2(x))),
            "the two Linears run in the wrong order: linear1 (d_model -> d_ff) first, then ReLU, "
            f"then linear2 (d_ff -> d_model): {_FFN}.",
        ),
        Mistake(
            "ReLU before linear1",
            lambda x: linear2(linear1(F.relu(x))),
            f"the ReLU goes between the two Linears, not on the input: {_FFN}.",
        ),
        Mistake(
            "residual inside",
            lambda x: x + linear2(F.relu(linear1(x))),
            "you added x: the feed-forward network has no residual of its own (the encoder layer "
            f"adds it in Step 3): {_FFN}.",
        ),
    ]


def _ffn_shape_hint(d_model: int, d_ff: int):
    def hint(got: torch.Tensor, x: torch.Tensor) -> str:
        if got.size(-1) == d_ff != d_model:
            return f"your output has d_ff = {d_ff} features: apply linear2 too, {_FFN}."
        return f"the network keeps the shape of its input (..., d_model): {_FFN}."

    return hint


def _ffn_cases():
    g = torch.Generator().manual_seed(40)
    yield "d_model=8, d_ff=32; a batch x (2, 5, 8)", 8, 32, randn(g, 2, 5, 8)
    yield "d_model=6, d_ff=6; x (3, 6), no batch axis", 6, 6, randn(g, 3, 6)
    yield "d_model=4, d_ff=16; one token x (1, 1, 4)", 4, 16, randn(g, 1, 1, 4)
    yield "d_model=5, d_ff=3 (smaller); x (2, 2, 4, 5)", 5, 3, randn(g, 2, 2, 4, 5)


def _torch_linear(n_in: int, n_out: int, seed: int) -> nn.Linear:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        linear = nn.Linear(n_in, n_out)
        with torch.no_grad():
            linear.bias.normal_(0.0, 0.5)  # torch starts small; a dropped bias should show
    return linear


@checker(
    "FeedForward",
    "Replace `raise NotImplementedError` in FeedForward: two Linears in __init__, "
    "linear2(relu(linear1(x))) in forward.",
)
def check_feed_forward(candidate) -> int:
    """Check ``candidate(d_model, d_ff)`` (a FeedForward class with ``linear1``, ``linear2``;
    ``forward(x) = linear2(relu(linear1(x)))``) against torch's Linears with the same weights."""
    with torch.random.fork_rng(
        devices=[]
    ):  # building the modules must not shift the learner's seed
        n = 0
        for seed, (case, d_model, d_ff, x) in enumerate(_ffn_cases()):
            module = build_module(
                candidate, case, "FeedForward", (d_model, d_ff), "check_feed_forward"
            )
            linear1 = _torch_linear(d_model, d_ff, 2 * seed)
            linear2 = _torch_linear(d_ff, d_model, 2 * seed + 1)
            copy_linear(
                module,
                "linear1",
                linear1,
                case,
                f"nn.Linear(d_model, d_ff) = nn.Linear({d_model}, {d_ff})",
            )
            copy_linear(
                module,
                "linear2",
                linear2,
                case,
                f"nn.Linear(d_ff, d_model) = nn.Linear({d_ff}, {d_model})",
            )
            mistakes = _ffn_mistakes(linear1, linear2)
            with torch.no_grad():
                got = call_diagnosed(
                    module,
                    case,
                    (x,),
                    mistakes,
                    crash_hint=f"forward(x) runs linear1, then ReLU, then linear2: {_FFN}.",
                )
                require_tensor(
                    case,
                    "the outputs",
                    got,
                    linear2(F.relu(linear1(x))),
                    mistakes,
                    (x,),
                    shape_hint=_ffn_shape_hint(d_model, d_ff),
                    fallback_cause=f"forward(x) = {_FFN}.",
                )
            n += 1
        return n


# ---------------------------------------------------------------- EncoderStack

_LOOP = "for layer in self.layers: x = layer(x, attn_mask=attn_mask)"
_DEEPCOPY = "nn.ModuleList(copy.deepcopy(layer) for _ in range(num_layers))"


def _run(layers, x, mask, masks_for=None):
    """The layers in order, each on the previous one's output; ``masks_for(i)`` picks layer i's mask."""
    for i, layer in enumerate(layers):
        x = layer(x, attn_mask=mask if masks_for is None else masks_for(i))
    return x


def _stack_mistakes(layers, original: nn.Module, mask) -> list[Mistake]:
    return [
        Mistake(
            "every layer on x",
            lambda x: layers[-1](x, attn_mask=mask),
            "your output is the last layer applied to the input x: every layer must read the "
            f"previous one's output, not x: {_LOOP}.",
        ),
        Mistake(
            "reverse order",
            lambda x: _run(list(layers)[::-1], x, mask),
            f"the layers run in reverse order; layer 0 comes first: {_LOOP}.",
        ),
        Mistake(
            "mask not passed on",
            lambda x: _run(layers, x, None),
            "the mask is not passed on: every layer needs it, layer(x, attn_mask=attn_mask).",
        ),
        Mistake(
            "mask only to the first layer",
            lambda x: _run(layers, x, None, lambda i: mask if i == 0 else None),
            f"only the first layer gets the mask; every layer needs it: {_LOOP}.",
        ),
        Mistake(
            "mask inverted",
            lambda x: _run(layers, x, None if mask is None else ~mask),
            "the mask is inverted: pass attn_mask on unchanged (True = may attend, as in your "
            "EncoderLayer).",
        ),
        Mistake(
            "only the first layer",
            lambda x: layers[0](x, attn_mask=mask),
            f"only the first layer runs; run them all, in order: {_LOOP}.",
        ),
        Mistake(
            "the first layer, num_layers times",
            lambda x: _run([layers[0]] * len(layers), x, mask),
            f"you ran the first layer num_layers times; run each layer once, in order: {_LOOP}.",
        ),
        Mistake(
            "the given layer, num_layers times",
            lambda x: _run([original] * len(layers), x, mask),
            "you ran the layer you were given num_layers times; run the copies in self.layers: "
            f"{_LOOP}.",
        ),
    ]


def module_list(
    owner: nn.Module, num_layers: int, case: str, make: str, original: nn.Module | None = None
) -> list[nn.Module]:
    """``owner.layers``, checked: an nn.ModuleList of ``num_layers`` distinct layers that share no
    weights (with ``original`` either, when given: they are to be copies of it); ``make`` is the
    line that builds it right, for the messages."""
    what = type(owner).__name__
    layers = getattr(owner, "layers", None)
    if layers is None:
        raise ExerciseFailure(
            f"Case {case!r}: your {what} has no attribute `layers`; create it in __init__: "
            f"self.layers = {make}."
        )
    if isinstance(layers, (list, tuple)):
        raise ExerciseFailure(
            f"Case {case!r}: self.layers is a Python {type(layers).__name__}; wrap it in "
            f"nn.ModuleList, so that PyTorch sees the layers inside ({what.lower()}.parameters(), "
            f".to(device) and .eval() would miss them): self.layers = {make}."
        )
    if not isinstance(layers, (nn.ModuleList, nn.Sequential)):
        raise ExerciseFailure(
            f"Case {case!r}: self.layers is a {type(layers).__name__}; make it an nn.ModuleList of "
            f"the layers: self.layers = {make}."
        )
    layers = list(layers)
    if len(layers) != num_layers:
        raise ExerciseFailure(
            f"Case {case!r}: self.layers holds {len(layers)} layers, expected num_layers = "
            f"{num_layers}: self.layers = {make}."
        )
    for i, j in itertools.combinations(range(len(layers)), 2):
        if layers[i] is layers[j]:
            raise ExerciseFailure(
                f"Case {case!r}: self.layers[{i}] and self.layers[{j}] are one and the same layer: "
                f"[layer] * num_layers repeats one object, so all the 'layers' share one set of "
                f"weights. Make independent layers, as torch's TransformerEncoder does: "
                f"self.layers = {make}."
            )
    if original is not None:
        _require_copies_of(original, layers, case)
    for (i, a), (j, b) in itertools.combinations(enumerate([original, *layers]), 2):
        if a is not None and _weights(a) & _weights(b):
            which = "the layer you were given" if i == 0 else f"self.layers[{i - 1}]"
            raise ExerciseFailure(
                f"Case {case!r}: self.layers[{j - 1}] shares its weights with {which}: "
                f"copy.copy makes a shallow copy, whose parameters are the original's. Give each "
                f"layer weights of its own: self.layers = {make}."
            )
    return layers


def _weights(module: nn.Module) -> set[int]:
    return {p.data_ptr() for p in module.parameters()}


def _require_copies_of(original: nn.Module, layers: list[nn.Module], case: str) -> None:
    for i, layer in enumerate(layers):
        if layer is original:
            raise ExerciseFailure(
                f"Case {case!r}: self.layers[{i}] is the layer you were given itself, not a copy; "
                f"the stack holds num_layers copies of it: self.layers = {_DEEPCOPY}."
            )
        if type(layer) is not type(original):
            raise ExerciseFailure(
                f"Case {case!r}: self.layers[{i}] is a {type(layer).__name__}, expected a copy of "
                f"the {type(original).__name__} you were given: copy.deepcopy(layer)."
            )


def _layers(stack: nn.Module, original: nn.Module, num_layers: int, case: str) -> list[nn.Module]:
    """``stack.layers``, checked: a module list of ``num_layers`` independent copies of ``original``."""
    layers = module_list(stack, num_layers, case, _DEEPCOPY, original)
    start = original.state_dict()
    for i, layer in enumerate(layers):
        if any(not torch.equal(t, start[k]) for k, t in layer.state_dict().items()):
            raise ExerciseFailure(
                f"Case {case!r}: self.layers[{i}] does not start with the weights of the layer you "
                f"were given; each copy starts as an exact copy: copy.deepcopy(layer)."
            )
    return layers


def _stack_cases():
    """(case, num_layers, d_model, num_heads, x, mask); masks are True where a query may attend."""
    g = torch.Generator().manual_seed(41)
    padding = torch.tensor([[True] * 5, [True] * 3 + [False] * 2]).view(2, 1, 1, 5)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    yield "3 layers (d_model 8, 2 heads); x (2, 5, 8), no mask", 3, 8, 2, randn(g, 2, 5, 8), None
    yield (
        "2 layers; padding mask (2, 1, 1, 5), True = may attend: the last 2 tokens of "
        "sentence 2 are padding",
        2,
        8,
        2,
        randn(g, 2, 5, 8),
        padding,
    )
    yield "4 layers; causal mask (5, 5), True = may attend", 4, 8, 2, randn(g, 1, 5, 8), causal
    yield "1 layer (d_model 4, 1 head); one sentence x (1, 3, 4)", 1, 4, 1, randn(g, 1, 3, 4), None


def _small_layer(d_model: int, num_heads: int, seed: int) -> nn.Module:
    """The course's encoder layer, small, with random LayerNorm weights too."""
    torch.manual_seed(seed)
    layer = reference.EncoderLayer(d_model, num_heads, 2 * d_model)
    with torch.no_grad():
        for norm in (layer.norm1, layer.norm2):
            norm.weight.normal_(1.0, 0.3)
            norm.bias.normal_(0.0, 0.3)
    return layer.eval()


def _make_copies_differ(layers: list[nn.Module], seed: int) -> None:
    """Nudge each copy's weights its own way, so that which layer ran where shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in layers:
            for p in layer.parameters():
                p.add_(0.2 * torch.randn(p.shape, generator=g, dtype=p.dtype))


@checker(
    "EncoderStack",
    "Replace `raise NotImplementedError` in EncoderStack: num_layers deep copies in __init__, "
    "then run them in order in forward.",
)
def check_encoder_stack(candidate) -> int:
    """Check ``candidate(layer, num_layers)`` (an EncoderStack class: ``self.layers`` an
    nn.ModuleList of independent deep copies; ``forward(x, attn_mask=None)`` runs them in order)."""
    with torch.random.fork_rng(devices=[]):  # building the layers must not shift the learner's seed
        n = 0
        for seed, (case, num_layers, d_model, num_heads, x, mask) in enumerate(_stack_cases()):
            original = _small_layer(d_model, num_heads, seed)
            stack = build_module(
                candidate, case, "EncoderStack", (original, num_layers), "check_encoder_stack"
            )
            stack.eval()
            layers = _layers(stack, original, num_layers, case)
            _make_copies_differ(layers, seed)
            with torch.no_grad():
                kwargs = {} if mask is None else {"attn_mask": mask}
                got = call_candidate(
                    stack,
                    case,
                    x.clone(),
                    **kwargs,
                    crash_hint=f"forward(x, attn_mask=None) runs each layer on the previous "
                    f"one's output: {_LOOP}; then return x.",
                )
                if isinstance(got, tuple):
                    raise ExerciseFailure(
                        f"Case {case!r}: your forward returned a tuple of {len(got)}; return only "
                        f"the last layer's output, a tensor (B, L, d_model)."
                    )
                require_tensor(
                    case,
                    "the outputs",
                    got,
                    _run(layers, x, mask),
                    _stack_mistakes(layers, original, mask),
                    (x,),
                    shape_hint="the stack keeps the shape of its input (B, L, d_model).",
                    fallback_cause=f"run every layer once, in order, each on the previous one's "
                    f"output, passing the mask on: {_LOOP}.",
                )
            n += 1
        return n
