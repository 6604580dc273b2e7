"""Devices as Colab gives them: the choice of device and dtypes follows what the device can do
(its compute capability), never its name; lesson 06's sweep planned for a Colab T4 from its
published figures fits its time budget and never asks for bfloat16. Nothing here needs a GPU."""

import pytest
import torch

from mha_course import bench, get_device
from mha_course.bench.case import Case
from mha_course.bench.device_profile import COLAB_T4, DeviceProfile, profile_dtypes
from mha_course.bench.plan import rehearse
from mha_course.bench.sweep import BUDGET_S, BUDGETED_RUN_TIME, PLANNED_SHARE
from mha_course.utils import cuda_runs_here

GiB = 2**30
COLAB_T4_SWEEP_LIMIT_S = 240.0  # the sweep's share of a lesson-06 run on a Colab T4: 4 minutes
LESSON_06_GPU_BUDGET_S = 45.0  # lesson 06's BUDGET_S on a GPU (its settings cell)
# lesson 06's sweep on a GPU: batch 4, d_model 512, 8 heads, these lengths, both modes
LENGTHS = (256, 512, 1024, 2048, 4096, 8192)


def lesson_06_cases(profile: DeviceProfile) -> list[Case]:
    """The cases in the order the sweep runs them (dtype, length, mode, implementation)."""
    return [
        Case(impl, dtype, mode, L, 4, 512, 8)
        for dtype in profile_dtypes(profile)
        for L in LENGTHS
        for mode in (bench.FORWARD, bench.BACKWARD)
        for impl in bench.standard_implementations()
    ]


def play(profile: DeviceProfile, budget_s: float):
    cases = lesson_06_cases(profile)
    low, high = BUDGETED_RUN_TIME
    rehearsal = rehearse(
        cases, budget_s, profile, min_run_time=low, max_run_time=high, planned_share=PLANNED_SHARE
    )
    return cases, rehearsal


def test_the_t4_stand_in_is_a_t4():
    assert COLAB_T4.type == "cuda" and COLAB_T4.capability == (7, 5)
    assert not COLAB_T4.native_bf16
    assert 13 * GiB < COLAB_T4.available_bytes <= 15 * GiB  # 90% of the 15 GiB free
    assert COLAB_T4.matmul_rate["float16"] == 65e12 and COLAB_T4.matmul_rate["float32"] == 8.1e12


def test_a_t4_is_given_float16_and_never_bfloat16():
    assert profile_dtypes(COLAB_T4) == (torch.float16,)
    ampere = DeviceProfile(type="cuda", capability=(8, 0), native_bf16=True)
    assert profile_dtypes(ampere) == (torch.float16, torch.bfloat16)
    assert profile_dtypes(DeviceProfile(type="cpu")) == (torch.float32,)


@pytest.mark.parametrize("budget_s", [LESSON_06_GPU_BUDGET_S, BUDGET_S["cuda"]])
@pytest.mark.parametrize("rates", [1.0, 0.25], ids=["published rates", "a quarter of them"])
def test_lesson_06_sweep_on_a_t4_fits_its_budget_in_float16_with_the_kernels_a_t4_has(
    budget_s, rates
):
    """Played from the T4's capability and rates: within the lesson's budget (and so within 4
    minutes), float16 only, no flash or cuDNN kernel, the memory-efficient one measured, and the
    versions that hold the (B, H, L, L) scores left out where 16 GB cannot hold them."""
    profile = DeviceProfile(
        **{
            **COLAB_T4.__dict__,
            "matmul_rate": {k: v * rates for k, v in COLAB_T4.matmul_rate.items()},
        }
    )
    cases, rehearsal = play(profile, budget_s)
    assert rehearsal.seconds <= budget_s <= COLAB_T4_SWEEP_LIMIT_S
    assert rehearsal.run, "the plan measures nothing"
    assert {cases[i].dtype for i in rehearsal.run} == {torch.float16}
    measured = {cases[i].implementation.name for i in rehearsal.run}
    assert {"SDPA mem-efficient", "SDPA math", "SDPA", bench.BASELINE} <= measured
    for i, reason in rehearsal.not_run.items():
        name = cases[i].implementation.name
        if name in ("SDPA flash", "SDPA cuDNN"):
            assert "needs compute capability 8.0" in reason
        else:
            assert not reason.startswith("unsupported"), (name, reason)
    too_big = {
        (cases[i].implementation.name, cases[i].length)
        for i, reason in rehearsal.not_run.items()
        if reason == "too big"
    }
    assert not any(name in ("SDPA", "SDPA mem-efficient") for name, _ in too_big)
    if rates == 1.0:  # (with slower rates the budget ends the unfused series first)
        assert ("einsum", 8192) in too_big and ("loop over heads", 8192) in too_big


def test_the_rehearsal_counts_the_device_description_and_every_measurement():
    cases, rehearsal = play(COLAB_T4, LESSON_06_GPU_BUDGET_S)
    assert 0 < rehearsal.describe_s < rehearsal.seconds
    assert set(rehearsal.run).isdisjoint(rehearsal.not_run)
    assert set(rehearsal.run) | set(rehearsal.not_run) == set(range(len(cases)))
    # a tighter budget measures less, and still fits
    _, tight = play(COLAB_T4, 10.0)
    assert len(tight.run) < len(rehearsal.run) and tight.seconds <= 10.0


@pytest.mark.parametrize(
    "capability, built, runs",
    [
        ((7, 5), ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"], True),  # a T4
        ((8, 6), ["sm_80", "sm_90"], True),  # sm_80 code runs on 8.6
        ((6, 0), ["sm_75", "sm_80", "sm_90"], False),  # a P100 on a torch built from Turing on
        ((12, 1), ["sm_90", "compute_90"], True),  # PTX is compiled for a newer GPU
        ((10, 0), ["sm_80", "sm_90"], False),
        ((9, 0), [], True),  # a torch that does not say (ROCm)
    ],
)
def test_cuda_is_used_where_this_torch_has_kernels_for_the_gpu(
    monkeypatch, capability, built, runs
):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: built)
    assert cuda_runs_here() is runs
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("MHA_COURSE_DEVICE", raising=False)
    assert get_device().type == ("cuda" if runs else "cpu")
