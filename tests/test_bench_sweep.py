"""The sweep on tiny sizes: it refuses to time wrong code, survives running out of memory, counts
FLOPs and memory correctly, skips what would not fit, and keeps to its time budget."""

import dataclasses
import math
import re
import time

import pytest
import torch

from mha_course import bench
from mha_course.bench import BACKWARD, FORWARD, Implementation
from mha_course.bench import sweep as sweep_module
from mha_course.variants import mha_einops, mha_sdpa

TINY = dict(
    batch=2,
    embed_dim=16,
    heads=2,
    min_run_time=0.001,
    max_run_time=0.02,
    check_queries=4,
    matmul_n=32,
    device="cpu",
    threads=1,  # two threads on two busy cores wait for each other at every op
    progress_bar=False,
)


def functional(run_with_params):
    """An Implementation's build from ``run_with_params(x, params) -> output``."""
    return lambda params: ((lambda x: run_with_params(x, params)), params.tensors())


def correct(x, params):
    return mha_einops(x, x, x, params)[0]


def no_scale(x, params):
    """The classic mistake: softmax(Q Kᵀ) V without dividing by √D."""
    return mha_einops(
        x, x, x, dataclasses.replace(params, W_Q=params.W_Q * math.sqrt(params.head_dim))
    )[0]


def wrong_gradient(x, params):
    """Right forward, wrong backward: adds 0 whose gradient is 1."""
    return correct(x, params) + (x - x.detach())


def runs_out_of_memory_from_16(x, params):
    if x.size(1) >= 16:
        raise torch.OutOfMemoryError("simulated: tried to allocate 1 TiB")
    return correct(x, params)


def crashes(x, params):
    raise ValueError("something unrelated broke")


CUSTOM = [
    Implementation("correct", functional(correct)),
    Implementation("no scale", functional(no_scale)),
    Implementation("wrong gradient", functional(wrong_gradient)),
    Implementation("oom from 16", functional(runs_out_of_memory_from_16)),
    Implementation("crashes", functional(crashes)),
    Implementation("after the failures", functional(correct)),
]


@pytest.fixture(scope="module")
def custom_sweep():
    return bench.run_sweep((8, 16, 32), implementations=CUSTOM, modes=(FORWARD, BACKWARD), **TINY)


def pick(results, name, length, mode=FORWARD):
    (r,) = [
        r for r in results if r.implementation == name and r.length == length and r.mode == mode
    ]
    return r


def test_every_implementation_length_and_mode_gets_a_result(custom_sweep):
    assert len(custom_sweep) == len(CUSTOM) * 3 * 2
    assert {r.dtype for r in custom_sweep} == {"float32"}


def test_correct_implementation_is_timed_with_memory_and_flops(custom_sweep):
    for mode in (FORWARD, BACKWARD):
        for L in (8, 16, 32):
            r = pick(custom_sweep, "correct", L, mode)
            assert r.status == "ok", r.message
            assert r.max_error < bench.TOLERANCE[torch.float32]
            assert r.median_s > 0 and r.iqr_s >= 0 and r.runs >= 1
            assert r.peak_bytes > 0
            assert r.score_bytes == 2 * 2 * L * L * 4
            assert r.flops == bench.mha_flops(2, L, 16, mode)
            assert r.flop_rate == pytest.approx(r.flops / r.median_s)
            assert r.matmul_fraction == pytest.approx(r.flop_rate / r.matmul_flop_rate)


def test_gate_catches_a_wrong_forward_and_does_not_time_it(custom_sweep):
    for mode in (FORWARD, BACKWARD):
        r = pick(custom_sweep, "no scale", 16, mode)
        assert r.status == "wrong"
        assert r.max_error > bench.TOLERANCE[torch.float32]
        assert r.median_s is None and r.peak_bytes is None and r.flop_rate is None
        assert "relative error" in r.message


def test_gate_checks_gradients_in_the_backward_mode(custom_sweep):
    assert pick(custom_sweep, "wrong gradient", 16, FORWARD).status == "ok"
    assert pick(custom_sweep, "wrong gradient", 16, BACKWARD).status == "wrong"


def test_out_of_memory_is_recorded_and_the_sweep_goes_on(custom_sweep):
    for mode in (FORWARD, BACKWARD):
        assert pick(custom_sweep, "oom from 16", 8, mode).status == "ok"
        at_16 = pick(custom_sweep, "oom from 16", 16, mode)
        assert (
            at_16.status == "oom" and "OutOfMemoryError" in at_16.message and at_16.median_s is None
        )
        at_32 = pick(custom_sweep, "oom from 16", 32, mode)
        assert at_32.status == "oom" and "skipped: out of memory at L=16" in at_32.message
        assert pick(custom_sweep, "after the failures", 32, mode).status == "ok"


def test_a_real_cpu_allocation_failure_counts_as_out_of_memory():
    def huge(x, params):
        return torch.empty(2**50, dtype=torch.float32)  # 4 PiB: the CPU allocator refuses

    sweep = bench.run_sweep(
        (8,), implementations=[Implementation("huge", functional(huge))], modes=(FORWARD,), **TINY
    )
    assert sweep[0].status == "oom" and "can't allocate memory" in sweep[0].message


