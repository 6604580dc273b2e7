"""The planner's decisions, on made-up devices: what a GPU can run, what fits in its memory, and
which measurements fit in a time budget. Nothing here needs the device it describes."""

import math

import pytest
import torch

from mha_course import bench
from mha_course.bench.case import Case
from mha_course.bench.device_profile import DeviceProfile, unsupported_reason
from mha_course.bench.plan import group_s, measurement_s, plan, predict_call_s, predict_peak_bytes

IMPLS = {impl.name: impl for impl in bench.standard_implementations()}
GiB = 2**30
T4 = DeviceProfile(
    type="cuda", capability=(7, 5), native_bf16=False, available_bytes=0.9 * 14 * GiB
)
H100 = DeviceProfile(
    type="cuda", capability=(9, 0), native_bf16=True, available_bytes=0.9 * 78 * GiB
)
CPU = DeviceProfile(type="cpu")


def case(name, L=1024, dtype=torch.float16, mode=bench.FORWARD, B=4, E=512, H=8):
    return Case(IMPLS[name], dtype, mode, L, B, E, H)


@pytest.mark.parametrize(
    "profile, name, dtype, expected",
    [
        (
            T4,
            "SDPA flash",
            torch.float16,
            "needs compute capability 8.0 or newer; this GPU has 7.5",
        ),
        (
            T4,
            "SDPA cuDNN",
            torch.float16,
            "needs compute capability 8.0 or newer; this GPU has 7.5",
        ),
        (T4, "SDPA mem-efficient", torch.float16, None),
        (T4, "SDPA math", torch.float16, None),
        (T4, "einsum", torch.bfloat16, "bfloat16: this GPU (compute capability 7.5) has no native"),
        (T4, "SDPA mem-efficient", torch.bfloat16, "bfloat16: this GPU"),
        (H100, "SDPA flash", torch.bfloat16, None),
        (H100, "SDPA cuDNN", torch.float16, None),
        (H100, "SDPA flash", torch.float32, "runs float16 and bfloat16 only, not float32"),
        (H100, "SDPA mem-efficient", torch.float32, None),
        (CPU, "SDPA flash", torch.float32, None),
        (CPU, "SDPA mem-efficient", torch.float32, "this device has no such kernel"),
        (CPU, "SDPA cuDNN", torch.float32, "this device has no such kernel"),
        (CPU, "loop over heads", torch.bfloat16, None),
    ],
)
def test_kernels_and_dtypes_the_device_lacks_are_unsupported(profile, name, dtype, expected):
    reason = unsupported_reason(case(name, dtype=dtype), profile)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and expected in reason


def test_a_torch_built_without_flash_says_so():
    no_flash = DeviceProfile(type="cuda", capability=(9, 0), flash_built=False)
    assert "built without the flash" in unsupported_reason(case("SDPA flash"), no_flash)


def test_at_8192_a_t4_holds_the_fused_versions_but_not_the_unfused_ones():
    """B = 4, H = 8, L = 8192, float16: one score matrix is 4 GiB. Holding the scores needs 4 of
    them (forward) or 8 (with backward): not on a 16 GB T4, fine on an 80 GB H100."""
    assert case("einsum", L=8192).score_bytes == 4 * GiB
    for name in ("loop over heads", "einsum", "SDPA math", "torch MHA, need_weights"):
        forward = predict_peak_bytes(case(name, L=8192))
        backward = predict_peak_bytes(case(name, L=8192, mode=bench.BACKWARD))
        assert 16 * GiB <= forward < 17 * GiB and 32 * GiB <= backward < 34 * GiB
        assert forward > T4.available_bytes and backward < H100.available_bytes
        assert predict_peak_bytes(case(name, L=4096)) < T4.available_bytes  # 1 GiB each
    for name in ("SDPA", "SDPA flash", "package MHA"):
        assert predict_peak_bytes(case(name, L=8192, mode=bench.BACKWARD)) < 1 * GiB


