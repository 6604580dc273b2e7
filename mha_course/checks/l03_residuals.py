"""Lesson 03's residual paths: a sub-layer with its residual, dropout and LayerNorm, post-LN or
pre-LN (ResidualBlock), and the gradient reaching each block of a deep stack (gradient_norms)."""

from __future__ import annotations

import functools
import numbers
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from .. import layernorm
from .._validate import shape_str
from . import families
from ._core import call_candidate, exercise
from ._failure import ExerciseFailure
from ._table import Case, Out, Table, build_module, copy_weight_and_bias, seeded_randn


class ResidualBlock(nn.Module):
    """The reference: ``sublayer`` with its residual connection, dropout and LayerNorm, as in
    torch.nn.TransformerEncoderLayer: post-LN by default, ``norm(x + dropout(sublayer(x)))``;
    pre-LN with ``norm_first``, ``x + dropout(sublayer(norm(x)))``."""

    def __init__(self, sublayer, d_model, norm_first=False, dropout=0.0):
        super().__init__()
        self.sublayer, self.norm = sublayer, layernorm.LayerNorm(d_model)
        self.dropout, self.norm_first = nn.Dropout(dropout), norm_first

    def forward(self, x):
        sublayer = lambda t: self.dropout(self.sublayer(t))  # noqa: E731
        return families.residual(x, sublayer, self.norm, self.norm_first)


_POST, _PRE = "LayerNorm(x + Sublayer(x))", "x + Sublayer(LayerNorm(x))"
_FLAG = {False: "norm_first False (post-LN)", True: "norm_first True (pre-LN)"}
_PLACE = "dropout goes on the sub-layer's output, before the residual add (the paper's section 5.4)"
_DROPOUT = {  # name: (x, f, n, dropout, norm_first) -> the block with the dropout there
    "dropout on the sum": lambda x, f, n, d, pre: d(x + f(n(x))) if pre else n(d(x + f(x))),
    "dropout after the norm": lambda x, f, n, d, pre: d(n(x + f(x))),
    "dropout on the sub-layer's input": lambda x, f, n, d, pre: (
        x + f(d(n(x))) if pre else n(x + f(d(x)))
    ),
    "dropout on x": lambda x, f, n, d, pre: x + f(n(d(x))),
}
_DROPOUT_WHY = {name: f"{name}: {_PLACE}." for name in _DROPOUT} | {
    "no dropout": "no dropout in training: the block keeps a dropout with the probability given "
    f"to __init__; {_PLACE}.",
    "dropout in eval mode": "dropout is still on after .eval(): a functional dropout drops "
    "whatever the mode unless told the module's training flag; an nn.Dropout stops by itself.",
}


def _block(x, f, n, norm_first, p, training, seed, flaw=""):
    """The block, its dropout seeded by ``seed``; ``flaw``: of families.RESIDUAL or _DROPOUT."""

    on = training or flaw == "dropout in eval mode"
    drop = functools.partial(F.dropout, p=0.0 if flaw == "no dropout" else p, training=on)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if flaw in _DROPOUT:
            return _DROPOUT[flaw](x, f, n, drop, norm_first)
        form = flaw if flaw in families.RESIDUAL else ""
        return families.residual(x, lambda t: drop(f(t)), n, norm_first, form)


def _block_mistakes(case: Case):
    norm_first = case.args[3]
    flag, flaws = _FLAG[norm_first], families.PRE_LN if norm_first else families.POST_LN
    texts = {flaw: f"with {flag}, {families.RESIDUAL[flaw]}" for flaw in flaws}
    swapped = "post-LN" if norm_first else "pre-LN"  # the flag read the wrong way round
    texts[swapped] = (
        f"with {flag} your block computes {swapped}: the flag is read the wrong way round. As "
        f"in torch, norm_first False (the default) means post-LN, {_POST}, and True pre-LN, {_PRE}."
    )
    return families.flawed(_block, [*flaws, *_DROPOUT_WHY], **texts, **_DROPOUT_WHY)


