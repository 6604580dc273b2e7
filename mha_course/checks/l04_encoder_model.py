"""Lesson 04's model, token ids in and a score per vocabulary token out (EncoderModel: its layers
made to differ, held to its own parts put together rightly), and one step of training it
(train_step: run with plain SGD once, twice in a row, and with a max_norm that clips)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import numbers
import types

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from .. import positional
from .._validate import shape_str
from . import families
from ._core import call_candidate, exercise
from ._failure import ExerciseFailure
from ._table import Case, Out, Table, build_module, call_diagnosed
from .l04_encoder_layer import EncoderLayer

# ---------------------------------------------------------------- EncoderModel


class EncoderModel(nn.Module):
    """The reference: tokens (B, L) and padding (B, L, True at the pads) -> scores (B, L,
    vocab_size). ``layer_class`` and ``positional_encoding`` (keyword-only, not in the skeleton)
    build it from other parts: the learner's EncoderLayer and positional encoding."""

    def __init__(
        self,
        vocab_size,
        d_model,
        nhead,
        num_layers,
        dim_feedforward,
        max_len,
        *,
        layer_class=EncoderLayer,
        positional_encoding=positional.positional_encoding,
    ):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", positional_encoding(max_len, d_model))  # fixed, not trained
        self.layers = nn.ModuleList(
            layer_class(d_model, nhead, dim_feedforward) for _ in range(num_layers)
        )
        self.readout = nn.Linear(d_model, vocab_size)

    def forward(self, tokens, padding):
        return _model(tokens, padding, self)


def _model(tokens, padding, model, flaw: str = ""):
    """``model``'s embed, pe, layers and readout on a batch: Step 1, every layer in turn with the
    mask (True where a query may attend), the read-out; or with ``flaw`` (see :data:`_MODEL_WHY`)."""
    x = model.embed(tokens)
    if flaw == "embeddings scaled":
        x = x * model.embed.embedding_dim**0.5
    if flaw != "no positional encoding":
        x = x + model.pe[: tokens.size(1)]  # Step 1
    may_attend = rearrange(~padding, "b s -> b 1 1 s")  # the same for every head and query
    mask = {
        "padding as the mask": ~may_attend,
        "mask (B, L) as it is": ~padding,
        "mask on the queries": rearrange(~padding, "b l -> b 1 l 1"),
        "no mask": None,
    }.get(flaw, may_attend)
    layers = list(model.layers)
    layers = {
        "layers in reverse order": layers[::-1],
        "only the first layer": layers[:1],
        "the first layer, num_layers times": layers[:1] * len(layers),
    }.get(flaw, layers)
    h = x
    for i, layer in enumerate(layers):  # Steps 2 and 3, N times
        h = layer(
            x if flaw == "every layer on Step 1" else h,
            attn_mask=None if i and flaw == "mask only to the first layer" else mask,
        )
    return model.readout(h)


_MASK = "True where a query may attend, (B, 1, 1, L)"
_ARGS = ("vocab_size", "d_model", "nhead", "num_layers", "dim_feedforward", "max_len")
_MODEL_WHY = {
    "no positional encoding": "Step 1 has no positional encoding: X' is the embeddings plus the "
    "first L rows of the PE table.",
    "embeddings scaled": "the embeddings are scaled by √d_model. The paper does (section 3.4), "
    "but this lesson's Step 1 is the DLI's: Embedding + PositionEncoding, unscaled.",
    "padding as the mask": "the layers got `padding` itself as their mask: it is True at the "
    f"pads, but the layers' mask is {_MASK}, the opposite.",
    "mask (B, L) as it is": "the mask is (B, L), so it lines up with the scores' last two axes "
    "(L, S) instead of (B, S): it needs an axis for the heads and one for the queries, "
    "(B, 1, 1, L).",
    "mask on the queries": "your mask (B, 1, L, 1) masks queries, not keys: real tokens still "
    "read the pads. Padding is a property of the keys: (B, 1, 1, L).",
    "no mask": "the layers get no mask, so every token attends to the padding too: every layer "
    f"gets the mask, {_MASK}.",
    "mask only to the first layer": "only the first layer gets the mask; every layer needs it, "
    "or the later ones read the pads.",
    "every layer on Step 1": "every layer reads Step 1's output, so only the last one counts (is "
    "x reassigned from Step 1 in the loop?); each layer reads the previous one's output.",
    "layers in reverse order": "the layers run in reverse order; self.layers[0] comes first.",
    "only the first layer": "only the first layer runs; all of them run, in order, each on the "
    "previous one's output.",
    "the first layer, num_layers times": "the first layer runs num_layers times; each layer "
    "runs once, in order.",
}


