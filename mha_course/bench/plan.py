"""Planning a sweep to fit the device's memory and a time budget: predictions from a
:class:`.device_profile.DeviceProfile` and from what the sweep has measured so far, and the choice of
cases. Plain functions of their arguments, so that the logic can be checked without the device.

* **Memory.** A case's peak memory is predicted before it runs: its activations (a few copies of
  x, (B, L, E)) and, for an implementation that holds the scores, several (B, H, L, S) matrices
  (scores and weights; more with their gradients in a backward pass). Once an implementation has
  been measured at a shorter length, its measured peak, grown as it grew between its last two
  lengths, is the prediction. A case predicted to need more than the memory free now is skipped.
* **Time.** A call is predicted to take the measured overhead of a tiny call plus its FLOPs at a
  fraction (:data:`EFFICIENCY`) of the measured matmul rate; once the implementation has been
  measured at a shorter length, that time, grown like the FLOPs (or like the measured growth
  between its last two lengths, if faster). A measurement costs a fixed overhead, two untimed
  calls (the correctness gate, the memory pass) and its timed part. :func:`plan` takes the
  shortest length of every series (implementation, dtype, mode) first, cheapest first, then the
  next length of every series, and so on, while the budget lasts; a series whose next length does
  not fit ends there, and the others go on (so the fast implementations reach the longest
  lengths). What is left is spread over the chosen measurements as timed seconds each, between
  ``min_run_time`` and ``max_run_time``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .case import Case
from .device_profile import DeviceProfile
from .records import BASELINE, mha_flops

__all__ = [
    "predict_call_s",
    "predict_peak_bytes",
    "measurement_s",
    "group_s",
    "Plan",
    "plan",
    "Rehearsal",
    "rehearse",
    "describe_s",
]

EFFICIENCY = 0.2
"""The fraction of the square-matmul rate an attention call is assumed to reach before it has been
measured (measured on a CPU: 10-20% for the unfused versions at long L, about 60% for SDPA)."""
MIN_BLOCKS = 3  # timed blocks every measurement gets, however slow one call is
UNTIMED_CALLS = 2  # the correctness gate and the memory pass
SCORE_COPIES = {"forward": 4, "forward+backward": 8}
"""(B, H, L, S) matrices an implementation that holds the scores is assumed to need at its peak:
scores, weights, temporaries, and with backward their gradients too. (On an H100 the unfused
versions peaked at 16 to 32 GiB at L = 8192, B = 4, H = 8 in float16: 4 to 8 score matrices.)"""
ACTIVATION_COPIES = {"forward": 8, "forward+backward": 24}  # (B, L, E) tensors: Q, K, V, ...


Seen = Mapping[tuple[str, str, str], Sequence[tuple[int, float | None, int | None]]]
"""What a sweep has measured so far: series -> [(length, seconds per call, peak bytes), ...]."""


def _overhead(profile: DeviceProfile, name: str, mode: str) -> float:
    """The implementation's measured overhead per call; for one not measured, the largest."""
    if (name, mode) in profile.call_overhead_s:
        return profile.call_overhead_s[name, mode]
    return max((s for (_, m), s in profile.call_overhead_s.items() if m == mode), default=0.0)


def predict_call_s(case: Case, profile: DeviceProfile, seen: Seen = {}) -> float:  # noqa: B006
    """Seconds one call of the case is predicted to take (see the module's docstring)."""
    history = [(L, s) for L, s, _ in seen.get(case.series, ()) if L < case.length and s]
    if history:
        L0, s0 = history[-1]  # the longest length measured
        growth = case.flops() / case.flops(L0)
        if len(history) >= 2 and s0 > history[-2][1]:  # as fast as it grew last time, if faster
            L1, s1 = history[-2]
            slope = min(math.log(s0 / s1) / math.log(L0 / L1), 2.5)
            growth = max(growth, (case.length / L0) ** slope)
        return s0 * growth
    rate = profile.matmul_rate.get(case.dtype_name)
    overhead = _overhead(profile, case.implementation.name, case.mode)
    return profile.slowdown * (overhead + (case.flops() / (rate * EFFICIENCY) if rate else 0.0))


