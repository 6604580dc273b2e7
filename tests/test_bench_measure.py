"""The one timer and the other measurements of the harness: what they measure, and that they
keep to their limits. No assertion on how fast anything is."""

import time

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from mha_course import bench
from mha_course.bench import BACKWARD, FORWARD
from mha_course.utils import machine
from mha_course.variants import MHAParams, mha_einops


def test_a_timing_is_a_median_an_iqr_and_a_number_of_blocks():
    median, iqr, runs = bench.time_call(lambda: time.sleep(0.002), min_run_time=0.02)
    assert 0.002 <= median < 0.05 and iqr >= 0 and runs >= 3


def test_a_call_slower_than_the_time_budget_still_gets_three_blocks():
    median, iqr, runs = bench.time_call(
        lambda: time.sleep(0.01), threads=1, min_run_time=0.001, max_run_time=0.001, warmup=0
    )
    assert runs == 3 and 0.009 < median < 0.1 and iqr >= 0


def test_no_block_starts_after_the_deadline():
    start = time.perf_counter()
    timing = bench.time_call(
        lambda: time.sleep(0.05), min_run_time=1.0, warmup=0, deadline=start + 0.01
    )
    assert timing.runs == 1 and time.perf_counter() - start < 0.5


def test_the_cpu_clock_does_not_count_sleeping():
    wall = bench.time_call(
        lambda: time.sleep(0.005), min_run_time=0.02, max_run_time=0.05, warmup=0
    )
    cpu = bench.time_call(
        lambda: time.sleep(0.005), min_run_time=0.02, max_run_time=0.05, warmup=0, clock="cpu"
    )
    assert wall.median > 0.004 and cpu.median < 0.002
    with pytest.raises(ValueError, match="clock must be one of"):
        bench.time_call(lambda: None, clock="gpu")


def test_alternating_rounds_interleave_the_calls():
    calls = []
    timings = bench.time_alternating(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
        rounds=3,
        min_run_time=0.001,
    )
    assert set(timings) == {"a", "b"} and all(t.runs == 3 for t in timings.values())
    switches = sum(x != y for x, y in zip(calls, calls[1:]))
    assert switches == 5  # a...a b...b a...a b...b a...a b...b
    assert calls.count("a") >= 3 * 2  # a warm-up call and a block of calls, per round


def test_flop_count_matches_torch_flop_counter():
    params = MHAParams.random(16, 4)
    for mode in (FORWARD, BACKWARD):
        x = torch.randn(3, 10, 16, requires_grad=mode == BACKWARD)
        params.requires_grad_(mode == BACKWARD)
        with FlopCounterMode(display=False) as counter:
            out = mha_einops(x, x, x, params)[0]
            if mode == BACKWARD:
                torch.autograd.grad(out, [x, *params.tensors()], torch.ones_like(out))
        assert counter.get_total_flops() == bench.mha_flops(3, 10, 16, mode)


def test_cpu_peak_memory_sees_a_known_allocation():
    n = 1_000_000
    peak = bench.peak_memory(lambda: torch.empty(n, dtype=torch.float32), torch.device("cpu"))
    assert 4 * n <= peak < 4 * n + 4096
    # a temporary that is freed before the end still counts at the peak
    peak = bench.peak_memory(lambda: (torch.ones(n) * 2).sum(), torch.device("cpu"))
    assert peak >= 8 * n


def test_matmul_rate_counts_two_flops_per_multiply_add(monkeypatch):
    monkeypatch.setattr(bench.measure, "time_call", lambda fn, **kw: bench.Timing(0.5, 0.0, 3))
    assert bench.matmul_rate(torch.device("cpu"), torch.float32, n=100) == 2 * 100**3 / 0.5


def test_the_environment_of_a_sweep_and_of_lesson_00_come_from_one_place():
    env = bench.environment(torch.device("cpu"), threads=3)
    m = machine("cpu")
    assert (env.device, env.device_name, env.torch_version) == (
        m.device,
        m.device_name,
        m.torch_version,
    )
    assert (env.python_version, env.platform, env.cuda_version) == (
        m.python_version,
        m.platform,
        m.cuda_version,
    )
    assert env.threads == 3 and "profiler" in env.memory_method


def test_a_refused_kernel_gives_torchs_reason_and_any_other_error_is_raised():
    from torch.nn.attention import SDPBackend

    q = torch.randn(1, 2, 16, 8)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    assert bench.refusal(SDPBackend.MATH, lambda: sdpa(q, q, q, dropout_p=0.1)) is None
    # on a CPU the flash kernel exists but takes no dropout: torch's own reason comes back
    reason = bench.refusal(SDPBackend.FLASH_ATTENTION, lambda: sdpa(q, q, q, dropout_p=0.1))
    assert reason and "dropout" in reason and "Triggered internally" not in reason
    with pytest.raises(RuntimeError, match="size"):  # a bug is not a missing kernel
        bench.refusal(SDPBackend.MATH, lambda: sdpa(q, q[..., :4], q))


def test_the_gate_alone_passes_the_honest_fails_a_bug_and_names_a_kernel_the_cpu_lacks():
    standard = {impl.name: impl for impl in bench.standard_implementations()}

    def twice(params):  # off by the size of the values: the gate must say "wrong"
        return (lambda x: 2 * mha_einops(x, x, x, params)[0]), params.tensors()

    line_up = [standard["loop over heads"], standard["SDPA mem-efficient"]]
    verdicts = bench.gate(
        [*line_up, bench.Implementation("twice", twice)], 24, embed_dim=32, heads=4
    )
    assert verdicts["loop over heads"].status == "ok" and verdicts["loop over heads"].error < 1e-5
    assert verdicts["SDPA mem-efficient"][:2] == ("unsupported", None)  # a CUDA kernel, on a CPU
    assert verdicts["SDPA mem-efficient"].message
    status, error, message = verdicts["twice"]
    assert status == "wrong" and error > 0.5 and message.startswith("relative error")