def _model_cases():
    g, seeds = torch.Generator().manual_seed(44), iter(range(100))

    def data(sizes, shape, lengths):  # (args, kwargs, extra) of a Case
        sizes = dict(zip(_ARGS, sizes, strict=True))  # the model is built with keywords
        tokens = torch.randint(0, sizes["vocab_size"], shape, generator=g)
        padding = torch.arange(shape[1]) >= torch.tensor(lengths)[:, None]  # True at the pads
        pe = positional.positional_encoding(sizes["max_len"], sizes["d_model"])
        model = types.SimpleNamespace(pe=pe)  # the learner's parts go in: embed, layers, readout
        return (tokens, padding, model), {}, {"sizes": sizes, "seed": next(seeds)}

    yield Case(
        "vocab_size 7, d_model 8, nhead 2, num_layers 2, dim_feedforward 16, max_len 8; tokens "
        "(2, 6), the last 2 of sequence 1 are padding",
        *data((7, 8, 2, 2, 16, 8), (2, 6), [6, 4]),
    )
    yield Case("3 layers; tokens (3, 5), no padding", *data((9, 8, 2, 3, 16, 8), (3, 5), [5, 5, 5]))
    yield Case(
        "1 layer, d_model 4, 1 head; tokens (2, 10) as long as max_len, padding in both",
        *data((5, 4, 1, 1, 8, 10), (2, 10), [7, 3]),
    )
    yield Case(
        "4 layers, d_model 12, 3 heads; tokens (3, 4), shorter than max_len 9",
        *data((11, 12, 3, 4, 24, 9), (3, 4), [4, 2, 3]),
    )


def _require_parts(model: nn.Module, case: str, vocab_size: int, d_model: int, **_) -> list:
    """``model.embed`` and ``model.readout``: an nn.Embedding and an nn.Linear of the right sizes."""
    found = []
    for name, kind, n_in, n_out, expected in (
        ("embed", nn.Embedding, "num_embeddings", "embedding_dim", (vocab_size, d_model)),
        ("readout", nn.Linear, "in_features", "out_features", (d_model, vocab_size)),
    ):
        part = getattr(model, name, None)
        if not isinstance(part, kind):
            got = "no attribute" if part is None else f"a {type(part).__name__} as"
            raise ExerciseFailure(
                f"Case {case!r}: your EncoderModel has {got} `{name}`; __init__ creates it, an "
                f"nn.{kind.__name__}."
            )
        if (getattr(part, n_in), getattr(part, n_out)) != expected:
            raise ExerciseFailure(
                f"Case {case!r}: self.{name} maps {getattr(part, n_in)} -> {getattr(part, n_out)}, "
                f"expected {expected[0]} -> {expected[1]}: one embedding row per token of the "
                f"vocabulary, one score per token out (vocab_size = {vocab_size}, d_model = "
                f"{d_model})."
            )
        found.append(part)
    return found


_LAYERS = "an nn.ModuleList of num_layers encoder layers, each with weights of its own"


