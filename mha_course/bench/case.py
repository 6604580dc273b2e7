"""One case of a sweep: an implementation at one (dtype, mode, length). Its inputs and float64
reference, the correctness gate, and its measurement (gate, peak memory, time) by :func:`measure`,
which turns every failure into a status instead of an exception.

**The gate.** Before anything is timed, the implementation's output (and, in forward+backward,
the gradient of its input) is compared with ``torch.nn.MultiheadAttention`` run in float64 with
the same weights, on the first ``check_queries`` queries: the largest |got − reference| over the
largest |reference|, against :data:`.records.TOLERANCE` for the dtype (1e-3 in float32, 2e-2 in
float16). A bug that skips work makes code faster, so a wrong implementation is recorded as
"wrong", with its error, and never timed.

**Refusals.** An implementation that forces one SDPA kernel (``SDPA flash``, ...) may meet a
device or a call that kernel cannot handle: SDPA then raises "No available kernel" (or "No viable
backend") and gives its reasons as warnings ("Both fused kernels do not support non-zero
dropout."). That is recorded as "unsupported", with torch's first reasons; any other error is
"error" (or "oom"), so that a bug never passes for a missing kernel. :func:`gate` runs the gate
alone, at one length; :func:`refusal` asks SDPA about any call (lesson 06 uses both)."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..variants import MHAParams
from .implementations import Implementation
from .measure import peak_memory, time_call
from .records import BACKWARD, FORWARD, NOISY, TOLERANCE, Result, mha_flops

__all__ = ["Case", "Inputs", "make_inputs", "measure", "refusal", "Verdict", "gate"]


@dataclass(frozen=True)
class Case:
    """One measurement a sweep may make: an implementation at a (dtype, mode, length)."""

    implementation: Implementation
    dtype: torch.dtype
    mode: str
    length: int
    batch: int
    embed_dim: int
    heads: int
    check_queries: int = 128

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")

    @property
    def series(self) -> tuple[str, str, str]:
        """The implementation's line in a plot: its cases differ only in length."""
        return self.implementation.name, self.dtype_name, self.mode

    @property
    def group(self) -> tuple[str, str, int]:
        """The cases that share inputs and a float64 reference."""
        return self.dtype_name, self.mode, self.length

    @property
    def score_bytes(self) -> int:
        """One (B, H, L, S) matrix in this dtype."""
        return self.batch * self.heads * self.length**2 * self.dtype.itemsize

    def flops(self, length: int | None = None) -> float:
        return mha_flops(self.batch, length or self.length, self.embed_dim, self.mode)


@dataclass
class Inputs:
    """The inputs and float64 reference shared by every implementation at one (dtype, mode, L)."""

    x: torch.Tensor
    grad_out: torch.Tensor | None
    ref_out: torch.Tensor
    ref_grad: torch.Tensor | None
    n_check: int


def make_inputs(params64: MHAParams, case: Case, device, seed: int) -> Inputs:
    B, L, E, backward = case.batch, case.length, case.embed_dim, case.mode == BACKWARD
    generator = torch.Generator().manual_seed(seed + L)
    x, grad_out = (
        torch.randn(B, L, E, generator=generator, dtype=torch.float64).to(device) for _ in range(2)
    )
    x, grad_out = x.to(case.dtype), grad_out.to(case.dtype)
    n_check = min(case.check_queries, L)
    x64 = x.double().requires_grad_(backward)
    reference = params64.to(device=device).to_torch().eval()
    with torch.set_grad_enabled(backward):
        ref_out = reference(x64[:, :n_check], x64, x64, need_weights=False)[0]  # first queries
        ref_grad = None
        if backward:
            (ref_grad,) = torch.autograd.grad(ref_out, x64, grad_out[:, :n_check].double())
    return Inputs(
        x.requires_grad_(backward),
        grad_out if backward else None,
        ref_out.detach(),
        ref_grad,
        n_check,
    )


