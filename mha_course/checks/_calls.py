"""Calling the learner's code: a crash becomes a failure naming the case, the learner's line that
raised, the inputs and the likely cause; the skeleton's NotImplementedError becomes NotDoneYet."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .._validate import shape_str
from ._failure import ExerciseFailure, NotDoneYet, _error_text
from ._inspect import frame_lines

_SHAPE_MIX_UP = "a shape mix-up; print the shapes inside your code, step by step."
_KNOWN_CRASHES = {  # a piece of the error's text: its likely cause
    "before Module.__init__() call": "your __init__ gives the module a layer before the nn.Module "
    "itself is set up: the module's own __init__ (through super) must run first.",
    "on a bool tensor is not supported": "a minus sign does not invert a bool mask: the logical "
    "not does (the ~ operator).",
    "with a bool tensor is not supported": "one minus a bool mask is no inverted mask: the logical "
    "not is (the ~ operator).",
    "got an unexpected keyword argument": "an argument name that the function called does not "
    "take. The check passes the names of the exercise's signature (torch's, where it has them): "
    "keep the skeleton's names.",
}


def _known_crash(error: BaseException) -> str | None:
    return next((why for text, why in _KNOWN_CRASHES.items() if text in str(error)), None)


def crashed(case: str | None, error: BaseException, hint: str = "", inputs: str = ""):
    """The failure to raise (``from error``) when the learner's code raised ``error``."""
    hint = _known_crash(error) or hint or _SHAPE_MIX_UP
    head = "" if case is None else f"Case {case!r}: "
    lines = [f"{head}your code raised {_error_text(error)}", *frame_lines(error)]
    lines += [f"  inputs: {inputs}"] if inputs else []
    return ExerciseFailure("\n".join([*lines, f"Likely cause: {hint}"]))


def call_candidate(candidate: Callable, case: str, *args, crash_hint: str = "", **kwargs):
    """Call the learner's code: NotImplementedError becomes NotDoneYet, a crash the failure of
    :func:`crashed` (``crash_hint``: what to look at)."""
    try:
        return candidate(*args, **kwargs)
    except NotImplementedError:
        raise NotDoneYet() from None
    except Exception as error:  # the learner's bug: report it with the case that triggered it
        inputs = [_describe(a) for a in args] + [f"{k}={_describe(v)}" for k, v in kwargs.items()]
        raise crashed(case, error, crash_hint, ", ".join(inputs)) from error


def call_with_mask(candidate, case: str, *args, attn_mask, crash_hint: str, mask_hint: str):
    """:func:`call_candidate` with ``attn_mask``; when the learner's code crashes with the mask
    and runs without it, the likely cause is ``mask_hint``."""
    try:
        return call_candidate(candidate, case, *args, attn_mask=attn_mask, crash_hint=crash_hint)
    except ExerciseFailure as failure:
        error = failure.raised
        if attn_mask is None or error is None or _known_crash(error) or not _runs(candidate, *args):
            raise
        raise failure.with_cause(mask_hint) from error


def _runs(candidate: Callable, *args) -> bool:
    try:
        with torch.no_grad():
            candidate(*args)
    except Exception:
        return False
    return True


def _describe(x, equals: bool = False) -> str:
    """``tensor(2, 4)``, ``8``, ``Linear``; with ``equals``: ``a tensor(2, 4)``, ``= 8``, ``a Linear``."""
    if isinstance(x, torch.Tensor):
        text = f"tensor{shape_str(x.shape)}" + ("" if x.is_floating_point() else f" {x.dtype}")
    elif x is None or isinstance(x, (int, float, bool, str)):
        return f"= {x!r}" if equals else repr(x)
    else:
        text = type(x).__name__
    return f"a {text}" if equals else text