def test_measured_peaks_replace_the_model_and_grow_as_measured():
    quadratic = case("einsum", L=4096)
    seen = {quadratic.series: [(1024, 0.1, 100 * 2**20), (2048, 0.3, 400 * 2**20)]}
    assert predict_peak_bytes(quadratic, seen) == pytest.approx(1600 * 2**20)
    linear = case("SDPA", L=4096)
    seen = {linear.series: [(1024, 0.1, 100), (2048, 0.2, 200)]}
    assert predict_peak_bytes(linear, seen) == pytest.approx(400)
    one_point = {linear.series: [(2048, 0.2, 200)]}  # then the kind of implementation decides
    assert predict_peak_bytes(linear, one_point) == pytest.approx(400)
    assert predict_peak_bytes(quadratic, {quadratic.series: [(2048, 0.2, 200)]}) == 800


def test_call_time_is_overhead_plus_flops_at_a_fraction_of_the_matmul_rate():
    profile = DeviceProfile(
        matmul_rate={"float16": 1e12}, call_overhead_s={("einsum", bench.FORWARD): 1e-3}
    )
    c = case("einsum", L=2048)
    flops = bench.mha_flops(4, 2048, 512)
    assert predict_call_s(c, profile) == pytest.approx(1e-3 + flops / (1e12 * 0.2))
    # an implementation whose overhead was not measured gets the largest one measured
    assert predict_call_s(case("SDPA", L=2048), profile) == pytest.approx(1e-3 + flops / 2e11)
    slower = DeviceProfile(**{**profile.__dict__, "slowdown": 3.0})
    assert predict_call_s(c, slower) == pytest.approx(3 * predict_call_s(c, profile))


def test_a_measured_series_is_extrapolated_from_its_own_times():
    c = case("einsum", L=4096)
    by_flops = c.flops() / c.flops(2048)
    assert predict_call_s(c, CPU, {c.series: [(2048, 0.5, None)]}) == pytest.approx(0.5 * by_flops)
    # it grew faster than its FLOPs between its last two lengths (memory-bound): that growth
    seen = {c.series: [(1024, 0.1, None), (2048, 0.8, None)]}  # 8x for 2x: slope 3, capped at 2.5
    assert predict_call_s(c, CPU, seen) == pytest.approx(0.8 * 2**2.5)


def fake_cases(lengths=(256, 512, 1024, 2048, 4096, 8192), names=("loop over heads", "SDPA")):
    return [case(name, L=L) for L in lengths for name in names]


GPU = DeviceProfile(
    type="cuda",
    capability=(9, 0),
    matmul_rate={"float16": 4e14, "float64": 5e13},
    matmul_n=4096,
    call_overhead_s={("loop over heads", bench.FORWARD): 5e-4, ("SDPA", bench.FORWARD): 1e-4},
    measurement_overhead_s=0.01,
)


def test_a_bigger_budget_buys_longer_lengths_and_more_repetitions():
    cases = fake_cases()
    small, big = (plan(cases, s, GPU, min_run_time=0.02, max_run_time=0.5) for s in (0.4, 30.0))
    assert small.run < big.run and len(big.run) == len(cases)
    assert 0.02 <= small.run_time < big.run_time == 0.5
    # within the small budget, the fast implementation gets lengths the slow one does not
    longest = {
        name: max(cases[i].length for i in small.run if cases[i].implementation.name == name)
        for name in ("loop over heads", "SDPA")
    }
    assert longest["SDPA"] > longest["loop over heads"]


@pytest.mark.parametrize("seconds", [0.5, 2.0, 5.0, 12.0])
def test_the_plan_fits_its_budget_and_spends_the_rest_on_repetitions(seconds):
    cases = fake_cases()
    p = plan(cases, seconds, GPU, min_run_time=0.02, max_run_time=0.5)
    assert p.predicted_s <= seconds * (1 + 1e-9)
    assert 0.02 <= p.run_time <= 0.5
    if p.run_time < 0.5:  # the repetitions used the whole budget
        assert p.predicted_s == pytest.approx(seconds, rel=1e-3)
    for i in p.run:  # a chosen case's shorter lengths are chosen too
        shorter = [j for j, c in enumerate(cases) if c.series == cases[i].series]
        assert all(j in p.run for j in shorter if cases[j].length < cases[i].length)


