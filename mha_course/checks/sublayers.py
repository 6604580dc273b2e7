"""Checkers for lesson 03's two ways to wrap a sub-layer with a residual and a LayerNorm.

Post-LN, ``norm(x + sublayer(x))``, is the original paper's "add & norm" and the lesson's Steps 2
and 3; pre-LN, ``x + sublayer(norm(x))``, is GPT-2's and most modern models'. The checker hands
the learner's function a sub-layer and a norm that count their calls, so that calling one twice,
or on the wrong input, can be named even where the values alone do not say it.
"""

from __future__ import annotations

import torch
from torch import nn

from .. import reference
from ._core import Mistake, checker
from ._steps import call_diagnosed, randn, require_tensor

__all__ = ["check_post_ln_sublayer", "check_pre_ln_sublayer"]

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