def test_other_exceptions_are_recorded_as_errors(custom_sweep):
    r = pick(custom_sweep, "crashes", 8)
    assert r.status == "error" and "ValueError: something unrelated broke" in r.message


def test_threads_are_set_recorded_and_restored(custom_sweep):
    assert custom_sweep.environment.threads == 1
    before = torch.get_num_threads()
    sweep = bench.run_sweep((8,), implementations=CUSTOM[:1], modes=(FORWARD,), **TINY)
    assert sweep.environment.threads == 1 and torch.get_num_threads() == before


def test_standard_implementations_pass_the_gate_on_cpu():
    """Every real implementation, the package's MHA included, is correct in both modes; the
    SDPA kernels a CPU lacks are reported as unsupported, without being run."""
    sweep = bench.run_sweep((12,), modes=(FORWARD, BACKWARD), **TINY)
    status = {(r.implementation, r.mode): (r.status, r.message) for r in sweep}
    for (name, mode), (s, message) in status.items():
        if name in ("SDPA mem-efficient", "SDPA cuDNN"):
            assert (s, message) == ("unsupported", "this device has no such kernel"), name
        else:
            assert s == "ok", (name, mode, message)
    assert {
        "loop over heads",
        "einsum",
        "batched matmul (einops)",
        "SDPA math",
        "SDPA flash",
        "package MHA",
        "package MHA, need_weights",
        "torch MHA",
        "torch MHA, need_weights",
    } <= {n for n, _ in status}


def test_a_noisy_timing_is_flagged(monkeypatch):
    monkeypatch.setattr("mha_course.bench.case.time_call", lambda fn, **kw: (1.0, 0.5, 4))
    (r,) = bench.run_sweep(
        (8,), implementations=CUSTOM[:1], modes=(FORWARD,), **{**TINY, "matmul_n": 8}
    )
    assert r.status == "ok" and r.message == "noisy: IQR 50% of the median"
    assert "ok: noisy: IQR 50% of the median" in bench.to_table([r])


def test_bad_sweep_arguments(monkeypatch):
    with pytest.raises(ValueError, match="modes must be"):
        bench.run_sweep((8,), modes=("sideways",), **TINY)
    with pytest.raises(ValueError, match=r"embed_dim \(16\) must be divisible by heads \(3\)"):
        bench.run_sweep((8,), **{**TINY, "heads": 3})
    with pytest.raises(ValueError, match="budget_s must be a positive number of seconds"):
        bench.run_sweep((8,), budget_s=0, **TINY)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="sees no CUDA GPU"):
        bench.run_sweep((8,), **{**TINY, "device": "cuda"})


def test_default_dtypes_follow_the_device(monkeypatch):
    """float32 on a CPU; on a GPU float16, and bfloat16 only where it is native (not a T4's)."""
    assert bench.default_dtypes("cpu") == (torch.float32,)
    asked = []

    def t4(including_emulation=True):
        asked.append(including_emulation)
        return including_emulation  # a T4 can emulate bfloat16, slowly

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", t4)
    assert bench.default_dtypes("cuda") == (torch.float16,) and asked == [False]
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    assert bench.default_dtypes("cuda") == (torch.float16, torch.bfloat16)


def test_a_case_that_would_not_fit_in_memory_is_skipped_not_run(monkeypatch):
    """One (B, H, L, L) float32 score matrix at B = H = 2, L = 256 is 1 MiB: with 1 MiB free the
    versions that hold the scores are skipped at L = 256, the fused one still runs."""
    monkeypatch.setattr(sweep_module, "available_memory", lambda device: 2**20)
    ran = []

    def holds_scores(x, params):
        ran.append(x.size(1))
        return correct(x, params)

    impls = [
        Implementation("holds scores", functional(holds_scores)),
        Implementation("fused", functional(lambda x, p: mha_sdpa(x, x, x, p)[0]), None, False),
    ]
    sweep = bench.run_sweep((32, 256), implementations=impls, modes=(FORWARD,), **TINY)
    assert [r.status for r in sweep] == ["ok", "ok", "skipped", "ok"]
    message = sweep[2].message
    assert message.startswith("would not fit in memory (predicted peak") and "1 MiB free" in message
    assert set(ran) == {32}  # the skipped case never ran
    assert "would not fit in memory:" in bench.summary(sweep)


# --- the time budget ---------------------------------------------------------------------------------

