"""Checkers for lesson 03's two ways to wrap a sub-layer with a residual and a LayerNorm.

Post-LN, ``norm(x + sublayer(x))``, is the original paper's "add & norm" and the DLI's Steps 2
and 3; pre-LN, ``x + sublayer(norm(x))``, is GPT-2's and most modern models'. The lesson's
exercise is :func:`check_residual_block`'s ``ResidualBlock``, both forms from torch's
``norm_first`` flag, with dropout on the sub-layer's output; the earlier one-function exercises
keep their checkers. The checkers hand the learner's code a sub-layer and a norm that count their
calls, so that calling one twice, or on the wrong input, can be named even where the values alone
do not say it.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from .. import reference
from ._core import Mistake, checker
from ._failure import ExerciseFailure
from ._steps import build_module, call_diagnosed, copy_weight_and_bias, randn, require_tensor

__all__ = ["check_post_ln_sublayer", "check_pre_ln_sublayer", "check_residual_block"]

_POST = "norm(x + sublayer(x))"
_PRE = "x + sublayer(norm(x))"


class _Counted:
    """A callable that remembers the inputs it was called with."""

    def __init__(self, fn):
        self.fn, self.inputs = fn, []

    def __call__(self, t):
        self.inputs.append(t)
        return self.fn(t)


def _post_ln_mistakes() -> list[Mistake]:
    return [
        Mistake(
            "no residual",
            lambda x, f, n: n(f(x)),
            f"the residual is missing: add the sub-layer's input x before the norm, {_POST}.",
        ),
        Mistake(
            "norm before the add",
            lambda x, f, n: x + n(f(x)),
            "you normalised the sub-layer's output and then added x; post-LN adds first and "
            f"normalises the sum: {_POST}.",
        ),
        Mistake(
            "pre-LN",
            lambda x, f, n: x + f(n(x)),
            f"that is the pre-LN form, {_PRE}; post-LN (the original paper's add & norm) is {_POST}.",
        ),
        Mistake(
            "norm twice",
            lambda x, f, n: n(n(x + f(x))),
            f"the norm is applied twice; once is enough, after the add: {_POST}.",
        ),
        Mistake(
            "sublayer twice",
            lambda x, f, n: (lambda h: n(h + f(h)))(f(x)),
            f"you called the sub-layer twice, the second time on its own output; call it once, on "
            f"x: {_POST}.",
        ),
        Mistake(
            "norm of x only",
            lambda x, f, n: n(x) + f(x),
            f"you normalised x alone; the norm goes around the sum: {_POST}.",
        ),
        Mistake(
            "no norm",
            lambda x, f, n: x + f(x),
            f"the norm is missing: {_POST}.",
        ),
    ]


def _pre_ln_mistakes() -> list[Mistake]:
    return [
        Mistake(
            "post-LN",
            lambda x, f, n: n(x + f(x)),
            f"that is the post-LN form, {_POST}; pre-LN normalises the sub-layer's input and adds "
            f"the untouched x: {_PRE}.",
        ),
        Mistake(
            "residual from norm(x)",
            lambda x, f, n: n(x) + f(n(x)),
            f"the residual must be the raw x, not norm(x): {_PRE}. Keeping x untouched on the "
            f"residual path is the point of pre-LN.",
        ),
        Mistake(
            "no residual",
            lambda x, f, n: f(n(x)),
            f"the residual is missing: add x to the sub-layer's output, {_PRE}.",
        ),
        Mistake(
            "norm on the output",
            lambda x, f, n: n(x + f(n(x))),
            f"you normalised the sum too; pre-LN leaves it alone: {_PRE}. (A pre-LN model has one "
            f"final LayerNorm after its last layer, not one per sub-layer.)",
        ),
        Mistake(
            "norm after the sublayer",
            lambda x, f, n: x + n(f(x)),
            f"the norm goes before the sub-layer, on its input: {_PRE}, not x + norm(sublayer(x)).",
        ),
        Mistake(
            "no norm",
            lambda x, f, n: x + f(x),
            f"the norm is missing: the sub-layer reads norm(x), {_PRE}.",
        ),
    ]


def _calls_hint(sublayer: _Counted, norm: _Counted, x: torch.Tensor, right: str, reads: str):
    """What the counted calls say, when the values matched no classic mistake."""

    def hint(got, *args) -> str:
        for name, counted in (("sublayer", sublayer), ("norm", norm)):
            if len(counted.inputs) != 1:
                return f"{name} ran {len(counted.inputs)} times; call it exactly once: {right}."
        if reads == "x" and not torch.equal(sublayer.inputs[0], x):
            return f"the sub-layer must read x itself: {right}."
        if reads == "norm(x)" and not torch.equal(norm.inputs[0], x):
            return f"the norm must read x itself, and the sub-layer its output: {right}."
        return f"compare your code with the formula: {right}."

    return hint


def _sublayer_cases():
    """(case, x, sublayer, norm): modules with random weights (a LayerNorm's too, so a norm
    applied twice shows), in the dtype of x."""
    g = torch.Generator().manual_seed(30)
    with torch.random.fork_rng(devices=[]):  # leave the learner's random stream alone
        torch.manual_seed(30)
        d = torch.float64
        norm8, norm6, norm16, norm4 = (
            nn.LayerNorm(n, dtype=dt) for n, dt in ((8, d), (6, d), (16, d), (4, torch.float32))
        )
        for norm in (norm8, norm6, norm16, norm4):
            with torch.no_grad():
                norm.weight.normal_(1.0, 0.3)
                norm.bias.normal_(0.0, 0.3)
        linear8 = nn.Linear(8, 8, dtype=d)
        ffn = nn.Sequential(nn.Linear(6, 12, dtype=d), nn.ReLU(), nn.Linear(12, 6, dtype=d))
        linear4 = nn.Linear(4, 4)
    yield (
        "x (2, 5, 8); sublayer = nn.Linear(8, 8), norm = nn.LayerNorm(8), random weights",
        1 + 2 * randn(g, 2, 5, 8, dtype=d),
        linear8,
        norm8,
    )
    yield (
        "x (3, 6); sublayer = a feed-forward network (Linear, ReLU, Linear), norm = LayerNorm(6)",
        randn(g, 3, 6, dtype=d),
        ffn,
        norm6,
    )
    yield (
        "x (1, 4, 16); sublayer = torch.tanh (a plain function), norm = LayerNorm(16)",
        3 * randn(g, 1, 4, 16, dtype=d),
        torch.tanh,
        norm16,
    )
    yield (
        "float32: x (2, 3, 4); sublayer = nn.Linear(4, 4), norm = LayerNorm(4)",
        randn(g, 2, 3, 4),
        linear4,
        norm4,
    )


def _check_sublayer(candidate, expected_fn, mistakes, right: str, reads: str) -> int:
    n = 0
    for case, x, sublayer, norm in _sublayer_cases():
        counted_sublayer, counted_norm = _Counted(sublayer), _Counted(norm)
        with torch.no_grad():
            got = call_diagnosed(
                candidate,
                case,
                (x, counted_sublayer, counted_norm),
                crash_hint=f"sublayer and norm are callables: call them on a tensor, {right}.",
            )
            require_tensor(
                case,
                "the outputs",
                got,
                expected_fn(x, sublayer, norm),
                mistakes,
                (x, sublayer, norm),
                shape_hint=f"the output has the shape of x: {right}.",
                fallback_cause=_calls_hint(counted_sublayer, counted_norm, x, right, reads),
            )
        n += 1
    return n


@checker(
    "post_ln_sublayer",
    "Replace `raise NotImplementedError` with add & norm: norm(x + sublayer(x)).",
)
def check_post_ln_sublayer(candidate) -> int:
    """Check ``candidate(x, sublayer, norm) -> norm(x + sublayer(x))``."""
    return _check_sublayer(
        candidate, reference.post_ln_sublayer, _post_ln_mistakes(), _POST, reads="x"
    )


@checker(
    "pre_ln_sublayer",
    "Replace `raise NotImplementedError` with x + sublayer(norm(x)).",
)
def check_pre_ln_sublayer(candidate) -> int:
    """Check ``candidate(x, sublayer, norm) -> x + sublayer(norm(x))``."""
    return _check_sublayer(
        candidate, reference.pre_ln_sublayer, _pre_ln_mistakes(), _PRE, reads="norm(x)"
    )


# ---------------------------------------------------------------- ResidualBlock


class _CountedModule(nn.Module):
    """A sub-layer or norm (a module or a function) that remembers the inputs it was called with;
    a module's parameters stay registered."""

    def __init__(self, fn):
        super().__init__()
        self.fn, self.inputs = fn, []

    def forward(self, t):
        self.inputs.append(t)
        return self.fn(t)