def test_the_baseline_comes_with_the_cheapest_case_of_its_length():
    """Every ratio divides by torch MHA: a budget for two measurements measures SDPA and torch MHA
    at the first length, not SDPA at two lengths."""
    profile = DeviceProfile(
        **{
            **GPU.__dict__,
            "call_overhead_s": {
                ("SDPA", bench.FORWARD): 1e-4,
                (bench.BASELINE, bench.FORWARD): 0.05,
            },
        }
    )
    cases = fake_cases(lengths=(256, 512), names=("SDPA", bench.BASELINE))
    two = plan(cases, 1e6, profile, min_run_time=0.02, max_run_time=0.02).predicted_s
    costs = [measurement_s(predict_call_s(c, profile), 0.02, profile) for c in cases]
    assert costs[2] < costs[1]  # SDPA at 512 costs less than torch MHA at 256
    budget = two - costs[2] - costs[3] - group_s(cases[2], profile, 0.02) + 1e-6
    chosen = plan(cases, budget, profile, min_run_time=0.02, max_run_time=0.02).run
    assert [(cases[i].implementation.name, cases[i].length) for i in sorted(chosen)] == [
        ("SDPA", 256),
        (bench.BASELINE, 256),
    ]


def test_a_short_length_of_one_mode_comes_before_a_long_length_of_another():
    """Part-way through the forward lengths, the backward ones still get their short lengths."""
    lengths = (128, 256, 512, 1024, 2048)
    forward = [case("SDPA", L=L) for L in lengths[3:]]
    backward = [case("SDPA", L=L, mode=bench.BACKWARD) for L in lengths]
    cases = forward + backward
    costs = [measurement_s(predict_call_s(c, GPU), 0.02, GPU) for c in cases]
    budget = sum(costs[2:4]) + sum(group_s(c, GPU, 0.02) for c in cases[2:4]) + 1e-9
    chosen = plan(cases, budget, GPU, min_run_time=0.02, max_run_time=0.02).run
    assert sorted((cases[i].mode, cases[i].length) for i in chosen) == [
        (bench.BACKWARD, 128),
        (bench.BACKWARD, 256),
    ]


def test_nothing_fits_in_no_time():
    assert not plan(fake_cases(), 0.0, GPU, min_run_time=0.02, max_run_time=0.5).run


def test_a_measurement_costs_two_untimed_calls_and_at_least_three_timed_ones():
    profile = DeviceProfile(measurement_overhead_s=0.01)
    assert measurement_s(1e-4, 0.1, profile) == pytest.approx(0.01 + 2e-4 + 0.1 + 1e-4)
    assert measurement_s(1.0, 0.1, profile) == pytest.approx(0.01 + 2.0 + 3.0)
    slow_machine = DeviceProfile(measurement_overhead_s=0.01, cost_factor=2.0)
    assert measurement_s(1.0, 0.1, slow_machine) == pytest.approx(2 * 5.01)


def test_the_real_device_profile_of_this_cpu():
    profile = bench.describe_device(
        torch.device("cpu"),
        implementations=[IMPLS["SDPA"]],
        dtypes=(torch.float32,),
        modes=(bench.FORWARD,),
        embed_dim=32,
        heads=2,
        matmul_n=128,
        run_time=0.005,
        threads=1,
    )
    assert profile.type == "cpu" and profile.capability is None and profile.native_bf16
    assert 0 < profile.available_bytes < math.inf
    assert profile.matmul_rate["float32"] > 1e8 and profile.matmul_rate["float64"] > 1e8
    assert 0 < profile.call_overhead_s["SDPA", bench.FORWARD] < 1.0
