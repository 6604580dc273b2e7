"""What the checkers of the small, one-step exercises share.

Each of those exercises returns one tensor (or one count) for a few inputs, so one routine holds
the result to its type, shape, dtype and values, naming the classic mistake it matches at each
step. A crash is matched too: a classic mistake that crashes on the same inputs with the same
error is the likely cause (``a @ b`` and a learner's ``a @ b`` fail with the same message).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence

import torch
from torch import nn

from .._validate import shape_str
from ._core import Mistake, _close, call_candidate, compare, count, diagnose, require_shape
from ._failure import ExerciseFailure

__all__ = [
    "check_cases",
    "call_diagnosed",
    "require_tensor",
    "require_count",
    "build_module",
    "copy_linear",
    "copy_weight_and_bias",
    "randn",
    "seeded_randn",
    "reverse_axes",
]

# A hint: a fixed text, or one made from the result and the case's inputs: hint(got, *args).
Hint = str | Callable[..., str | None] | None


def randn(g: torch.Generator, *shape: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=dtype)


def seeded_randn(seed: int, dtype=torch.float32) -> Callable[..., torch.Tensor]:
    """``randn(*shape)``, drawing from a generator of its own: a checker's cases are the same on
    every run, and the learner's random stream is left alone."""
    g = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=dtype)

    return randn


def reverse_axes(t: torch.Tensor) -> torch.Tensor:
    """What ``t.T`` does to a tensor of any number of axes (without torch's warning)."""
    return t.permute(*reversed(range(t.dim())))


def _clones(args: Sequence) -> list:
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def _crash_cause(error: BaseException, mistakes: Sequence[Mistake], args: Sequence) -> str | None:
    """The explanation of the first mistake that crashes on ``args`` exactly as the candidate did."""
    for mistake in mistakes:
        try:
            with torch.no_grad():
                mistake.run(*_clones(args))
        except Exception as other:
            if type(other) is type(error) and str(other) == str(error):
                return mistake.explanation
    return None


def call_diagnosed(
    candidate: Callable,
    case: str,
    args: Sequence,
    mistakes: Sequence[Mistake] = (),
    crash_hint: str = "",
):
    """Call the candidate on copies of ``args``; a crash names the classic mistake that crashes
    the same way, else ``crash_hint``."""
    __tracebackhide__ = True  # noqa: F841  (IPython and pytest hide this frame)
    try:
        return call_candidate(candidate, case, *_clones(args), crash_hint=crash_hint)
    except ExerciseFailure as failure:
        error = failure.__cause__
        cause = _crash_cause(error, mistakes, args) if error is not None else None
        if cause is None:
            raise
        head = str(failure).split("\nLikely cause:")[0]
        raise ExerciseFailure(f"{head}\nLikely cause: {cause}") from error


def _hint(hint: Hint, got: torch.Tensor, args: Sequence) -> str:
    return (hint(got, *args) if callable(hint) else hint) or ""