_NORM_MADE = "LayerNorm(d_model)"
_DROPOUT_PLACE = (
    "dropout goes on the sub-layer's output, before the residual add (the original paper, "
    "section 5.4; torch's TransformerEncoderLayer does the same)"
)
_BLOCK_CRASH = (
    "the sub-layer takes one tensor and returns one of the same shape, and so does the norm: "
    "call each on one tensor."
)


def _flag(norm_first: bool) -> str:
    return "norm_first=True (pre-LN)" if norm_first else "norm_first=False (post-LN)"


def _seeded(seed: int, run):
    """``run`` with torch's random stream set to ``seed``, so that dropout draws the same mask
    for the candidate, the reference and each mistake; the learner's stream is left alone."""

    def seeded(*args):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return run(*args)

    return seeded


def _dropped(f, p: float, training: bool):
    """The sub-layer followed by its dropout: what the formulas call ``sublayer``."""
    return lambda t: F.dropout(f(t), p, training)


def _block_expected(norm_first: bool):
    add_norm = reference.pre_ln_sublayer if norm_first else reference.post_ln_sublayer
    return lambda x, f, n, p, training: add_norm(x, _dropped(f, p, training), n)


def _block_mistakes(norm_first: bool, seed: int) -> list[Mistake]:
    """The classic wrong blocks, each run as ``(x, f, n, p, training)`` under the case's seed."""
    right, flag = (_PRE if norm_first else _POST), _flag(norm_first)

    def structural(mistake: Mistake) -> Mistake:
        if mistake.name in ("pre-LN", "post-LN"):  # the other form: the flag read the wrong way
            got = (
                "pre-LN, x + sublayer(norm(x))" if mistake.name == "pre-LN" else "post-LN, " + _POST
            )
            why = (
                f"with {flag} your block computes {got}. As in torch, norm_first=False means "
                f"post-LN (the default, the original paper's) and norm_first=True pre-LN; "
                f"here: {right}."
            )
        else:
            why = f"with {flag}, {mistake.explanation}"
        return Mistake(
            mistake.name,
            lambda x, f, n, p, tr: mistake.run(x, _dropped(f, p, tr), n),
            why,
        )

    if norm_first:
        placed = [
            ("dropout on the sum", lambda x, f, n, p, tr: F.dropout(x + f(n(x)), p, tr)),
            (
                "dropout on the sub-layer's input",
                lambda x, f, n, p, tr: x + f(F.dropout(n(x), p, tr)),
            ),
            ("dropout on x", lambda x, f, n, p, tr: x + f(n(F.dropout(x, p, tr)))),
        ]
    else:
        placed = [
            ("dropout on the sum", lambda x, f, n, p, tr: n(F.dropout(x + f(x), p, tr))),
            ("dropout after the norm", lambda x, f, n, p, tr: F.dropout(n(x + f(x)), p, tr)),
            (
                "dropout on the sub-layer's input",
                lambda x, f, n, p, tr: n(x + f(F.dropout(x, p, tr))),
            ),
        ]
    expected = _block_expected(norm_first)
    dropout = [Mistake(name, run, f"{name}: {_DROPOUT_PLACE}.") for name, run in placed] + [
        Mistake(
            "no dropout",
            lambda x, f, n, p, tr: expected(x, f, n, 0.0, tr),
            f"no dropout in training. Keep a dropout layer with the dropout probability given "
            f"to __init__; {_DROPOUT_PLACE}.",
        ),
        Mistake(
            "dropout in eval mode",
            lambda x, f, n, p, tr: expected(x, f, n, p, True),
            "dropout is still on after .eval(): F.dropout(t, p) drops whatever the mode, unless "
            "you pass training=self.training; an nn.Dropout layer switches off by itself.",
        ),
    ]
    basic = _pre_ln_mistakes() if norm_first else _post_ln_mistakes()
    return [
        Mistake(m.name, _seeded(seed, m.run), m.explanation)
        for m in [structural(m) for m in basic] + dropout
    ]


