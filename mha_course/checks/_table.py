"""The one loop every checker runs (:func:`run`): for each :class:`Case` of a :class:`Table`,

1. call the answer (``table.call``, or a plain call on copies of the inputs); a crash is named by
   the classic mistake that crashes the same way, else by ``table.crash``;
2. run the reference on float64 copies of the inputs (``double``) and ``table.shape_checks``;
3. hold each :class:`Out` of the result to the reference's (type, shape, dtype, values, to
   ``atol``/``rtol``); a wrong one is explained by the first classic :class:`Mistake` that gives
   the same values, else by ``Out.cause``, else ``Out.fallback``.

A hint (``crash``, ``shape_hint``, ``cause``, ``fallback``) is a text or ``hint(got, case)``
(for ``crash``, ``got`` is the error); it names the cause, never the corrected line of code.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from .._validate import shape_str
from ._calls import call_candidate
from ._failure import ExerciseFailure, close, differ, not_a_tensor, require_dtype, require_shape

Hint = str | Callable[..., str | None] | None


@dataclass(frozen=True)
class Mistake:
    """A classic wrong version of an exercise and what to tell the learner who made it."""

    name: str
    run: Callable  # same signature as the candidate's call in the case
    explanation: str


@dataclass(frozen=True)
class Case:
    """One call: what the case is (its name shows in every message), and the arguments the
    answer, the reference and the classic mistakes are called with."""

    name: str
    args: tuple = ()
    kwargs: Mapping = field(default_factory=dict)
    extra: Mapping = field(default_factory=dict)  # what a table's own call needs (sizes, seeds)
    raises: tuple[str, ...] = ()  # a bad input: a ValueError whose message names one of these
    why: str = ""  # ... and why the input is bad, for the learner whose code does not raise


@dataclass(frozen=True)
class Out:
    """One compared part of a result: ``what`` names its values, plural ("the weights");
    ``pick`` takes it from a result (an index into a tuple, or a function; None: the result).
    A case whose reference result has no such part (``pick`` gives None) does not hold it."""

    what: str = "the result"
    pick: int | Callable | None = None
    shape_hint: Hint = None
    cause: Hint = None  # tried before ``fallback`` when no classic mistake matches
    fallback: Hint = None
    dtype: bool = False  # hold the dtype to the reference's too (always, for a bool output)
    atol: float | None = None
    rtol: float | None = None

    def of(self, result):
        if self.pick is None:
            return result
        return self.pick(result) if callable(self.pick) else result[self.pick]


@dataclass(frozen=True)
class Table:
    cases: Callable[[], Iterable[Case]]
    reference: Callable
    mistakes: Sequence[Mistake] | Callable[[Case], Sequence[Mistake]] = ()
    outputs: Sequence[Out] = (Out(),)
    call: Callable | None = None  # call(candidate, case, table) -> result; None: a plain call
    crash: Hint = ""
    shape_checks: Sequence[Callable] = ()  # check(case, got, expected): raise ExerciseFailure
    double: bool = True  # run the reference and the mistakes on float64 copies of the inputs
    atol: float = 1e-5
    rtol: float = 1e-4

    def mistakes_for(self, case: Case) -> Sequence[Mistake]:
        return self.mistakes(case) if callable(self.mistakes) else self.mistakes


def run(candidate, table: Table, name: str = "answer") -> int:
    """Run ``candidate`` (the learner's ``name``) through every case of ``table``; the number of
    cases it passed."""
    __tracebackhide__ = True  # noqa: F841
    n = 0
    for case in table.cases():
        n += 1
        if case.raises:
            require_value_error(candidate, case, name)
            continue
        mistakes = table.mistakes_for(case)
        if table.call is None:
            got = call_diagnosed(candidate, case, mistakes, table.crash)
        else:
            got = table.call(candidate, case, table)
        args, kwargs = _inputs(case, table.double)
        with torch.no_grad():
            expected = table.reference(*args, **kwargs)
        for shape_check in table.shape_checks:
            shape_check(case, got, expected)
        for out in table.outputs:
            _hold(case, out, got, expected, mistakes, (args, kwargs), table)
    return n


def _copy(x, double: bool = False):
    """A copy of an input: a tensor cloned (with ``double``, a float one in float64)."""
    if not isinstance(x, torch.Tensor):
        return x
    return x.detach().double() if double and x.is_floating_point() else x.clone()


def _inputs(case: Case, double: bool = False) -> tuple[tuple, dict]:
    """Copies of the case's inputs (see :func:`_copy`)."""
    args = tuple(_copy(a, double) for a in case.args)
    return args, {k: _copy(v, double) for k, v in case.kwargs.items()}


def _attempt(mistake: Mistake, *args, **kwargs):
    """What ``mistake`` gives, or None: one that cannot run on these inputs cannot be the cause."""
    try:
        with torch.no_grad():
            return mistake.run(*args, **kwargs)
    except Exception:
        return None


def _hold(case: Case, out: Out, got, expected, mistakes, inputs, table: Table) -> None:
    """Fail unless ``out`` of ``got`` is ``out`` of ``expected``: type, shape, dtype, values."""
    __tracebackhide__ = True  # noqa: F841
    e = out.of(expected)
    if e is None:  # the reference gives no such part on this case: nothing to hold
        return
    g, (args, kwargs) = out.of(got), inputs
    atol, rtol = out.atol or table.atol, out.rtol or table.rtol
    picked = [  # the mistakes as functions of the case's positional inputs, giving out's part
        Mistake(m.name, lambda *a, m=m: out.of(m.run(*a, **kwargs)), m.explanation)
        for m in mistakes
    ]
    if isinstance(e, int) and not isinstance(e, bool):
        cause = _hint(out.cause, g, case) or _hint(out.fallback, g, case)
        require_count(case.name, out.what, g, e, picked, args, cause)
        return
    if not isinstance(g, torch.Tensor):
        raise not_a_tensor(case.name, out.what, g)
    dtype_ok = g.dtype == e.dtype or not (out.dtype or e.dtype == torch.bool)
    if g.shape == e.shape and dtype_ok and close(g, e, atol, rtol):
        return
    cause = _diagnose(picked, g, e, args, atol, rtol)
    require_shape(case.name, out.what, g, e.shape, cause or _hint(out.shape_hint, g, case))
    if e.dtype == torch.bool or (out.dtype and g.dtype != e.dtype):
        require_dtype(case.name, out.what, g, e, cause or _hint(out.fallback, g, case))
    if e.dtype != torch.bool:
        cause = cause or _hint(out.cause, g, case)
    differ(case.name, out.what, g, e, cause or _hint(out.fallback, g, case))


def _diagnose(mistakes: Sequence[Mistake], got, expected, args, atol, rtol) -> str | None:
    """The explanation of the first classic mistake that gives what the answer gave (and, on
    these inputs, not what the reference gives: there it is no mistake)."""
    for mistake in mistakes:
        wrong = _attempt(mistake, *args)
        if not isinstance(wrong, torch.Tensor) or close(wrong, expected, atol, rtol):
            continue
        if close(got, wrong, atol, rtol, equal_nan=True):
            return mistake.explanation
    return None


def _hint(hint: Hint, got, case: Case) -> str:
    """A hint's text; a hint that cannot read this answer says nothing (never breaks a check)."""
    try:
        return (hint(got, case) if callable(hint) else hint) or ""
    except Exception:
        return ""


def pair(first: str, second: str) -> Callable:
    """A shape check for a result that is a pair ``(first, second)`` of tensors: a pair it is,
    in that order (the shapes, or the values, of the two swapped are named)."""

    def check(case: Case, got, expected) -> None:
        if not (isinstance(got, tuple) and len(got) == 2):
            length = f" of length {len(got)}" if isinstance(got, tuple) else ""
            raise ExerciseFailure(
                f"Case {case.name!r}: the result should be a pair ({first}, {second}); got "
                f"{type(got).__name__}{length}."
            )
        a, b = got
        if not all(isinstance(t, torch.Tensor) for t in (a, b)):
            return
        e_a, e_b = expected
        swapped_shapes = a.shape == e_b.shape and b.shape == e_a.shape and a.shape != b.shape
        swapped_values = (
            a.shape == b.shape and close(a, e_b, 1e-5, 1e-4) and close(b, e_a, 1e-5, 1e-4)
        )
        if swapped_shapes or (swapped_values and not close(a, e_a, 1e-5, 1e-4)):
            raise ExerciseFailure(
                f"Case {case.name!r}: the pair came as ({second}, {first}): the first tensor is "
                f"{shape_str(a.shape)}, the second {shape_str(b.shape)}.\nLikely cause: the order "
                f"of the pair; {first} comes first."
            )

    return check


def require_value_error(candidate, case: Case, name: str = "answer") -> None:
    """The answer must raise ValueError on the case's bad input, naming one of ``case.raises``."""
    __tracebackhide__ = True  # noqa: F841
    args, kwargs = _inputs(case)
    try:
        call_candidate(candidate, case.name, *args, **kwargs)
    except ExerciseFailure as failure:
        error = failure.raised
        if error is None:
            raise
        if isinstance(error, ValueError):
            if any(word in str(error).lower() for word in case.raises):
                return
            raise ExerciseFailure(
                f"Case {case.name!r}: your ValueError says {str(error)!r}.\nLikely cause: the "
                f"message should name what is wrong ({' or '.join(case.raises)}) and the numbers "
                "it got."
            ) from error
        raise failure.with_cause(
            f"{case.why}. Check it yourself before computing, and raise a ValueError that names "
            f"it, not a {type(error).__name__} from deep inside."
        ) from error
    raise ExerciseFailure(
        f"Case {case.name!r}: your {name} returned a result; it should raise ValueError.\n"
        f"Likely cause: {case.why}. Check it first, and raise a ValueError that names it."
    )


def seeded_randn(seed: int, dtype=torch.float32) -> Callable[..., torch.Tensor]:
    """``randn(*shape)`` from a generator of its own: a checker's cases are the same on every
    run, and the learner's random stream is left alone."""
    g = torch.Generator().manual_seed(seed)
    return lambda *shape: torch.randn(*shape, generator=g, dtype=dtype)


def reverse_axes(t: torch.Tensor) -> torch.Tensor:
    """What ``t.T`` does to a tensor of any number of axes (without torch's warning)."""
    return t.permute(*reversed(range(t.dim())))


def call_diagnosed(candidate: Callable, case: Case, mistakes: Sequence[Mistake] = (), crash=""):
    """``candidate(*args, **kwargs)`` on copies of the case's inputs; a crash names the classic
    mistake that crashes the same way, else ``crash`` (a text, or ``crash(error, case)``: the
    likely cause of that error, or None)."""
    __tracebackhide__ = True  # noqa: F841
    args, kwargs = _inputs(case)
    try:
        hint = "" if callable(crash) else crash
        return call_candidate(candidate, case.name, *args, crash_hint=hint, **kwargs)
    except ExerciseFailure as failure:
        error = failure.raised
        if error is None:
            raise
        cause = _crash_cause(error, mistakes, case) or (
            crash(error, case) if callable(crash) else None
        )
        if cause is None:
            raise
        raise failure.with_cause(cause) from error


def _crash_cause(error: BaseException, mistakes: Sequence[Mistake], case: Case) -> str | None:
    """The explanation of the first mistake that crashes on the case exactly as the answer did."""
    for mistake in mistakes:
        args, kwargs = _inputs(case)
        try:
            with torch.no_grad():
                mistake.run(*args, **kwargs)
        except Exception as other:
            if type(other) is type(error) and str(other) == str(error):
                return mistake.explanation
    return None


class _Shapes(TorchFunctionMode):
    """Records the shape of every tensor that a torch function or tensor method returns."""

    def __init__(self):
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.shapes.append(tuple(t.shape))
        return out


def builds(candidate, case: str, args, last_two: tuple[int, int], crash_hint: str, **kwargs):
    """Whether ``candidate(*args, **kwargs)`` makes a tensor whose last two axes are ``last_two``
    (the (L, S) scores that an answer working in blocks must never hold, say)."""
    with _Shapes() as seen:
        call_candidate(candidate, case, *map(_copy, args), crash_hint=crash_hint, **kwargs)
    return any(shape[-2:] == tuple(last_two) for shape in seen.shapes)


def build_module(candidate, case: Case, sizes: Sequence, **options) -> nn.Module:
    """``candidate(*sizes, **options)``: the learner's class, built as its skeleton says, with a
    message of its own for an instance passed in and for a class that is not an ``nn.Module``."""
    __tracebackhide__ = True  # noqa: F841
    name = getattr(candidate, "__name__", type(candidate).__name__)
    if isinstance(candidate, nn.Module):
        raise ExerciseFailure(
            f"Pass the class itself, not an instance of {name}: the checker builds its own, with "
            "several sizes."
        )
    module = call_candidate(candidate, case.name, *sizes, **options)
    if not isinstance(module, nn.Module):
        raise ExerciseFailure(
            f"Case {case.name!r}: {name}(...) gave a {type(module).__name__}, not an nn.Module.\n"
            f"Likely cause: the class does not derive from nn.Module, or its __init__ does not "
            f"start by setting up the nn.Module."
        )
    return module


def copy_weight_and_bias(part, weight, bias, case: str, where: str, made: str) -> None:
    """Copy ``weight`` and ``bias`` (None: none expected) into the learner's ``part`` (a Linear or
    a LayerNorm), or say which one is missing or of the wrong shape (``where`` is the part as the
    learner reaches it, ``self.q_proj``; ``made`` what it should be, in words)."""
    with torch.no_grad():
        for name, value in (("weight", weight), ("bias", bias)):
            target = getattr(part, name, None)
            if (value is None) == isinstance(target, torch.Tensor):
                has = "has a" if value is None else "has no"
                raise ExerciseFailure(f"Case {case!r}: {where} {has} {name}; it should be {made}.")
            if value is None:
                continue
            if target.shape != value.shape:
                raise ExerciseFailure(
                    f"Case {case!r}: {where}.{name} has shape {shape_str(target.shape)}, "
                    f"expected {shape_str(value.shape)}: {where} should be {made}."
                )
            target.copy_(value)


def require_tensor(
    case: str, what: str, got, expected: torch.Tensor, mistakes, args, **hints
) -> None:
    """Hold one tensor to ``expected`` outside a table (``hints``: shape_hint, cause, fallback,
    dtype, atol, rtol as :class:`Out`'s); the mistakes are run on ``args``."""
    __tracebackhide__ = True  # noqa: F841
    out = Out(what, None, **hints)
    table = Table(cases=tuple, reference=lambda: expected)
    _hold(Case(case, tuple(args)), out, got, expected, mistakes, (tuple(args), {}), table)


def require_count(case: str, what: str, got, expected: int, mistakes, args, cause="") -> None:
    """Fail unless ``got`` is the int ``expected``; name the mistake (run on ``args``) giving ``got``,
    else ``cause``."""
    __tracebackhide__ = True  # noqa: F841
    if isinstance(got, torch.Tensor):
        raise ExerciseFailure(
            f"Case {case!r}: {what} should be a Python int, got a tensor.\nLikely cause: a count "
            "is computed from the sizes you are given, which are ints: no tensor is needed."
        )
    if isinstance(got, bool) or not isinstance(got, numbers.Real):
        raise ExerciseFailure(f"Case {case!r}: {what} should be an int, got {type(got).__name__}.")
    if not isinstance(got, numbers.Integral):
        right = " (the number is right)" if got == expected else ""
        raise ExerciseFailure(
            f"Case {case!r}: {what} should be an int, got the float {got!r}{right}.\n"
            "Likely cause: a true division (/) or a float somewhere: a count of whole things is "
            "an int."
        )
    if got == expected:
        return
    cause = next((m.explanation for m in mistakes if _attempt(m, *args) == got), cause)
    ratio = f" ({got / expected:.3g} × the reference)" if expected else ""
    raise ExerciseFailure(
        f"Case {case!r}: {what} differ from the reference.\n  expected {expected:,}\n"
        f"  got      {got:,}{ratio}" + (f"\nLikely cause: {cause}" if cause else "")
    )
