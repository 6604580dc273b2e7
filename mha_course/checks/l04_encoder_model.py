"""Lesson 04's model, token ids in and a score per vocabulary token out (EncoderModel, held to its
own parts put together rightly), and one step of training it with plain SGD (train_step)."""

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
        layers = (layer_class(d_model, nhead, dim_feedforward) for _ in range(num_layers))
        self.layers = nn.ModuleList(layers)
        self.readout = nn.Linear(d_model, vocab_size)

    def forward(self, tokens, padding):
        return _model(tokens, padding, self)


def _model(tokens, padding, model, flaw: str = ""):
    """``model``'s embed, pe, layers and readout on a batch; ``flaw``: of :data:`_MODEL_WHY`."""
    x = model.embed(tokens) * (model.embed.embedding_dim**0.5 if flaw == "embeddings scaled" else 1)
    if flaw != "no positional encoding":
        x = x + model.pe[: tokens.size(1)]  # Step 1
    may_attend = rearrange(~padding, "b s -> b 1 1 s")  # the same for every head and query
    masks = {"padding as the mask": ~may_attend, "mask (B, L)": ~padding, "no mask": None}
    masks["mask on the queries"] = rearrange(~padding, "b l -> b 1 l 1")
    layers = list(model.layers)
    orders = {"layers reversed": layers[::-1], "first layer only": layers[:1]}
    layers = {**orders, "first layer N times": layers[:1] * len(layers)}.get(flaw, layers)
    h = x
    for i, layer in enumerate(layers):  # Steps 2 and 3, N times
        mask = None if i and flaw == "mask to the first layer" else masks.get(flaw, may_attend)
        h = layer(x if flaw == "every layer on Step 1" else h, attn_mask=mask)
    return model.readout(h)


_MASK = "True where a query may attend, (B, 1, 1, L)"
_ARGS = ("vocab_size", "d_model", "nhead", "num_layers", "dim_feedforward", "max_len")
_MODEL_WHY = {
    "no positional encoding": "Step 1 has no positional encoding (the PE table's first L rows).",
    "embeddings scaled": "the embeddings are scaled by √d_model (the paper's section 3.4); this "
    "lesson's Step 1 is unscaled.",
    "padding as the mask": "the layers got `padding` itself as their mask: it is True at the "
    f"pads, but the layers' mask is {_MASK}, the opposite.",
    "mask (B, L)": "the mask is (B, L): it lines up with the scores' (L, S), not (B, S); it needs "
    "axes for the heads and the queries, (B, 1, 1, L).",
    "mask on the queries": "your mask (B, 1, L, 1) masks queries, not keys: the pads are keys.",
    "no mask": f"the layers get no mask, so every token attends to the padding too: {_MASK}.",
    "mask to the first layer": "only the first layer gets the mask; every layer needs it.",
    "every layer on Step 1": "every layer reads Step 1's output, so only the last one counts (is "
    "x reassigned from Step 1 in the loop?); each layer reads the previous one's output.",
    "layers reversed": "the layers run in reverse order; self.layers[0] comes first.",
    "first layer only": "only the first layer runs; all of them run, in order.",
    "first layer N times": "the first layer runs num_layers times; each layer runs once, in order.",
}


def _model_cases():
    g, seeds = torch.Generator().manual_seed(44), iter(range(100))

    def data(sizes, shape, lengths):  # a Case's fields
        sizes = dict(zip(_ARGS, sizes, strict=True))  # the model is built with keywords
        tokens = torch.randint(0, sizes["vocab_size"], shape, generator=g)
        padding = torch.arange(shape[1]) >= torch.tensor(lengths)[:, None]  # True at the pads
        pe = positional.positional_encoding(sizes["max_len"], sizes["d_model"])
        model = types.SimpleNamespace(pe=pe)  # the learner's parts go in: embed, layers, readout
        return {"args": (tokens, padding, model), "extra": {"sizes": sizes, "seed": next(seeds)}}

    fields = data((7, 8, 2, 2, 16, 8), (2, 6), [6, 4])
    yield Case("vocab 7, d_model 8, 2 heads, 2 layers, d_ff 16, max_len 8; tokens (2, 6)", **fields)
    fields = data((9, 8, 2, 3, 16, 8), (3, 5), [5, 5, 5])
    yield Case("3 layers; tokens (3, 5), no padding", **fields)
    fields = data((5, 4, 1, 1, 8, 10), (2, 10), [7, 3])
    yield Case("1 layer, d_model 4, 1 head; tokens (2, 10) as long as max_len, padded", **fields)
    fields = data((11, 12, 3, 4, 24, 9), (3, 4), [4, 2, 3])
    yield Case("4 layers, d_model 12, 3 heads; tokens (3, 4), shorter than max_len 9", **fields)