def predict_peak_bytes(case: Case, seen: Seen = {}) -> float:  # noqa: B006
    """Extra bytes one call of the case is predicted to allocate at its peak (see the module's
    docstring): from the model before the implementation has been measured; after, its longest
    measured peak grown as L^q, q measured between its last two lengths (between 1 and 2), or
    2 for an implementation that holds the scores and 1 for one that does not."""
    history = [(L, peak) for L, _, peak in seen.get(case.series, ()) if L < case.length and peak]
    if history:
        L0, peak0 = history[-1]
        q = 2.0 if case.implementation.holds_scores else 1.0
        if len(history) >= 2:
            L1, peak1 = history[-2]
            q = min(max(math.log(peak0 / peak1) / math.log(L0 / L1), 1.0), 2.0)
        return peak0 * (case.length / L0) ** q
    x_bytes = case.batch * case.length * case.embed_dim * case.dtype.itemsize
    scores = SCORE_COPIES[case.mode] * case.score_bytes if case.implementation.holds_scores else 0
    return ACTIVATION_COPIES[case.mode] * x_bytes + scores


def measurement_s(call_s: float, run_time: float, profile: DeviceProfile) -> float:
    """Seconds one measurement takes: its overhead, the untimed calls, then ``run_time`` seconds of
    timed blocks (at least :data:`MIN_BLOCKS` calls; the last block may run a little over)."""
    timed = max(run_time + min(call_s, run_time / 10), MIN_BLOCKS * call_s)
    return profile.cost_factor * (profile.measurement_overhead_s + UNTIMED_CALLS * call_s + timed)


def group_s(case: Case, profile: DeviceProfile, run_time: float) -> float:
    """Seconds a (dtype, mode, length) costs once, whatever runs in it: the float64 reference
    (the first ``check_queries`` queries against every key) and the matmul rate measured next to it."""
    reference = mha_flops(
        case.batch, min(case.check_queries, case.length), case.embed_dim, case.mode, case.length
    )
    rate64 = profile.matmul_rate.get("float64")
    seconds = _overhead(profile, BASELINE, case.mode)
    seconds += reference / (rate64 * EFFICIENCY) if rate64 else 0.0
    rate = profile.matmul_rate.get(case.dtype_name)
    matmul = 2 * profile.matmul_n**3 / rate if rate else 0.0
    return profile.cost_factor * (seconds + max(run_time, (1 + MIN_BLOCKS) * matmul))


@dataclass(frozen=True)
class Plan:
    """Which cases to run (indices into the cases planned over) and each one's timed seconds."""

    run: frozenset[int]
    run_time: float
    predicted_s: float  # the whole plan, as predicted
    call_s: tuple[float, ...]  # the predicted seconds per call of every case


def plan(
    cases: Sequence[Case],
    seconds: float,
    profile: DeviceProfile,
    seen: Seen = {},  # noqa: B006
    *,
    min_run_time: float,
    max_run_time: float,
) -> Plan:
    """Choose the cases that fit in ``seconds`` and the timed seconds each one gets (see the
    module's docstring). Once a case does not fit, the longer lengths of its series are left out.
    The baseline (``torch MHA``) is taken with the cheapest case of each length: every time
    ratio needs it."""
    call_s = tuple(predict_call_s(c, profile, seen) for c in cases)
    cheapest = [measurement_s(s, min_run_time, profile) for s in call_s]
    least = {}  # group -> its cheapest measurement
    for case, cost in zip(cases, cheapest):
        least[case.group] = min(least.get(case.group, math.inf), cost)
    lengths = sorted({case.length for case in cases})  # of every series: ranks compare across

    def priority(i: int) -> tuple[int, float, int]:
        """The shortest length of every series first, cheapest first (the baseline with the
        cheapest of its length: every ratio needs it); then the next length, and so on."""
        case = cases[i]
        rank = lengths.index(case.length)
        baseline = case.implementation.name == BASELINE
        return rank, least[case.group] if baseline else cheapest[i], case.length

    chosen, total, paid, blocked = set(), 0.0, set(), set()
    for i in sorted(range(len(cases)), key=priority):
        case = cases[i]
        if case.series in blocked:
            continue
        cost = cheapest[i] + (0.0 if case.group in paid else group_s(case, profile, min_run_time))
        if total + cost <= seconds:
            chosen.add(i)
            paid.add(case.group)
            total += cost
        else:
            blocked.add(case.series)

    def extra(run_time: float) -> float:  # what longer timing adds to the chosen cases
        return sum(measurement_s(call_s[i], run_time, profile) - cheapest[i] for i in chosen)

    low, high = min_run_time, max(min_run_time, max_run_time)
    if extra(high) <= seconds - total:
        low = high
    else:
        for _ in range(40):  # bisect: extra() only grows with the run time
            middle = (low + high) / 2
            low, high = (middle, high) if extra(middle) <= seconds - total else (low, middle)
    return Plan(frozenset(chosen), low, total + extra(low), call_s)