def _block_cases():
    """(case, keyword arguments, x, sublayer, count its calls?, training?): float32 modules
    with random weights."""
    g = torch.Generator().manual_seed(31)
    with torch.random.fork_rng(devices=[]):  # leave the learner's random stream alone
        torch.manual_seed(31)
        linear8, linear4, linear5 = nn.Linear(8, 8), nn.Linear(4, 4), nn.Linear(5, 5)
        ffn = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 6))
    yield (
        "post-LN, the default: ResidualBlock(nn.Linear(8, 8), 8) on x (2, 5, 8)",
        {},
        1 + 2 * randn(g, 2, 5, 8),
        linear8,
        True,
        True,
    )
    yield (
        "pre-LN: ResidualBlock(ffn, 6, norm_first=True), ffn = Linear, ReLU, Linear; x (3, 6)",
        {"norm_first": True},
        randn(g, 3, 6),
        ffn,
        True,
        True,
    )
    yield (
        "post-LN, norm_first=False; the sub-layer is a function, torch.tanh; x (1, 4, 16)",
        {"norm_first": False},
        3 * randn(g, 1, 4, 16),
        torch.tanh,
        False,
        True,
    )
    for norm_first in (False, True):
        yield (
            f"dropout=0.5 in training, {_flag(norm_first)}: nn.Linear(4, 4) on x (2, 3, 4)",
            {"norm_first": norm_first, "dropout": 0.5},
            randn(g, 2, 3, 4),
            linear4,
            True,
            True,
        )
    yield (
        "dropout=0.5 after .eval(), so no dropout: pre-LN, nn.Linear(5, 5) on x (4, 5)",
        {"norm_first": True, "dropout": 0.5},
        randn(g, 4, 5),
        linear5,
        True,
        False,
    )


