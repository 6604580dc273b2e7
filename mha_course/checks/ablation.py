"""Checker for lesson 05's head ablation: ``head_ablation(model, score)`` switches each head off
in turn and returns how much ``score(model)`` drops, one number per (layer, head).

The checker builds a small encoder of its own (a few layers of the lesson-02 layout: ``q_proj``,
``k_proj``, ``v_proj``, ``out_proj``; float64) and a score of its own (a fixed random reading of the
encoder's output), hands both to the candidate, and compares the (layers, H) result with the
reference's. Where it differs, it runs the classic wrong versions on fresh copies of the same model
and names the one that matches: W^O's rows zeroed instead of its columns, its shared bias zeroed
too, the heads left off, the queries, keys or value weights switched off instead of the output,
heads taken as strided features, the sign flipped. Afterwards the model must be exactly as before.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .. import reference
from ..pretrained.ablation import head_ablation as _reference_ablation
from ..pretrained.ablation import heads_off
from ._core import Mistake, call_candidate, checker, compare, diagnose
from ._failure import ExerciseFailure

__all__ = ["check_head_ablation", "ablation_case_model"]

COLUMNS = (
    "head h's output is features h·D … (h+1)·D − 1 of the concatenation, and it meets W^O only "
    "in those columns of out_proj.weight (an nn.Linear weight is (out_features, in_features)): "
    "zero out_proj.weight[:, h*D:(h+1)*D], inside torch.no_grad()."
)
RESTORE = (
    "put every switched-off head back before the next one, from a copy made with .clone() "
    "(a slice like w[:, a:b] is a view: zeroing the weight zeroes it too)."
)


class _Encoder(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = nn.ModuleList(layers)


class _Model(nn.Module):
    """What ``head_ablation`` is given: a model with its layers in ``model.encoder.layers``."""

    def __init__(self, layers):
        super().__init__()
        self.encoder = _Encoder(layers)

    def forward(self, x, may_attend=None):
        for layer in self.encoder.layers:
            x = layer(x, attn_mask=may_attend)
        return x


@functools.lru_cache(maxsize=4)
def _built(num_layers: int, E: int, H: int, seed: int) -> _Model:
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        layers = [
            reference.EncoderLayer(E, H, 2 * E, activation=F.gelu).double().eval()
            for _ in range(num_layers)
        ]
        with torch.no_grad():
            for layer in layers:
                for p in layer.parameters():  # a bias in every part, so that forgetting one shows
                    if p.dim() == 1:
                        p.normal_(0, 0.3)
                layer.self_attn.q_proj.weight.mul_(4)  # sharp attention: a head with no query
                layer.self_attn.q_proj.bias.mul_(4)  # (attending evenly) then differs clearly
    return _Model(layers).eval()


def ablation_case_model(num_layers: int = 3, E: int = 16, H: int = 4, seed: int = 0) -> _Model:
    """A fresh copy of the checker's model: ``num_layers`` post-LN layers of ``H`` heads each."""
    return copy.deepcopy(_built(num_layers, E, H, seed))