def _require_parts(model, case: str, table, vocab_size: int, d_model: int, **_) -> list:
    """``model``'s embed and readout, of the right sizes; its PE ``table`` a buffer."""
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
    found = []
    for name, kind, n_in, n_out, expected in (
        ("embed", nn.Embedding, "num_embeddings", "embedding_dim", (vocab_size, d_model)),
        ("readout", nn.Linear, "in_features", "out_features", (d_model, vocab_size)),
    ):
        part = getattr(model, name, None)
        if not isinstance(part, kind):
            got = "no attribute" if part is None else f"a {type(part).__name__} as"
            problem = f"your EncoderModel has {got} `{name}`; __init__ makes an nn.{kind.__name__}"
        elif (getattr(part, n_in), getattr(part, n_out)) != expected:
            problem = (
                f"self.{name} maps {getattr(part, n_in)} -> {getattr(part, n_out)}, expected "
                f"{expected[0]} -> {expected[1]}: one embedding row per token of the vocabulary, "
                f"one score per token out (vocab_size = {vocab_size}, d_model = {d_model})"
            )
        else:
            found.append(part)
            continue
        raise ExerciseFailure(f"Case {case!r}: {problem}.")
    return found


def _layers(model: nn.Module, num_layers: int, case: str) -> list[nn.Module]:
    """``model.layers``: an nn.ModuleList of ``num_layers`` distinct layers sharing no weights."""
    layers, problem = getattr(model, "layers", None), None
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
            problem = (
                f"self.layers[{i}] and self.layers[{j}] are one and the same layer: [layer] * "
                "num_layers repeats one object, so all the 'layers' share one set of weights"
            )
        elif {p.data_ptr() for p in a.parameters()} & {p.data_ptr() for p in b.parameters()}:
            problem = (
                f"self.layers[{j}] shares its weights with self.layers[{i}]: copy.copy makes a "
                "shallow copy, whose parameters are the original's"
            )
        else:
            continue
        raise ExerciseFailure(f"Case {case!r}: {problem}. Give each layer weights of its own.")
    return list(layers)


_LAYERS = "an nn.ModuleList of num_layers encoder layers, each with weights of its own"


def _call_model(candidate, case: Case, table: Table):
    (tokens, padding, parts), sizes = case.args, case.extra["sizes"]
    model = build_module(candidate, case, (), **sizes).eval()
    parts.embed, parts.readout = _require_parts(model, case.name, parts.pe, **sizes)
    parts.layers = _layers(model, sizes["num_layers"], case.name)
    g = torch.Generator().manual_seed(case.extra["seed"])
    with torch.no_grad():  # each layer's weights its own way, so that which layer ran where shows
        for p in itertools.chain.from_iterable(layer.parameters() for layer in parts.layers):
            p.add_(0.2 * torch.randn(p.shape, generator=g, dtype=p.dtype))
        mistakes = families.flawed(functools.partial(_model, model=parts), _MODEL_WHY, **_MODEL_WHY)
        case = dataclasses.replace(case, args=(tokens, padding))
        return call_diagnosed(model, case, mistakes, _STEPS)


_STEPS = (
    "Step 1 (embedding + the PE table's first L rows), every layer in turn with the mask, "
    f"{_MASK}, then the read-out."
)


def _scores_shape(got, case: Case) -> str:
    vocab_size, d_model = case.extra["sizes"]["vocab_size"], case.extra["sizes"]["d_model"]
    if got.dim() == 3 and got.size(-1) == d_model != vocab_size:
        return "your scores have d_model features: the read-out is missing."
    return "one score per token of the vocabulary at every position: (B, L, vocab_size)."


check_encoder_model = exercise(
    "EncoderModel",
    "04",
    reference=EncoderModel,
    todo="Replace `raise NotImplementedError` in EncoderModel: its parts, then its forward.",
    points=2,
    table=Table(
        cases=_model_cases,
        reference=_model,
        mistakes=families.flawed(_model, _MODEL_WHY, **_MODEL_WHY),
        call=_call_model,
        outputs=[Out("the scores", shape_hint=_scores_shape, fallback=_STEPS)],
        double=False,
    ),
)