def _layers(model: nn.Module, num_layers: int, case: str) -> list[nn.Module]:
    """``model.layers``: an nn.ModuleList of ``num_layers`` distinct layers sharing no weights."""
    layers = getattr(model, "layers", None)
    problem = None
    if layers is None:
        problem = "your EncoderModel has no attribute `layers`"
    elif isinstance(layers, (list, tuple)):
        problem = (
            f"self.layers is a Python {type(layers).__name__}: PyTorch does not see the layers "
            "inside (the model's parameters, moving it to a device or to eval mode miss them)"
        )
    elif not isinstance(layers, (nn.ModuleList, nn.Sequential)):
        problem = f"self.layers is a {type(layers).__name__}"
    elif len(layers) != num_layers:
        problem = f"self.layers holds {len(layers)} layers, expected num_layers = {num_layers}"
    if problem:
        raise ExerciseFailure(f"Case {case!r}: {problem}; it is to be {_LAYERS}.")
    for (i, a), (j, b) in itertools.combinations(enumerate(layers), 2):
        if a is b:
            raise ExerciseFailure(
                f"Case {case!r}: self.layers[{i}] and self.layers[{j}] are one and the same layer: "
                "[layer] * num_layers repeats one object, so all the 'layers' share one set of "
                "weights. Make independent layers, as torch's TransformerEncoder does."
            )
        if {p.data_ptr() for p in a.parameters()} & {p.data_ptr() for p in b.parameters()}:
            raise ExerciseFailure(
                f"Case {case!r}: self.layers[{j}] shares its weights with self.layers[{i}]: "
                "copy.copy makes a shallow copy, whose parameters are the original's. Give each "
                "layer weights of its own."
            )
    return list(layers)


def _require_fixed_table(model: nn.Module, case: str, table: torch.Tensor) -> None:
    """The PE table is a buffer: not trained, and moved with the model."""
    loose = [name for name, value in vars(model).items() if isinstance(value, torch.Tensor)]
    if loose:
        raise ExerciseFailure(
            f"Case {case!r}: self.{loose[0]} is a plain tensor attribute: moving the model to a "
            "device would leave it behind. Register the PE table as a buffer."
        )
    for name, p in model.named_parameters():
        if p.shape == table.shape and torch.allclose(p.detach().float(), table, atol=1e-5):
            raise ExerciseFailure(
                f"Case {case!r}: the PE table is a parameter (`{name}`), so training would change "
                "it. Step 1's encoding is fixed: register it as a buffer."
            )


def _call_model(candidate, case: Case, table: Table):
    tokens, padding, parts = case.args
    sizes = case.extra["sizes"]
    model = build_module(candidate, case, (), **sizes).eval()
    parts.embed, parts.readout = _require_parts(model, case.name, **sizes)
    parts.layers = _layers(model, sizes["num_layers"], case.name)
    _require_fixed_table(model, case.name, parts.pe)
    g = torch.Generator().manual_seed(case.extra["seed"])
    with torch.no_grad():  # each layer's weights its own way, so that which layer ran where shows
        for p in itertools.chain.from_iterable(layer.parameters() for layer in parts.layers):
            p.add_(0.2 * torch.randn(p.shape, generator=g, dtype=p.dtype))
        mistakes = [
            dataclasses.replace(m, run=functools.partial(m.run, model=parts))
            for m in table.mistakes
        ]
        return call_diagnosed(
            model, dataclasses.replace(case, args=(tokens, padding)), mistakes, _MODEL_CRASH
        )


_MODEL_CRASH = (
    f"forward(tokens, padding): Step 1 with the first L rows of the PE table, then every layer "
    f"with the mask, {_MASK}, then the read-out."
)


def _scores_shape(got, case: Case) -> str:
    vocab_size, d_model = case.extra["sizes"]["vocab_size"], case.extra["sizes"]["d_model"]
    if got.dim() == 3 and got.size(-1) == d_model != vocab_size:
        return "your scores have d_model features: the read-out is missing."
    return "one score per token of the vocabulary at every position: (B, L, vocab_size)."


ENCODER_MODEL = Table(
    cases=_model_cases,
    reference=_model,
    mistakes=families.mistakes(
        lambda flaw: lambda tokens, padding, model: _model(tokens, padding, model, flaw),
        _MODEL_WHY,
        **_MODEL_WHY,
    ),
    call=_call_model,
    outputs=[
        Out(
            "the scores",
            shape_hint=_scores_shape,
            fallback="Step 1 (embedding + the PE table's first L rows), every layer in turn with "
            f"the mask, {_MASK}, then the read-out.",
        )
    ],
    double=False,
)
check_encoder_model = exercise(
    "EncoderModel",
    "04",
    reference=EncoderModel,
    todo="Replace `raise NotImplementedError` in EncoderModel: its parts, then its forward.",
    points=2,
    table=ENCODER_MODEL,
)