def require_tensor(
    case: str,
    what: str,
    got,
    expected: torch.Tensor,
    mistakes: Sequence[Mistake],
    args: Sequence,
    *,
    shape_hint: Hint = None,
    dtype_hint: Hint = None,
    fallback_cause: Hint = None,
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> None:
    """Fail unless ``got`` is a tensor of ``expected``'s shape, dtype and values; the message names
    the classic mistake (run on ``args``) that gives what the candidate gave. ``what`` names the
    values, plural ("the scores")."""
    __tracebackhide__ = True  # noqa: F841
    if not isinstance(got, torch.Tensor):
        made = type(got).__name__
        tip = {
            "list": " torch.stack(...) turns a list of tensors into one tensor.",
            "tuple": " Return only the result, not a tuple.",
            "float": " .item() turns a tensor into a Python number: keep the tensor.",
        }.get(made, "")
        raise ExerciseFailure(
            f"Case {case!r}: your result should be a torch.Tensor, got {made}.{tip}"
        )
    if got.dtype == expected.dtype and _close(got, expected, atol, rtol):
        return
    cause = diagnose(mistakes, got, lambda r: r, *args, atol=atol, rtol=rtol)
    require_shape(case, "your result", got, expected.shape, cause or _hint(shape_hint, got, args))
    if got.dtype != expected.dtype:
        _wrong_dtype(case, got, expected, _hint(dtype_hint, got, args))
    if expected.dtype == torch.bool:
        _compare_bool(case, what, got, expected, cause or _hint(fallback_cause, got, args))
    else:
        compare(
            case,
            what,
            got,
            expected,
            atol=atol,
            rtol=rtol,
            cause=cause,
            fallback_cause=_hint(fallback_cause, got, args),
        )


def _wrong_dtype(case: str, got, expected, hint: str) -> None:
    if expected.dtype == torch.bool:
        right = bool(((got != 0) == expected).all())
        verdict = " (its True/False pattern is right)" if right else ""
        message = (
            f"Case {case!r}: your result is a {got.dtype} tensor{verdict}; return a bool tensor."
        )
    else:
        message = (
            f"Case {case!r}: your result is {got.dtype}, expected {expected.dtype} (the dtype of "
            f"the inputs)."
        )
        hint = hint or (
            "a tensor made inside your function with the default dtype; make new tensors like "
            "the inputs, e.g. x.new_zeros(...) or torch.zeros(..., dtype=x.dtype)."
        )
    raise ExerciseFailure(message + (f"\nLikely cause: {hint}" if hint else ""))


def _compare_bool(case: str, what: str, got, expected, cause: str) -> None:
    """Fail unless the bool tensors are equal; show the first row where they differ."""
    wrong = got != expected
    if not wrong.any():
        return
    first = tuple(int(i) for i in wrong.nonzero()[0])
    row = first[:-1]

    def show(t):
        values = (t[row] if row else t).flatten().tolist()
        more = ", ..." if len(values) > 8 else ""
        return f"[{', '.join(str(v) for v in values[:8])}{more}]"

    where = f"row {list(row)}" if row else "all"
    message = [
        f"Case {case!r}: {what} differ from the reference at {count(int(wrong.sum()), 'place')}, "
        f"first at {list(first)}.",
        f"  expected {where} = {show(expected)}",
        f"  got      {where} = {show(got)}",
    ]
    if cause:
        message.append(f"Likely cause: {cause}")
    raise ExerciseFailure("\n".join(message))


def check_cases(
    candidate: Callable,
    cases,
    reference_fn: Callable,
    mistakes: Sequence[Mistake],
    *,
    what: str,
    crash_hint: str = "",
    shape_hint: Hint = None,
    dtype_hint: Hint = None,
    fallback_cause: Hint = None,
) -> int:
    """Run the candidate on each case ``(name, *args)`` and hold its result to ``reference_fn``'s
    (a tensor, or an int count), naming the classic mistake behind a crash or a wrong result.
    Returns the number of cases."""
    __tracebackhide__ = True  # noqa: F841
    n = 0
    for case, *args in cases:
        got = call_diagnosed(candidate, case, args, mistakes, crash_hint)
        expected = reference_fn(*args)
        if isinstance(expected, int):
            require_count(case, what, got, expected, mistakes, args, fallback_cause)
            n += 1
            continue
        require_tensor(
            case,
            what,
            got,
            expected,
            mistakes,
            args,
            shape_hint=shape_hint,
            dtype_hint=dtype_hint,
            fallback_cause=fallback_cause,
        )
        n += 1
    return n


def require_count(
    case: str,
    what: str,
    got,
    expected: int,
    mistakes: Sequence[Mistake],
    args: Sequence,
    fallback_cause: Hint = None,
) -> None:
    """Fail unless ``got`` is the int ``expected``; name the mistake (run on ``args``) giving ``got``."""
    __tracebackhide__ = True  # noqa: F841
    if isinstance(got, torch.Tensor):
        raise ExerciseFailure(
            f"Case {case!r}: your result should be a Python int, got a tensor; compute it from the "
            f"ints you are given (B * H * ...), no tensors needed."
        )
    if isinstance(got, bool) or not isinstance(got, numbers.Real):
        raise ExerciseFailure(
            f"Case {case!r}: your result should be an int, got {type(got).__name__}."
        )
    if not isinstance(got, numbers.Integral):
        right = " (the number is right)" if got == expected else ""
        raise ExerciseFailure(
            f"Case {case!r}: your result should be an int, got the float {got!r}{right}.\n"
            f"Likely cause: a / (true division) or a float somewhere; a count of whole things "
            f"is an int: use * and //, and int sizes (dtype.itemsize is an int)."
        )
    if got == expected:
        return
    cause = next((m.explanation for m in mistakes if _runs_to(m, args) == got), None)
    cause = cause or _hint(fallback_cause, got, args)
    ratio = f" ({got / expected:.3g} × the reference)" if expected else ""
    raise ExerciseFailure(
        f"Case {case!r}: {what} differ from the reference.\n"
        f"  expected {expected:,}\n"
        f"  got      {got:,}{ratio}" + (f"\nLikely cause: {cause}" if cause else "")
    )


def _runs_to(mistake: Mistake, args: Sequence):
    try:
        return mistake.run(*args)
    except Exception:  # a mistake that cannot run on these inputs cannot be the cause
        return None


# ---------------------------------------------------------------- module exercises


def build_module(candidate, case: str, name: str, args: Sequence, check_name: str) -> nn.Module:
    """``candidate(*args)``: the learner's class built the way its exercise's skeleton says, with
    a message of its own for an instance passed in, a missing ``super().__init__()`` and a class
    that is not an ``nn.Module``."""
    __tracebackhide__ = True  # noqa: F841
    if isinstance(candidate, nn.Module):
        raise ExerciseFailure(
            f"Pass the class itself, {check_name}({name}), not an instance of it: the checker "
            f"builds its own, with several sizes."
        )
    try:
        module = call_candidate(candidate, case, *args)
    except ExerciseFailure as failure:
        error = failure.__cause__
        if isinstance(error, AttributeError) and "before Module.__init__() call" in str(error):
            raise ExerciseFailure(
                f"Case {case!r}: {name}(...) raised AttributeError: {error}\n"
                f"Likely cause: __init__ must call super().__init__() first, before it gives "
                f"self any layer: nn.Module sets itself up there."
            ) from error
        raise
    if not isinstance(module, nn.Module):
        raise ExerciseFailure(
            f"Case {case!r}: {name}(...) gave a {type(module).__name__}; make the class an "
            f"nn.Module (class {name}(nn.Module)) and call super().__init__() first in __init__."
        )
    return module


def copy_linear(owner: nn.Module, attr: str, source: nn.Linear, case: str, made: str) -> None:
    """Copy ``source``'s weight and bias into ``owner.<attr>``, or say what is missing or of the
    wrong shape (``made`` says how the part should be built)."""
    part = getattr(owner, attr, None)
    if part is None:
        raise ExerciseFailure(
            f"Case {case!r}: your {type(owner).__name__} has no attribute `{attr}`; create it in "
            f"__init__: self.{attr} = {made}."
        )
    copy_weight_and_bias(part, source.weight, source.bias, case, f"self.{attr}", made)


def copy_weight_and_bias(
    part,
    weight: torch.Tensor,
    bias: torch.Tensor,
    case: str,
    where: str,
    made: str,
    *,
    who: str | None = None,
    quote: str = "",
    note: str = "",
) -> None:
    """Copy torch's ``weight`` and ``bias`` into the learner's ``part`` (a Linear or a LayerNorm),
    or say which one is missing or of the wrong shape.

    ``where`` is the part as the learner reaches it (``self.q_proj``), ``made`` how it should be
    built; ``who`` (``where`` by default) names it in the wrong-shape message, ``quote`` wraps the
    missing tensor's name and ``note`` ends the missing-tensor message."""
    who = where if who is None else who
    with torch.no_grad():
        for name, value in (("weight", weight), ("bias", bias)):
            target = getattr(part, name, None)
            if not isinstance(target, torch.Tensor):
                raise ExerciseFailure(
                    f"Case {case!r}: {where} has no {quote}{name}{quote}; it should be {made}{note}."
                )
            if target.shape != value.shape:
                raise ExerciseFailure(
                    f"Case {case!r}: {where}.{name} has shape {shape_str(target.shape)}, "
                    f"expected {shape_str(value.shape)}: {who} should be {made}."
                )
            target.copy_(value)