def _block_cases():
    """Float32 modules with random weights (the norm's too, so that a norm run twice shows)."""
    randn, seeds = seeded_randn(31), iter(range(40, 50))
    with torch.random.fork_rng(devices=[]):  # leave the learner's random stream alone
        torch.manual_seed(31)
        linear8, linear4, linear5 = nn.Linear(8, 8), nn.Linear(4, 4), nn.Linear(5, 5)
        ffn = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 6))

    def data(x, f, training=True, **options):  # a Case's fields
        norm, d = nn.LayerNorm(x.size(-1)), x.size(-1)
        with torch.no_grad():
            norm.weight.copy_(1 + 0.3 * randn(d))
            norm.bias.copy_(0.3 * randn(d))
        args = (x, f, norm, options.get("norm_first", False), options.get("dropout", 0.0))
        extra = {"options": options, "seen": {"norm": [], "sub-layer": []}}  # what they are given
        return {"args": (*args, training, next(seeds)), "extra": extra}

    fields = data(1 + 2 * randn(2, 5, 8), linear8)
    yield Case("post-LN, the default: ResidualBlock(nn.Linear(8, 8), 8); x (2, 5, 8)", **fields)
    fields = data(randn(3, 6), ffn, norm_first=True)
    yield Case("pre-LN: ffn = Linear, ReLU, Linear; x (3, 6)", **fields)
    fields = data(3 * randn(1, 4, 16), torch.tanh, norm_first=False)
    yield Case("norm_first=False (post-LN); the function torch.tanh; x (1, 4, 16)", **fields)
    fields = data(randn(2, 3, 4), linear4, norm_first=False, dropout=0.5)
    yield Case("dropout=0.5 in training, norm_first=False (post-LN); x (2, 3, 4)", **fields)
    fields = data(randn(2, 3, 4), linear4, norm_first=True, dropout=0.5)
    yield Case("dropout=0.5 in training, norm_first=True (pre-LN); x (2, 3, 4)", **fields)
    fields = data(randn(4, 5), linear5, training=False, norm_first=True, dropout=0.5)
    yield Case("dropout=0.5 after .eval(), so no dropout: pre-LN; x (4, 5)", **fields)