# ---------------------------------------------------------------- train_step


def train_step(model, optimizer, tokens, targets, padding, max_norm=1.0, *, flaw=""):
    """The reference: one step of training ``model(tokens, padding) -> scores (B, L, V)``: the
    mean cross-entropy over the real positions, gradients clipped to a total norm of
    ``max_norm``, one update; returns the loss, detached. (``flaw``: a classic mistake of
    :data:`_STEP_WHY` switched on.)"""
    scores = model(tokens, padding)
    flat, wanted = rearrange(scores, "b l v -> (b l) v"), targets.flatten()
    real, kept = ~padding.flatten(), targets.masked_fill(padding, -100).flatten()  # -100: ignored
    loss = {
        "padding counted": lambda: F.cross_entropy(flat, wanted),
        "mean over every position": lambda: (
            F.cross_entropy(flat, wanted, reduction="none") * real
        ).mean(),
        "sum": lambda: F.cross_entropy(flat, kept, reduction="sum"),
        "softmax first": lambda: F.cross_entropy(flat.softmax(-1), kept),
        "nll on scores": lambda: F.nll_loss(flat, kept),
        "classes on axis 1": lambda: F.cross_entropy(scores, targets.masked_fill(padding, -100)),
    }.get(flaw, lambda: F.cross_entropy(flat, kept))()
    if flaw != "no zero_grad":
        optimizer.zero_grad()
    loss.backward()
    if flaw == "zero_grad after backward":
        optimizer.zero_grad()
    params, clip = list(model.parameters()), nn.utils.clip_grad_norm_
    {
        "no clipping": lambda: None,
        "clip to 1.0": lambda: clip(params, 1.0),
        "clip by value": lambda: nn.utils.clip_grad_value_(params, max_norm),
        "clip each parameter": lambda: [clip(p, max_norm) for p in params],
    }.get(flaw, lambda: clip(params, max_norm))()
    optimizer.step()
    return loss.detach()


_STEP = (
    "the scores, the loss over the real positions, the gradients cleared, the backward pass, the "
    "clipping, the optimizer's step"
)
_STEP_WHY = {
    "padding counted": "the loss counts the padding positions too: their targets are not real, "
    "and the model learns to predict them. Only the positions where padding is False count "
    "(cross-entropy ignores a target of −100, too).",
    "mean over every position": "the padding is left out of the sum, but you divided by all B·L "
    "positions: the mean is over the real positions only.",
    "sum": "the loss is summed; it is the mean over the real positions (cross-entropy's default "
    "reduction).",
    "softmax first": "you applied softmax before F.cross_entropy, which applies log-softmax "
    "itself: it takes the raw scores.",
    "nll on scores": "F.nll_loss expects log-probabilities, and these are raw scores: "
    "F.cross_entropy applies the log-softmax for you.",
    "classes on axis 1": "F.cross_entropy took your (B, L, V) scores as (B, C, ...), with the "
    "classes on axis 1: that reads the L positions as classes. It takes (B·L, V) scores with "
    "(B·L,) targets, or (B, V, L) with (B, L).",
    "no zero_grad": "the second step's update holds the first step's gradients too: the backward "
    "pass adds to .grad, so every step clears the gradients before its backward pass.",
    "zero_grad after backward": "the weights did not change. A step needs the backward pass, then "
    "the optimizer's step, and no clearing of the gradients between the two.",
    "no clipping": "the gradients were not clipped: clip_grad_norm_ on the model's parameters "
    "with max_norm, after the backward pass and before the optimizer's step (before the backward "
    "pass there is nothing to clip yet; after the step it is too late).",
    "clip to 1.0": "the gradients were clipped to norm 1.0 instead of max_norm: use the argument.",
    "clip by value": "clip_grad_value_ caps each number; the step clips the gradients' total "
    "norm (clip_grad_norm_).",
    "clip each parameter": "you clipped each parameter's gradient on its own; clip_grad_norm_ "
    "takes all the model's parameters at once and scales them together, by their total norm.",
}