BUDGETED = dict(
    batch=1,
    embed_dim=64,
    heads=4,
    modes=(FORWARD,),
    device="cpu",
    threads=1,
    check_queries=16,
    matmul_n=256,
    implementations=[
        impl
        for impl in bench.standard_implementations()
        if impl.name in ("loop over heads", "einsum", "SDPA", "torch MHA")
    ],
    progress_bar=False,
)
LENGTHS = (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


def timed_sweep(budget_s):
    start = time.perf_counter()
    sweep = bench.run_sweep(LENGTHS, budget_s=budget_s, **BUDGETED)
    return sweep, time.perf_counter() - start


@pytest.fixture(scope="module")
def budgeted_sweeps():
    return {budget: timed_sweep(budget) for budget in (1.5, 3.0)}


@pytest.mark.parametrize("budget", [1.5, 3.0])
def test_a_budgeted_sweep_ends_within_its_budget(budgeted_sweeps, budget):
    _, elapsed = budgeted_sweeps[budget]
    assert elapsed < 2 * budget, f"{elapsed:.1f} s for a budget of {budget} s"


def test_a_bigger_budget_measures_more(budgeted_sweeps):
    (small, _), (big, _) = budgeted_sweeps[1.5], budgeted_sweeps[3.0]
    assert sum(r.status == "ok" for r in big) > sum(r.status == "ok" for r in small)


def test_what_the_budget_cannot_afford_is_recorded_with_the_reason(budgeted_sweeps):
    sweep, _ = budgeted_sweeps[1.5]
    assert len(sweep) == len(LENGTHS) * 4  # every case has a result, in the cases' order
    names = [impl.name for impl in BUDGETED["implementations"]]
    assert [r.implementation for r in sweep] == names * len(LENGTHS)
    assert [r.length for r in sweep] == [L for L in LENGTHS for _ in names]
    ok = [r for r in sweep if r.status == "ok"]
    skipped = [r for r in sweep if r.status != "ok"]
    assert ok and skipped and min(r.length for r in ok) == 32
    assert {"torch MHA"} <= {r.implementation for r in ok if r.length == 32}
    assert all(r.status == "skipped" for r in skipped)
    assert all(r.message.startswith("too slow for the budget (") for r in skipped)
    assert all(r.median_s is None for r in skipped)
    for name in {r.implementation for r in ok}:  # an implementation stops at some length
        lengths = sorted(r.length for r in ok if r.implementation == name)
        assert lengths == list(LENGTHS[: len(lengths)]), name
    assert "too slow for the budget:" in bench.summary(sweep)


def test_both_modes_of_a_length_run_before_the_next_length():
    """Length by length, both modes each time: a budget that runs short (or a machine slower than
    planned) leaves the two modes measured to the same lengths, never one mode starved."""
    lengths = (32, 64, 128)
    sweep = bench.run_sweep(lengths, budget_s=3.0, **{**BUDGETED, "modes": (FORWARD, BACKWARD)})
    groups = list(dict.fromkeys((r.length, r.mode) for r in sweep))
    assert groups == [(L, mode) for L in lengths for mode in (FORWARD, BACKWARD)]
    for mode in (FORWARD, BACKWARD):
        baseline = [r for r in sweep if r.implementation == "torch MHA" and r.mode == mode]
        assert baseline[0].status == "ok", (mode, baseline[0].message)


def test_a_call_far_slower_than_predicted_is_caught_after_one_call():
    """Fast on the 8 tokens the sweep calibrates on, 0.6 s a call at L = 64: predicted cheap, found
    expensive by the correctness gate's call (and a second one), and not timed."""

    def slow_when_long(x, params):
        if x.size(1) >= 64:
            time.sleep(0.6)
        return correct(x, params)

    impls = [Implementation("slow when long", functional(slow_when_long))]
    start = time.perf_counter()
    sweep = bench.run_sweep(
        (16, 64), budget_s=2.0, **{**BUDGETED, "implementations": impls, "matmul_n": 64}
    )
    elapsed = time.perf_counter() - start
    assert sweep[0].status == "ok"
    assert sweep[1].status == "skipped" and sweep[1].max_error is not None, sweep[1].message
    measured = re.match(r"too slow for the budget \(measured (\d+) ms per call", sweep[1].message)
    assert measured and int(measured.group(1)) >= 600, sweep[1].message  # the sleep, at least
    assert elapsed < 2.0 + 2.0  # timing it (several 0.6 s calls) would take far longer


def test_a_slow_first_call_alone_does_not_make_a_case_too_slow():
    """Like torch.compile at a new shape: only the first call at each length is slow."""
    lengths_seen = set()

    def compiles_at_each_length(x, params):
        if x.size(1) not in lengths_seen:
            lengths_seen.add(x.size(1))
            time.sleep(0.6)
        return correct(x, params)

    impls = [Implementation("compiles", functional(compiles_at_each_length))]
    sweep = bench.run_sweep(
        (64,), budget_s=2.5, **{**BUDGETED, "implementations": impls, "matmul_n": 64}
    )
    assert sweep[0].status == "ok" and sweep[0].median_s < 0.1, sweep[0].message


def test_the_progress_bar_goes_to_stdout_and_nothing_to_stderr(capfd):
    bench.run_sweep(
        (8, 16), implementations=CUSTOM[:2], **{**TINY, "progress_bar": True, "modes": (FORWARD,)}
    )
    out, err = capfd.readouterr()
    assert "4/4" in out and "float32 forward L=16" in out
    assert err == ""