def train_step(model, optimizer, tokens, targets, padding, max_norm=1.0, *, flaw=""):
    """The reference: one step of training ``model(tokens, padding) -> scores (B, L, V)``: the mean
    cross-entropy over the real positions, gradients clipped to a total norm of ``max_norm``, one
    update; returns the loss, detached. ``flaw``: a classic mistake of :data:`_STEP_WHY`."""
    scores = model(tokens, padding)
    flat, wanted = rearrange(scores, "b l v -> (b l) v"), targets.flatten()
    real, kept = ~padding.flatten(), targets.masked_fill(padding, -100).flatten()  # -100: ignored
    loss = {
        "padding counted": lambda: F.cross_entropy(flat, wanted),
        "mean over all": lambda: (F.cross_entropy(flat, wanted, reduction="none") * real).mean(),
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


_STEP = "a step: the scores, the loss on the real tokens, zero_grad, backward, clipping, step."
_STEP_WHY = {
    "padding counted": "the loss counts the padding positions too: only the real tokens count.",
    "mean over all": "the pads are left out of the sum, but you divided by all B·L positions.",
    "sum": "the loss is summed; it is the mean over the real positions.",
    "softmax first": "you applied softmax before F.cross_entropy; it takes the raw scores.",
    "nll on scores": "F.nll_loss expects log-probabilities; these are raw scores.",
    "classes on axis 1": "F.cross_entropy read your (B, L, V) scores with the classes on axis 1, "
    "the L positions. It takes (B·L, V) with (B·L,) targets, or (B, V, L) with (B, L).",
    "no zero_grad": "the second step's update holds the first step's gradients too: backward "
    "adds to .grad, so every step clears the gradients before its backward pass.",
    "zero_grad after backward": "the weights did not change. A step needs the backward pass, then "
    "the optimizer's step, and no clearing of the gradients between the two.",
    "no clipping": "the gradients were not clipped: clip_grad_norm_ on the model's parameters "
    "with max_norm, after the backward pass and before the optimizer's step.",
    "clip to 1.0": "the gradients were clipped to norm 1.0 instead of max_norm: use the argument.",
    "clip by value": "clip_grad_value_ caps each number; the step clips the total norm.",
    "clip each parameter": "you clipped each parameter's gradient on its own, not all together.",
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


def _train(model, tokens, targets, padding, steps, max_norm, *, flaw="", learner=None, case=None):
    """(losses, weights after) of ``steps`` SGD steps of train_step, or the ``learner``'s."""
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    options = {} if max_norm is None else {"max_norm": max_norm}
    losses = []
    with torch.enable_grad():
        for _ in range(steps):
            batch = (model, optimizer, tokens.clone(), targets.clone(), padding.clone())
            if learner is None:
                losses.append(float(train_step(*batch, **options, flaw=flaw)))
            else:
                loss = call_candidate(learner, case.name, *batch, crash_hint=_AXIS, **options)
                losses.append(_as_number(loss, case.name))
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    return torch.tensor(losses, dtype=torch.float64), weights.double()


_AXIS = "F.cross_entropy wants classes on axis 1: (N, V) with (N,) targets, (B, V, L) with (B, L)."


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

    def data(vocab_size, L, lengths, steps, max_norm, seed):  # a Case's args
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = _Tagger(vocab_size, L)
        tokens, targets = torch.randint(0, vocab_size, (2, len(lengths), L), generator=g)
        padding = torch.arange(L) >= torch.tensor(lengths)[:, None]
        return model, tokens, targets, padding, steps, max_norm

    args = data(6, 6, [6, 4, 3], 1, 100.0, 0)
    yield Case("one step; B = 3, L = V = 6, of 6, 4, 3 real tokens; max_norm 100: no clip", args)
    args = data(7, 5, [5, 2], 2, 100.0, 1)
    yield Case("two steps in a row on one batch; L = 5, V = 7; max_norm = 100", args)
    args = data(7, 5, [5, 3], 1, 0.05, 2)
    yield Case("one step with max_norm = 0.05: the gradients' norm is larger, clipped", args)
    args = data(5, 4, [4, 1, 2], 1, None, 3)
    yield Case("one step with the default max_norm (1.0), called without it", args)


check_train_step = exercise(
    "train_step",
    "04",
    reference=train_step,
    todo="Replace `raise NotImplementedError` in train_step: the loss, then the update.",
    table=Table(
        cases=_step_cases,
        reference=_train,
        mistakes=families.flawed(_train, _STEP_WHY, **_STEP_WHY),
        call=lambda candidate, case, table: _train(*case.args, learner=candidate, case=case),
        outputs=[
            Out("your step's losses", 0, fallback=_STEP),
            Out("the weights after your step", 1, fallback=_STEP),
        ],
        double=False,
    ),
)