class _Tagger(nn.Module):
    """A small model with the lesson's interface: (tokens, padding) -> scores (B, L, V)."""

    def __init__(self, vocab_size: int, max_len: int, width: int = 6):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, width)
        self.position = nn.Parameter(torch.randn(max_len, width))
        self.readout = nn.Linear(width, vocab_size)

    def forward(self, tokens, padding):
        x = torch.tanh(self.embed(tokens) + self.position[: tokens.size(1)])
        return self.readout(x) * 3  # confident scores: large gradients, so the clipping acts


def _train(step, model, tokens, targets, padding, steps, max_norm, case=None):
    """``step`` run ``steps`` times with plain SGD on a copy of ``model`` (``case``: the learner's
    step, in that case): (the losses, the weights after)."""
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    options = {} if max_norm is None else {"max_norm": max_norm}
    losses = []
    with torch.enable_grad():
        for _ in range(steps):
            batch = (model, optimizer, tokens.clone(), targets.clone(), padding.clone())
            if case is None:
                losses.append(float(step(*batch, **options)))
            else:
                loss = call_candidate(step, case.name, *batch, crash_hint=_STEP_CRASH, **options)
                losses.append(_as_number(loss, case.name))
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    return torch.tensor(losses, dtype=torch.float64), weights.double()


_STEP_CRASH = (
    "F.cross_entropy takes the scores with the classes on axis 1: (N, V) with targets (N,) "
    "(B and L flattened together, or only the real positions kept), or (B, V, L) with (B, L)."
)


def _as_number(loss, case: str) -> float:
    if torch.is_tensor(loss) and loss.requires_grad:
        problem = (
            "the loss still attached to its graph (it requires grad).\nLikely cause: kept in a "
            "list, every step's graph stays in memory: detach the loss, or turn it into a number"
        )
    elif torch.is_tensor(loss) and loss.numel() != 1:
        problem = f"a tensor of shape {shape_str(loss.shape)}; it returns the loss, one number"
    elif isinstance(loss, bool) or not isinstance(loss, (numbers.Real, torch.Tensor)):
        problem = f"{type(loss).__name__}; it returns the loss, a 0-d tensor (detached) or a float"
    else:
        return float(loss)
    raise ExerciseFailure(f"Case {case!r}: your step returned {problem}.")


def _step_cases():
    g = torch.Generator().manual_seed(45)

    def data(vocab_size, L, lengths, steps, max_norm, seed):  # the args of a Case
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = _Tagger(vocab_size, L)
        tokens, targets = (
            torch.randint(0, vocab_size, (len(lengths), L), generator=g) for _ in "tt"
        )
        padding = torch.arange(L) >= torch.tensor(lengths)[:, None]
        return model, tokens, targets, padding, steps, max_norm

    yield Case(
        "one step; B = 3, L = V = 6, sequences of 6, 4 and 3 real tokens; max_norm = 100 (no "
        "clipping)",
        data(6, 6, [6, 4, 3], 1, 100.0, 0),
    )
    yield Case(
        "two steps in a row on one batch; L = 5, V = 7; max_norm = 100",
        data(7, 5, [5, 2], 2, 100.0, 1),
    )
    yield Case(
        "one step with max_norm = 0.05: the gradients' total norm is larger, so it is clipped",
        data(7, 5, [5, 3], 1, 0.05, 2),
    )
    yield Case(
        "one step with the default max_norm (1.0), called without it",
        data(5, 4, [4, 1, 2], 1, None, 3),
    )


TRAIN_STEP = Table(
    cases=_step_cases,
    reference=functools.partial(_train, train_step),
    mistakes=families.mistakes(
        lambda flaw: functools.partial(_train, functools.partial(train_step, flaw=flaw)),
        _STEP_WHY,
        **_STEP_WHY,
    ),
    call=lambda candidate, case, table: _train(candidate, *case.args, case=case),
    outputs=[
        Out("your step's losses", 0, fallback=f"one step is: {_STEP}."),
        Out("the weights after your step", 1, fallback=f"one step is: {_STEP}."),
    ],
    double=False,
)
check_train_step = exercise(
    "train_step",
    "04",
    reference=train_step,
    todo="Replace `raise NotImplementedError` in train_step: the loss, then the update.",
    table=TRAIN_STEP,
)