@dataclass(frozen=True)
class Rehearsal:
    """A sweep played on paper (:func:`rehearse`): what it would run, and when it would end."""

    run: tuple[int, ...]  # indices of the cases it would measure, in order
    not_run: dict[int, str]  # index -> why not ("unsupported: ...", "too big", "too slow")
    seconds: float  # predicted wall time, the device's description included
    describe_s: float  # of which describing the device


def describe_s(profile: DeviceProfile, dtypes: Sequence, pairs: int, run_time: float) -> float:
    """Seconds :func:`.device_profile.describe_device` takes before a budgeted sweep: a matmul
    rate timed for ``run_time`` in each dtype and float64 (with a warm-up call and the last block
    over), and a tenth of that for a tiny call of each of ``pairs`` (implementation, mode)."""
    seconds = 0.0
    for name in (*(str(d).removeprefix("torch.") for d in dtypes), "float64"):
        rate = profile.matmul_rate.get(name)
        matmul = 2 * profile.matmul_n**3 / rate if rate else 0.0
        seconds += run_time + 3 * matmul
    tiny = max(profile.call_overhead_s.values(), default=0.0)
    return seconds + pairs * (run_time / 10 + 3 * tiny)


def rehearse(
    cases: Sequence[Case],
    budget_s: float,
    profile: DeviceProfile,
    *,
    min_run_time: float,
    max_run_time: float,
    planned_share: float,
) -> Rehearsal:
    """Play a budgeted sweep of ``cases`` on the device ``profile`` describes, every call taking
    what :func:`predict_call_s` predicts: as :mod:`.sweep` does, group by group (a dtype, mode and
    length), it leaves out what the device cannot run (:func:`.device_profile.unsupported_reason`)
    or hold, plans what is left with ``planned_share`` of the time left, and measures this group's
    chosen cases. So a device that is not here (a Colab T4, from its published figures) can be
    checked against a budget on any machine."""
    from .device_profile import unsupported_reason  # (the module imports this one's names)

    dtypes = list(dict.fromkeys(case.dtype for case in cases))
    pairs = len({(case.implementation.name, case.mode) for case in cases})
    clock = description = describe_s(profile, dtypes, pairs, min_run_time)
    seen: dict[tuple, list] = {}
    run, not_run = [], {}
    start = 0
    while start < len(cases):
        end = start
        while end < len(cases) and cases[end].group == cases[start].group:
            end += 1
        candidates = []
        for i in range(start, len(cases)):
            if reason := unsupported_reason(cases[i], profile):
                not_run[i] = f"unsupported: {reason}"
            elif predict_peak_bytes(cases[i], seen) > profile.available_bytes:
                not_run[i] = "too big"
            else:
                not_run.pop(i, None)
                candidates.append(i)
        chosen = plan(
            [cases[i] for i in candidates],
            planned_share * (budget_s - clock),
            profile,
            seen,
            min_run_time=min_run_time,
            max_run_time=max_run_time,
        )
        measured = [i for j, i in enumerate(candidates) if j in chosen.run and i < end]
        if measured:
            clock += group_s(cases[start], profile, min_run_time)
        for i in measured:
            call_s = predict_call_s(cases[i], profile, seen)
            clock += measurement_s(call_s, chosen.run_time, profile)
            peak = predict_peak_bytes(cases[i], seen)
            seen.setdefault(cases[i].series, []).append((cases[i].length, call_s, peak))
            run.append(i)
        for i in range(start, end):
            if i not in run and i not in not_run:
                not_run[i] = "too slow"
        start = end
    return Rehearsal(tuple(run), not_run, clock, description)