def _block_norm(block: nn.Module, case: str, sublayer, d_model: int, g) -> nn.LayerNorm:
    """``block.norm`` is a LayerNorm over d_model and every part's parameters are registered.
    Gives the norm a random affine; returns torch's LayerNorm with the same one."""
    norm = getattr(block, "norm", None)
    if not isinstance(norm, nn.Module):
        raise ExerciseFailure(
            f"Case {case!r}: your ResidualBlock has no module attribute `norm`; the skeleton "
            f"names its LayerNorm self.norm, a {_NORM_MADE}."
        )
    expected = nn.LayerNorm(d_model)
    with torch.no_grad():
        expected.weight.copy_(1 + 0.3 * randn(g, d_model))
        expected.bias.copy_(0.3 * randn(g, d_model))
    copy_weight_and_bias(
        norm, expected.weight, expected.bias, case, "self.norm", _NORM_MADE, quote="`"
    )
    registered = {id(p) for p in block.parameters()}
    inner = list(sublayer.parameters()) if isinstance(sublayer, nn.Module) else []
    for what, params in (("the sub-layer's", inner), ("the norm's", list(norm.parameters()))):
        if not all(id(p) in registered for p in params):
            raise ExerciseFailure(
                f"Case {case!r}: {what} parameters are not among your block's parameters(), so "
                f"an optimiser would never train them.\nLikely cause: assign the module itself to "
                f"an attribute of self in __init__, not inside a list or a dict."
            )
    y = 1 + randn(g, 3, d_model)
    with torch.no_grad():
        same = torch.allclose(norm(y), expected(y), atol=1e-5, rtol=1e-4)
    if not same:
        raise ExerciseFailure(
            f"Case {case!r}: self.norm, given torch's weight and bias, does not compute torch's "
            f"LayerNorm over the last axis.\nLikely cause: self.norm should be a {_NORM_MADE}: "
            f"your LayerNorm of the first exercise. Does it pass check_layer_norm?"
        )
    return expected