def _score(seed: int, E: int) -> Callable[[nn.Module], float]:
    """score(model) -> float: a fixed random reading of the model's output on a fixed batch with
    padding (so that a head's effect reaches the score through the whole encoder)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 5, E, generator=g, dtype=torch.float64)
    may_attend = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])[:, None, None, :]
    readout = torch.randn(2, 5, E, generator=g, dtype=torch.float64)

    def score(model: nn.Module) -> float:
        with torch.no_grad():
            return float((model(x, may_attend) * readout).sum() / 10)

    return score


CASES = (  # (name, layers, E, H, seed)
    ("3 layers of 4 heads, E = 16", 3, 16, 4, 0),
    ("2 layers of 2 heads, E = 12", 2, 12, 2, 1),
)


# ---------------------------------------------------------------- the classic mistakes


def _each_head(model, score, switch_off, *, restore=True, report=lambda base, s: base - s):
    """``head_ablation`` with the switching-off step replaced: ``switch_off(attention, h, D)``
    changes the module in place; weights are restored afterwards unless ``restore`` is False."""
    layers = model.encoder.layers
    H = layers[0].self_attn.num_heads
    base = score(model)
    out = torch.zeros(len(layers), H, dtype=torch.float64)
    for i, layer in enumerate(layers):
        attention = layer.self_attn
        D = attention.out_proj.weight.size(1) // H
        for h in range(H):
            kept = copy.deepcopy(attention.state_dict())
            with torch.no_grad():
                switch_off(attention, h, D)
            out[i, h] = report(base, score(model))
            if restore:
                attention.load_state_dict(kept)
    return out


def _zero(t: torch.Tensor) -> None:
    t.zero_()


def _columns(a, h, D):
    _zero(a.out_proj.weight[:, h * D : (h + 1) * D])


_MISTAKES = [
    Mistake(
        "rows of W^O",
        lambda m, s: _each_head(
            m, s, lambda a, h, D: _zero(a.out_proj.weight[h * D : (h + 1) * D])
        ),
        "you zeroed rows of out_proj.weight: those are output features, which every head writes "
        "into. " + COLUMNS,
    ),
    Mistake(
        "the shared bias too",
        lambda m, s: _each_head(m, s, lambda a, h, D: (_columns(a, h, D), _zero(a.out_proj.bias))),
        "you zeroed out_proj.bias too. The bias of W^O is added once, for all the heads together: "
        "leave it, and zero only the head's columns of out_proj.weight.",
    ),
    Mistake(
        "a slice of the shared bias too",
        lambda m, s: _each_head(
            m, s, lambda a, h, D: (_columns(a, h, D), _zero(a.out_proj.bias[h * D : (h + 1) * D]))
        ),
        "you zeroed part of out_proj.bias too. The bias of W^O belongs to no head (it is added "
        "once, after the heads are mixed): leave it, and zero only the head's columns of "
        "out_proj.weight.",
    ),
    Mistake(
        "heads left off",
        lambda m, s: _each_head(m, s, _columns, restore=False),
        "each head stayed off while the next ones were measured, so the drops add up along each "
        "row: " + RESTORE,
    ),
    Mistake(
        "queries or keys switched off",
        lambda m, s: _each_head(
            m,
            s,
            lambda a, h, D: (
                _zero(a.q_proj.weight[h * D : (h + 1) * D]),
                _zero(a.q_proj.bias[h * D : (h + 1) * D]),
            ),
        ),
        "you zeroed the head's queries (or keys). A head with no query or no key still sends on "
        "an output: it attends evenly to every token and passes their average. Switch off what "
        "the head sends on, its output: " + COLUMNS,
    ),
    Mistake(
        "query weights switched off",
        lambda m, s: _each_head(m, s, lambda a, h, D: _zero(a.q_proj.weight[h * D : (h + 1) * D])),
        "you zeroed the head's query weights. The head still sends on an output (its attention "
        "now depends only on the bias). Switch off what the head sends on, its output: " + COLUMNS,
    ),
    Mistake(
        "value weights without their bias",
        lambda m, s: _each_head(m, s, lambda a, h, D: _zero(a.v_proj.weight[h * D : (h + 1) * D])),
        "you zeroed the head's value weights but not their bias, so every value is the bias and "
        "the head still outputs it. Zero v_proj.bias[h*D:(h+1)*D] as well, or switch off the "
        "output instead: " + COLUMNS,
    ),
    Mistake(
        "strided heads",
        lambda m, s: _each_head(
            m, s, lambda a, h, D: _zero(a.out_proj.weight[:, h :: a.out_proj.weight.size(1) // D])
        ),
        "you took head h as every H-th feature (h, h+H, ...). The concatenation puts each head's D "
        "features side by side: head h is features h·D … (h+1)·D − 1.",
    ),
    Mistake(
        "the sign",
        lambda m, s: -_reference_ablation(m, s).double(),
        "your numbers have the wrong sign. The drop is the score of the whole model minus the "
        "score with the head off: positive when the head helped.",
    ),
    Mistake(
        "scores, not drops",
        lambda m, s: _each_head(m, s, _columns, report=lambda base, s: s),
        "you returned the scores with each head off; return the drops: the score of the whole "
        "model minus each of those.",
    ),
]


# ---------------------------------------------------------------- the check


def _changed(model: nn.Module, fresh: nn.Module) -> str | None:
    """The first parameter of ``model`` that is not what it was (``fresh``), with where."""
    ours = dict(fresh.named_parameters())
    for name, p in model.named_parameters():
        before = ours[name]
        if p.shape != before.shape or not torch.equal(p.detach(), before.detach()):
            if p.dim() == 2 and p.shape == before.shape:
                cols = (p.detach() != before.detach()).any(dim=0).nonzero().flatten().tolist()
                return f"{name}, columns {cols[0]} … {cols[-1]}"
            return name
    return None


def _crash_hint(error: BaseException) -> str | None:
    text = str(error)
    if "in-place operation" in text or "requires grad" in text:
        return "changing a parameter in place must not be recorded by autograd: do it inside `with torch.no_grad():`."
    if isinstance(error, TypeError) and "positional argument" in text:
        return "score takes the model: call score(model), which runs it and returns a number."
    if isinstance(error, AttributeError) and "num_heads" in text:
        return "the number of heads is layer.self_attn.num_heads (lesson 02's __init__ keeps it)."
    return None


def _as_drops(case: str, got, expected: torch.Tensor) -> torch.Tensor:
    if not isinstance(got, torch.Tensor):
        tip = {
            "list": " torch.tensor(...) turns a list of lists of numbers into one.",
            "float": " Return every head's drop, not one number.",
        }.get(type(got).__name__, "")
        raise ExerciseFailure(
            f"Case {case!r}: your result should be a torch.Tensor of shape "
            f"{tuple(expected.shape)} (layers, heads), got {type(got).__name__}.{tip}"
        )
    if not got.is_floating_point():
        raise ExerciseFailure(
            f"Case {case!r}: your result is a {got.dtype} tensor; the drops are fractions: "
            "make it a float tensor (torch.zeros(layers, heads))."
        )
    if got.shape != expected.shape:
        L, H = expected.shape
        cause = (
            "layers and heads swapped: one row per layer, one column per head."
            if tuple(got.shape) == (H, L)
            else "one drop per (layer, head): len(model.encoder.layers) rows, "
            "layer.self_attn.num_heads columns (take both from the model, not from the notebook)."
        )
        raise ExerciseFailure(
            f"Case {case!r}: your result has shape {tuple(got.shape)}, expected {(L, H)} "
            f"(layers, heads).\nLikely cause: {cause}"
        )
    return got.detach().double().cpu()


@checker(
    "head_ablation",
    "Replace `raise NotImplementedError` with the loop that switches each head off, scores the "
    "model, and puts the head back.",
    own_work={
        "the course's heads_off": heads_off,
        "the course's head_ablation": _reference_ablation,
    },
)
def check_head_ablation(candidate) -> int:
    """Check ``candidate(model, score) -> (layers, H)``: each head's drop in ``score(model)``, the
    model left as it was."""
    for case, num_layers, E, H, seed in CASES:
        score = _score(seed, E)
        fresh = ablation_case_model(num_layers, E, H, seed)
        expected = _reference_ablation(ablation_case_model(num_layers, E, H, seed), score).double()
        model = ablation_case_model(num_layers, E, H, seed)
        try:
            got = call_candidate(candidate, case, model, score)
        except ExerciseFailure as failure:
            hint = None if failure.raised is None else _crash_hint(failure.raised)
            if hint is None:
                raise
            raise failure.with_cause(hint) from failure.raised
        got = _as_drops(case, got, expected)
        if not torch.allclose(got, expected, atol=1e-6, rtol=1e-4):
            cause = diagnose(
                [
                    Mistake(m.name, _on_fresh(m.run, num_layers, E, H, seed), m.explanation)
                    for m in _MISTAKES
                ],
                got,
                lambda r: r.double(),
                score,
                atol=1e-6,
                rtol=1e-4,
            )
            compare(
                case,
                "the drops (layers × heads)",
                got,
                expected,
                atol=1e-6,
                rtol=1e-4,
                cause=cause,
                fallback_cause="switch one head off at a time, score the model, put the head "
                "back; the drop is the whole model's score minus that. " + COLUMNS,
            )
        if any(m._forward_hooks or m._forward_pre_hooks for m in model.modules()):
            raise ExerciseFailure(
                f"Case {case!r}: your drops are right, but afterwards the model still has hooks "
                "on it, so it no longer computes what it did.\nLikely cause: remove every hook "
                "you register (handle = module.register_forward_pre_hook(...); handle.remove())."
            )
        where = _changed(model, fresh)
        if where is not None:
            raise ExerciseFailure(
                f"Case {case!r}: your drops are right, but afterwards the model is not as it "
                f"was: {where} changed.\nLikely cause: {RESTORE}"
            )
    return len(CASES)


def _on_fresh(run, num_layers, E, H, seed):
    """A mistake run on a fresh copy of the case's model (mistakes change the model they get)."""
    return lambda score: run(ablation_case_model(num_layers, E, H, seed), score)