def _relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    got = got.detach().double()
    if not torch.isfinite(got).all():
        return math.inf
    return ((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def _gate(run: Callable, inputs: Inputs, mode: str) -> float:
    """The implementation's relative error against the float64 reference (output, input gradient)."""
    with torch.set_grad_enabled(mode == BACKWARD):
        out = run(inputs.x)
    error = _relative_error(out[:, : inputs.n_check], inputs.ref_out)
    if mode == BACKWARD:
        upstream = torch.zeros_like(out)
        upstream[:, : inputs.n_check] = inputs.grad_out[:, : inputs.n_check]
        (grad,) = torch.autograd.grad(out, inputs.x, upstream)
        error = max(error, _relative_error(grad, inputs.ref_grad))
    return error


def _call(run: Callable, leaves: list[torch.Tensor], inputs: Inputs, mode: str) -> Callable:
    """The thing that is timed: a forward under no_grad, or a forward and its full backward."""
    if mode == FORWARD:

        def forward():
            with torch.no_grad():
                return run(inputs.x)

        return forward

    def forward_backward():
        out = run(inputs.x)
        return torch.autograd.grad(out, [inputs.x, *leaves], inputs.grad_out)

    return forward_backward


def _is_oom(error: BaseException) -> bool:
    """A GPU raises torch.OutOfMemoryError; the CPU allocator a RuntimeError "can't allocate memory"."""
    # (torch.OutOfMemoryError from torch 2.5 on; torch.cuda.OutOfMemoryError, the same class, before)
    if isinstance(error, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    text = str(error).lower()
    return isinstance(error, RuntimeError) and (
        "out of memory" in text or "can't allocate memory" in text
    )


def _first_sentence(text: str) -> str:
    """The gist of an error: its first sentence, without the C++ "[enforce fail at ...]" prefix
    or the "(Triggered internally at <source file>)" suffix of torch's warnings."""
    text = re.sub(r"\s*\(Triggered internally at [^)]*\)\.?", "", text)
    text = re.sub(r"^\[enforce fail[^\]]*\][^.]*\.\s*", "", text.strip())
    return (text.splitlines() or [""])[0].split(". ")[0][:160]


def _is_unsupported(error: BaseException) -> bool:
    text = str(error)
    return isinstance(error, RuntimeError) and (
        "No viable backend" in text or "No available kernel" in text
    )


def _reasons(caught: list) -> str:
    """Why SDPA refused a forced kernel, from the warnings it gave: their first sentences, once
    each, without the headings that end in a colon ("Flash attention kernel not used because:")."""
    reasons = [
        _first_sentence(str(w.message)) for w in caught if issubclass(w.category, UserWarning)
    ]
    return "; ".join(dict.fromkeys(r for r in reasons if r and not r.endswith(":")))


@contextlib.contextmanager
def _forced(kernel):
    """SDPA forced to ``kernel`` (None: the dispatcher's choice), torch's warnings recorded."""
    forcing = contextlib.nullcontext()
    if kernel is not None:
        from torch.nn.attention import sdpa_kernel

        forcing = sdpa_kernel(kernel)
    with forcing, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)  # a forced kernel says why it cannot run
        yield caught


def refusal(kernel, call: Callable[[], object]) -> str | None:
    """Run ``call()`` with SDPA forced to ``kernel`` (an ``SDPBackend``; None: the dispatcher's
    choice). None if it ran; if SDPA refused the kernel here, why, in torch's words (its warnings,
    else its error's first sentence). Any other error is raised: a bug never passes for a missing
    kernel."""
    with _forced(kernel) as caught:
        try:
            call()
        except RuntimeError as error:
            if not _is_unsupported(error):
                raise
            return _reasons(caught) or _first_sentence(str(error))
    return None


def _too_far(error: float, dtype: torch.dtype) -> str:
    """Why an error fails the gate ("relative error 1.4 > 0.001"), or "" if it passes."""
    tolerance = TOLERANCE[dtype]
    return "" if error <= tolerance else f"relative error {error:.2g} > {tolerance:g}"


class Verdict(NamedTuple):
    """The gate's verdict on one implementation: ``status`` "ok", "wrong" or "unsupported"; the
    largest relative error of the output and the input gradient (None if it did not run); why."""

    status: str
    error: float | None
    message: str


def gate(
    implementations: list[Implementation],
    length: int,
    *,
    batch: int = 1,
    embed_dim: int = 512,
    heads: int = 8,
    dtype: torch.dtype = torch.float32,
    mode: str = BACKWARD,
    device="cpu",
    seed: int = 0,
) -> dict[str, Verdict]:
    """The correctness gate alone, nothing timed: each implementation on self-attention of x
    (batch, length, embed_dim) in ``dtype``, against the float64 reference, with the weights and
    inputs a sweep would use. A forced SDPA kernel SDPA refuses here is "unsupported", with torch's
    reason; any other error is raised."""
    device = torch.device(device)
    params64 = MHAParams.random(embed_dim, heads, seed=seed, dtype=torch.float64)
    params = params64.to(dtype=dtype, device=device).requires_grad_(mode == BACKWARD)
    case = Case(implementations[0], dtype, mode, length, batch, embed_dim, heads)
    inputs = make_inputs(params64, case, device, seed)
    verdicts = {}
    for impl in implementations:
        with _forced(impl.kernel) as caught:
            try:
                error = _gate(impl.build(params)[0], inputs, mode)
            except RuntimeError as failure:
                if not _is_unsupported(failure):
                    raise
                why = _reasons(caught) or _first_sentence(str(failure))
                verdicts[impl.name] = Verdict("unsupported", None, why)
                continue
        why = _too_far(error, dtype)
        verdicts[impl.name] = Verdict("wrong" if why else "ok", error, why)
    return verdicts


def measure(
    impl: Implementation,
    params: MHAParams,
    inputs: Inputs,
    base: Result,
    device: torch.device,
    *,
    afford: Callable[[float], str | None] = lambda call_s: None,
    **timing,
) -> tuple[Result, float | None]:
    """Gate, memory, time, for one implementation: the result (failures become a status, never an
    exception) and the seconds one call took (the median, or the gate's call), for the planner.

    ``afford(call_s)`` is asked once the gate has timed one call; if it gives a reason not to go
    on (a string), the memory pass times a second call and it is asked again (a first call may
    include compiling): a reason then skips the timing, as "skipped". ``timing`` goes to
    :func:`.measure.time_call`."""
    caught = []
    try:
        with _forced(impl.kernel) as caught:
            params.requires_grad_(base.mode == BACKWARD)
            run, leaves = impl.build(params)
            start = time.perf_counter()
            error = _gate(run, inputs, base.mode)  # .item() waits for a GPU
            call_s = time.perf_counter() - start
            if message := _too_far(error, inputs.x.dtype):
                return dataclasses.replace(
                    base, status="wrong", max_error=error, message=message
                ), call_s
            call = _call(run, leaves, inputs, base.mode)
            if afford(call_s):  # a second look: a first call may pay for compiling
                start = time.perf_counter()
                peak = peak_memory(call, device)
                call_s = min(call_s, time.perf_counter() - start)
                if reason := afford(call_s):
                    return dataclasses.replace(
                        base, status="skipped", max_error=error, message=reason
                    ), call_s
            else:
                peak = peak_memory(call, device)
            # the gate and the memory pass were the warm-up calls
            median, iqr, runs = time_call(call, warmup=0, call_s=call_s, **timing)
    except ImportError as error:
        return dataclasses.replace(base, status="unavailable", message=str(error)), None
    except Exception as error:  # noqa: BLE001  (a failing implementation must not stop the sweep)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        status = "oom" if _is_oom(error) else "unsupported" if _is_unsupported(error) else "error"
        why = f"{type(error).__name__}: {_first_sentence(str(error))}"
        if status == "unsupported":  # the kernels' warnings say why (dtype, head size, ...)
            why = _reasons(caught) or "this device has no such kernel"
        return dataclasses.replace(base, status=status, message=why), None
    rate = base.flops / median
    noisy = f"noisy: IQR {100 * iqr / median:.0f}% of the median" if iqr > NOISY * median else ""
    return dataclasses.replace(
        base,
        status="ok",
        message=noisy,
        max_error=error,
        median_s=median,
        iqr_s=iqr,
        runs=runs,
        peak_bytes=peak,
        flop_rate=rate,
        matmul_fraction=rate / base.matmul_flop_rate if base.matmul_flop_rate else None,
    ), median