def _block_calls_hint(sublayer, norm: _CountedModule, norm_first: bool):
    """What the counted calls say, when the values matched no classic mistake."""
    right = _PRE if norm_first else _POST

    def hint(got, x, *args) -> str:
        counted = [("norm", norm)] + ([("sub-layer", sublayer)] if sublayer is not None else [])
        for name, module in counted:
            if len(module.inputs) != 1:
                return f"the {name} ran {len(module.inputs)} times; call it exactly once: {right}."
        if not norm_first and sublayer is not None and not torch.equal(sublayer.inputs[0], x):
            return f"with {_flag(False)} the sub-layer reads x itself: {right}."
        if norm_first and not torch.equal(norm.inputs[0], x):
            return f"with {_flag(True)} the norm reads x itself, the sub-layer its output: {right}."
        return f"compare your forward with the formula for {_flag(norm_first)}: {right}."

    return hint


@checker(
    "ResidualBlock",
    "Replace each `raise NotImplementedError` in your ResidualBlock: its parts in __init__, "
    "the residual, the dropout and the norm in forward, both ways round.",
)
def check_residual_block(candidate) -> int:
    """Check ``candidate(sublayer, d_model, norm_first=False, dropout=0.0)``, a module whose
    forward is ``norm(x + dropout(sublayer(x)))`` (post-LN) or, with ``norm_first=True``,
    ``x + dropout(sublayer(norm(x)))`` (pre-LN), against torch's LayerNorm and dropout (the
    same random mask, from the same seed)."""
    g = torch.Generator().manual_seed(32)
    n = 0
    for seed, (case, kwargs, x, sublayer, count, training) in enumerate(_block_cases(), 40):
        d_model = x.size(-1)
        given = _CountedModule(sublayer) if count else sublayer
        make = candidate
        if kwargs and not isinstance(candidate, nn.Module):  # an instance gets its own message
            make = functools.partial(candidate, **kwargs)
        block = build_module(make, case, "ResidualBlock", (given, d_model), "check_residual_block")
        expected_norm = _block_norm(block, case, given, d_model, g)
        counted_norm = _CountedModule(block.norm)
        block.norm = counted_norm
        block.train(training)
        norm_first, p = kwargs.get("norm_first", False), kwargs.get("dropout", 0.0)
        args = (x, sublayer, expected_norm, p, training)
        with torch.no_grad():
            got = _seeded(seed, call_diagnosed)(block, case, (x,), (), _BLOCK_CRASH)
            require_tensor(
                case,
                "the outputs",
                got,
                _seeded(seed, _block_expected(norm_first))(*args),
                _block_mistakes(norm_first, seed),
                args,
                shape_hint=f"the output has the shape of x: {_PRE if norm_first else _POST}.",
                fallback_cause=_block_calls_hint(
                    given if count else None, counted_norm, norm_first
                ),
            )
        n += 1
    return n