def _require_norm(block: nn.Module, case: str, given, expected: nn.LayerNorm) -> None:
    """``block.norm`` is a LayerNorm over d_model, and every part's parameters are the block's."""
    norm, d = getattr(block, "norm", None), expected.normalized_shape[0]
    if not isinstance(norm, nn.Module):
        raise ExerciseFailure(f"Case {case!r}: your ResidualBlock has no module attribute `norm`.")
    made = f"a LayerNorm over d_model = {d} features"
    copy_weight_and_bias(norm, expected.weight, expected.bias, case, "self.norm", made)
    registered = {id(p) for p in block.parameters()}
    for what, part in (("the sub-layer's", given), ("the norm's", norm)):
        if isinstance(part, nn.Module) and any(id(p) not in registered for p in part.parameters()):
            raise ExerciseFailure(
                f"Case {case!r}: {what} parameters are not among your block's parameters: no "
                "optimiser would train them.\nLikely cause: the module is kept in a plain list or "
                "dict; PyTorch sees a module assigned to an attribute of self."
            )
    y = 1 + torch.randn(3, d, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        if not torch.allclose(norm(y), expected(y), atol=1e-5, rtol=1e-4):
            raise ExerciseFailure(
                f"Case {case!r}: self.norm, given torch's weight and bias, does not compute "
                f"torch's LayerNorm over the last axis.\nLikely cause: self.norm is {made}: your "
                "LayerNorm of the first exercise. Does it pass check_layer_norm?"
            )


def _call_block(candidate, case: Case, table: Table):
    """The learner's block on the case, the inputs its norm and a module sub-layer get recorded."""
    x, f, n, norm_first, p, training, seed = case.args
    block = build_module(candidate, case, (f, x.size(-1)), **case.extra["options"])
    _require_norm(block, case.name, f, n)
    block.train(training)
    seen, hooks = case.extra["seen"], []
    for name, part in (("norm", block.norm), ("sub-layer", f)):
        if isinstance(part, nn.Module):  # record the positional arguments of each call
            hooks.append(part.register_forward_pre_hook(lambda _, a, k=name: seen[k].append(a)))
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return call_candidate(block, case.name, x.clone(), crash_hint=_ONE_TENSOR)
    finally:
        for hook in hooks:
            hook.remove()


_ONE_TENSOR = "the sub-layer takes one tensor and gives one of the same shape; so does the norm."


def _calls_hint(got, case: Case) -> str:
    """What the norm and the sub-layer were given, when the values matched no classic mistake."""
    x, module, norm_first = case.args[0], isinstance(case.args[1], nn.Module), case.args[3]
    right, seen = _PRE if norm_first else _POST, case.extra["seen"]
    for name, inputs in seen.items():
        if len(inputs) != 1 and (module or name == "norm"):
            return f"the {name} ran {len(inputs)} times; it runs once: {right}."
    if not norm_first and module and not torch.equal(seen["sub-layer"][0][0], x):
        return f"with {_FLAG[False]} the sub-layer reads x itself: {right}."
    if norm_first and not torch.equal(seen["norm"][0][0], x):
        return f"with {_FLAG[True]} the norm reads x itself, the sub-layer its output: {right}."
    return f"compare your forward with the formula for {_FLAG[norm_first]}: {right}."


_SAME_SHAPE = "the residual adds x back: x's shape."
check_residual_block = exercise(
    "ResidualBlock",
    "03",
    reference=ResidualBlock,
    todo="Replace each `raise NotImplementedError` in your ResidualBlock, both ways round.",
    points=2,
    table=Table(
        cases=_block_cases,
        reference=_block,
        mistakes=_block_mistakes,
        call=_call_block,
        outputs=[Out("the outputs", shape_hint=_SAME_SHAPE, fallback=_calls_hint)],
        double=False,
    ),
)


def gradient_norms(blocks, x, target, *, flaw=""):
    """The reference: for F.mse_loss(the last block's output, target), the norm of the gradient at
    each block's input, a list of len(blocks) floats; ``flaw``: a mistake of :data:`_NORMS_WHY`."""
    hidden, inputs, outputs = x.detach().requires_grad_(), [], []
    with torch.enable_grad():
        for block in blocks:
            inputs.append(hidden)
            hidden = block(hidden)
            outputs.append(hidden)
        loss = F.mse_loss(hidden, target, reduction="sum" if flaw == "summed loss" else "mean")
        if flaw == "parameter gradients":  # each block's weights, flattened together
            grads = [
                torch.autograd.grad(loss, [*b.parameters()], retain_graph=True) for b in blocks
            ]
            grads = [torch.cat([g.flatten() for g in block]) for block in grads]
        else:
            at = outputs if flaw == "at the outputs" else inputs
            grads = torch.autograd.grad(loss, at, allow_unused=True)
    measure = {"squared norm": lambda g: g.norm() ** 2, "mean of |g|": lambda g: g.abs().mean()}
    norm = measure.get(flaw, torch.linalg.vector_norm)
    norms = [0.0 if g is None else norm(g).item() for g in grads]
    return norms[::-1] if flaw == "reversed" else norms


_NORMS_WHY = {
    "at the outputs": "you measured the gradient at each block's output; the list starts at x "
    "itself, the first block's input, and ends at the last block's input.",
    "reversed": "your list is in reverse order: item i belongs to blocks[i], item 0 to x.",
    "summed loss": "your loss is the sum of the squared errors; the exercise's is their mean.",
    "squared norm": "you gave the squared norm (the sum of squares); the norm is its square root.",
    "mean of |g|": "you gave the mean absolute value of each gradient, not its norm.",
    "parameter gradients": "these are the gradients of each block's parameters, not at its input.",
}
_COPY_OF_X = "start from a copy of x that requires grad (detached from the caller's x)"
_CRASHES = {  # a text of the learner's error: what it means here (the first found wins)
    "'NoneType' object has no attribute": "a tensor made by an operation (not a leaf) keeps no "
    ".grad after backward() unless asked with .retain_grad() first; or use torch.autograd.grad.",
    "can't retain_grad on Tensor": "x does not require a gradient, so autograd tracks nothing "
    f"before the first block: {_COPY_OF_X}.",
    "does not require grad": f"the tensors you differentiate must require grad: {_COPY_OF_X}.",
    "object has no attribute 'parameters'": "a block may be a plain function, with no "
    "parameters: the gradients are at each block's input, not at its weights.",
    "backward through the graph a second time": "backward() ran twice over the same graph: run "
    "the stack once, then one backward pass for the one loss.",
}


class _Residual(nn.Linear):
    def forward(self, h):  # h + tanh(Linear(h))
        return h + torch.tanh(super().forward(h))


def _grad_cases():
    randn = seeded_randn(33)
    with torch.random.fork_rng(devices=[]):  # leave the learner's random stream alone
        torch.manual_seed(33)
        tanh_blocks = [nn.Sequential(nn.Linear(4, 4), nn.Tanh()) for _ in range(3)]
        residuals = [_Residual(8, 8, dtype=torch.float64) for _ in range(5)]
    args = ([lambda h: 2 * h, lambda h: 3 * h], torch.ones(1, 1, 1), torch.zeros(1, 1, 1))
    yield Case("the worked example: blocks [×2, ×3] (functions), x = [[[1.]]], target 0", args)
    args = (tanh_blocks, randn(2, 3, 4), randn(2, 3, 4))
    yield Case("three blocks nn.Linear(4, 4) then tanh; x (2, 3, 4) without grad", args)
    args = (residuals, randn(1, 6, 8).double().requires_grad_(), randn(1, 6, 8).double())
    yield Case("five float64 blocks x + tanh(Linear(x)); x (1, 6, 8) requiring grad", args)


def _call_gradient_norms(candidate, case: Case, table: Table) -> torch.Tensor:
    """The learner's list (or tuple, or 1-D tensor) of numbers, as a float64 tensor."""
    blocks, x, target = case.args
    for block in blocks:  # start from clean parameter gradients, whatever ran before
        if isinstance(block, nn.Module):
            block.zero_grad(set_to_none=True)
    try:
        with warnings.catch_warnings():  # reading .grad of a non-leaf warns; the message says more
            warnings.simplefilter("ignore", UserWarning)
            x = x.detach().clone().requires_grad_(x.requires_grad)
            got = call_candidate(candidate, case.name, blocks, x, target)
    except ExerciseFailure as failure:
        why = next((w for text, w in _CRASHES.items() if text in str(failure.raised)), None)
        if why is None or failure.raised is None:
            raise
        raise failure.with_cause(why) from failure.raised
    if isinstance(got, torch.Tensor):
        got = list(got.detach().flatten()) if got.dim() == 1 else [got]
    n, listed = len(blocks), isinstance(got, (list, tuple))
    if not listed:
        problem = f"your result should be a list of {n} floats, got {type(got).__name__}"
    elif len(got) != n:
        problem = f"your list has {len(got)} items, expected {n}"
    else:
        number = lambda i: isinstance(i, numbers.Real) and not isinstance(i, bool)  # noqa: E731
        wrong = [i for i in got if not (number(i) or torch.is_tensor(i) and i.numel() == 1)]
        if not wrong:
            return torch.tensor([float(item) for item in got], dtype=torch.float64)
        item = wrong[0]
        what = f"a tensor of shape {shape_str(item.shape)}" if torch.is_tensor(item) else None
        problem = f"an item of your list is {what or type(item).__name__}; each is one number"
    tail = _ONE_MORE if listed and len(got) == n + 1 else ""
    raise ExerciseFailure(f"Case {case.name!r}: {problem}: {_RESULT}.{tail}")


_RESULT = "one number per block: the norm of ∂loss/∂(the block's input), item 0 at x itself"
_ONE_MORE = (
    "\nLikely cause: you also measured the gradient at the last block's output; the list has one "
    "number per block, at its input."
)
_FLOAT64 = functools.partial(torch.as_tensor, dtype=torch.float64)  # the norms as a tensor
_STEPS = (
    "compare each step with the exercise: one forward pass through all the blocks, the mean "
    "squared error against the target, one backward pass, the norms at each block's input."
)
check_gradient_norms = exercise(
    "gradient_norms",
    "03",
    reference=gradient_norms,
    todo="Replace `raise NotImplementedError` with the passes forward and back, then the norms.",
    table=Table(
        cases=_grad_cases,
        reference=gradient_norms,
        mistakes=families.flawed(gradient_norms, _NORMS_WHY, **_NORMS_WHY),
        call=_call_gradient_norms,
        outputs=[Out("the gradient norms", _FLOAT64, fallback=_STEPS)],
        double=False,
        atol=1e-6,
    ),
)
