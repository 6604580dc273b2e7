"""The benchmark harness on tiny sizes: it refuses to time wrong code, survives running out of
memory, counts FLOPs and memory correctly, and its files and command line work. No timing asserts."""

import dataclasses
import json
import math
import subprocess
import sys

import matplotlib
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from mha_course import bench
from mha_course.bench import BACKWARD, FORWARD, Implementation, Result
from mha_course.variants import MHAParams, mha_einops

matplotlib.use("Agg")

TINY = dict(
    batch=2,
    embed_dim=16,
    heads=2,
    min_run_time=0.001,
    max_run_time=0.02,
    check_queries=4,
    matmul_n=32,
    device="cpu",
)


def functional(run_with_params):
    """An Implementation from ``run_with_params(x, params) -> output``."""
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
    return bench.run_sweep(
        (8, 16, 32), implementations=CUSTOM, modes=(FORWARD, BACKWARD), threads=1, **TINY
    )


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
    sweep = bench.run_sweep((8,), implementations=CUSTOM[:1], modes=(FORWARD,), threads=1, **TINY)
    assert sweep.environment.threads == 1 and torch.get_num_threads() == before


def test_standard_implementations_pass_the_gate_on_cpu():
    """Every real implementation, the package's MHA included, is correct in both modes; the
    SDPA kernels a CPU lacks are reported as unsupported, not as wrong."""
    sweep = bench.run_sweep((12,), modes=(FORWARD, BACKWARD), threads=1, **TINY)
    status = {(r.implementation, r.mode): r.status for r in sweep}
    for (name, mode), s in status.items():
        if name in ("SDPA mem-efficient", "SDPA cuDNN"):
            assert s == "unsupported", (name, mode, s)
        else:
            assert s == "ok", (name, mode, [r.message for r in sweep if r.implementation == name])
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


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_results_round_trip_through_files_with_the_environment(custom_sweep, tmp_path, suffix):
    path = tmp_path / f"sweep{suffix}"
    (bench.to_csv if suffix == ".csv" else bench.to_json)(custom_sweep, path)
    loaded = bench.load(path)
    assert list(loaded) == list(custom_sweep)
    assert loaded.environment == custom_sweep.environment
    env = loaded.environment
    assert env.torch_version == torch.__version__ and env.device == "cpu" and env.device_name
    assert env.threads == 1 and "profiler" in env.memory_method


def test_csv_is_tidy_with_environment_columns(custom_sweep, tmp_path):
    path = tmp_path / "sweep.csv"
    bench.to_csv(custom_sweep, path)
    header, *rows = path.read_text().splitlines()
    columns = header.split(",")
    assert {
        "implementation",
        "dtype",
        "mode",
        "length",
        "median_s",
        "peak_bytes",
        "torch_version",
        "device_name",
        "threads",
    } <= set(columns)
    assert len(rows) == len(custom_sweep)


def test_table_shows_every_result_and_the_ratio_to_torch():
    sweep = bench.run_sweep(
        (8,),
        implementations=CUSTOM[:2] + bench.standard_implementations()[-2:],
        modes=(FORWARD,),
        threads=1,
        **TINY,
    )
    table = bench.to_table(sweep)
    assert "forward, float32 on cpu, B=2 E=16 H=2" in table and "| 1 thread |" in table
    torch_row = next(line for line in table.splitlines() if line.startswith("torch MHA  "))
    assert " 1.00 " in torch_row
    assert "wrong: relative error" in table
    for name in ("correct", "no scale", "torch MHA", "torch MHA, need_weights"):
        assert len([line for line in table.splitlines() if line.startswith(f"{name}  ")]) == 1, name


def synthetic(name, times, peaks, mode=FORWARD):
    return [
        Result(
            name,
            "cpu",
            "float32",
            mode,
            1,
            L,
            8,
            2,
            "ok",
            median_s=t,
            peak_bytes=p,
            score_bytes=8 * L * L,
        )
        for L, t, p in zip((64, 128, 256), times, peaks)
    ]


def test_ratio_and_growth_exponent():
    results = synthetic("quadratic", [1.0, 4.0, 16.0], [100, 400, 1600]) + synthetic(
        "torch MHA", [0.5, 1.0, 2.0], [10, 20, 40]
    )
    assert bench.ratio(results, "quadratic") == {64: 2.0, 128: 4.0, 256: 8.0}
    assert bench.growth_exponent(results, "quadratic", "peak_bytes") == pytest.approx(2.0)
    assert bench.growth_exponent(results, "torch MHA", "median_s") == pytest.approx(1.0)
    assert bench.growth_exponent(results, "absent") is None
    assert (
        bench.growth_exponent(results, "quadratic", min_length=256) is None
    )  # one point is no slope


def test_summary_quotes_the_lesson_ratios_and_memory_growth():
    results = (
        synthetic("package MHA", [1.0, 2.0, 4.0], [10, 20, 40])
        + synthetic("torch MHA", [1.0, 1.0, 2.0], [10, 20, 40])
        + synthetic("SDPA", [1.0, 2.0, 4.0], [1, 2, 4])
        + synthetic("loop over heads", [4.0, 16.0, 64.0], [1, 4, 16])
    )
    text = bench.summary(results)
    assert "time package MHA / torch MHA: 1.00 (L=64), 2.00 (L=128), 2.00 (L=256)" in text
    assert "time SDPA / loop over heads: 0.25 (L=64), 0.12 (L=128), 0.06 (L=256)" in text
    assert "peak memory ∝ L^p, p fitted over L = 64, 128, 256:" in text
    rows = [line.split() for line in text.splitlines() if "  p = " in line]
    assert ["loop", "over", "heads", "p", "=", "2.00"] in rows and [
        "SDPA",
        "p",
        "=",
        "1.00",
    ] in rows
    assert len(rows) == 4  # one row per implementation, a table rather than one long line
    two = bench.summary(results, fit_lengths=2)
    assert "fitted over L = 128, 256:" in two and "loop over heads  p = 2.00" in two


def test_memory_slope_is_a_least_squares_fit_over_the_long_end():
    # quadratic (1, 4, 16) with a spike at the middle length: a slope from the two longest lengths
    # is thrown off, the least-squares fit over three (equally spaced in log L) is not
    results = synthetic("spiky", [1.0, 8.0, 16.0], [100, 800, 1600])
    assert bench.growth_exponent(results, "spiky", "median_s", min_length=128) == pytest.approx(1.0)
    assert bench.growth_exponent(results, "spiky", "median_s") == pytest.approx(2.0)


def test_plot_sweep_draws_time_and_memory_log_log_with_an_L2_guide():
    results = synthetic("a", [1.0, 4.0, 16.0], [100, 400, 1600]) + synthetic(
        "b", [1, 2, 3], [5, 6, 7]
    )
    fig = bench.plot_sweep(results)
    time_ax, memory_ax = fig.axes[:2]
    for ax in (time_ax, memory_ax):
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
        assert ax.get_xlabel() == "sequence length L"
        labels = [line.get_label() for line in ax.get_lines()]
        assert labels[:3] == ["a", "b", "∝ L² (guide)"]
    assert list(time_ax.get_lines()[2].get_ydata()) == pytest.approx(
        [1.0, 4.0, 16.0]
    )  # slope 2 through the top
    scores = memory_ax.get_lines()[3]
    assert scores.get_label() == "one (B, H, L, L) score matrix"
    assert list(scores.get_ydata()) == pytest.approx([8 * L * L / 2**20 for L in (64, 128, 256)])
    assert "time" in time_ax.get_ylabel() and "memory" in memory_ax.get_ylabel()
    assert "d_model=8, h=2" in fig._suptitle.get_text()
    with pytest.raises(ValueError, match="no successful results"):
        bench.plot_sweep(results, mode=BACKWARD)


def test_plot_sweep_draws_iqr_bars_distinct_styles_and_an_outside_legend():
    results = [
        dataclasses.replace(r, iqr_s=0.2 * r.median_s)
        for r in synthetic("a", [1.0, 4.0, 16.0], [100, 400, 1600])
    ] + synthetic("b", [1.0, 4.0, 16.0], [100, 400, 1600])  # b lies on a, and has no IQR
    fig = bench.plot_sweep(results)
    time_ax, memory_ax = fig.axes[:2]
    (bars,) = time_ax.collections  # one set of bars: only "a" has an IQR
    segments = bars.get_segments()
    assert [tuple(seg[:, 0]) for seg in segments] == [(64, 64), (128, 128), (256, 256)]
    assert [seg[1, 1] - seg[0, 1] for seg in segments] == pytest.approx([0.2, 0.8, 3.2])
    assert not memory_ax.collections
    a, b = time_ax.get_lines()[:2]
    assert a.get_marker() != b.get_marker() and a.get_color() != b.get_color()
    assert a.get_markerfacecolor() == "none"  # hollow: a line underneath stays visible
    legend = memory_ax.get_legend()
    assert legend is not None and legend.get_bbox_to_anchor().x0 > memory_ax.bbox.x1
    styles = bench.line_styles([f"impl {i}" for i in range(14)])
    assert len({(s["color"], s["marker"], s["linestyle"]) for s in styles.values()}) == 14


def test_table_warns_when_the_matmul_rate_moved_during_a_block():
    steady = [
        dataclasses.replace(r, matmul_flop_rate=100e9) for r in synthetic("a", [1, 2, 3], [1, 2, 3])
    ]
    assert "matmul 100.0 GFLOP/s" in bench.to_table(steady) and "WARNING" not in bench.to_table(
        steady
    )
    wobbly = steady[:2] + [dataclasses.replace(steady[2], matmul_flop_rate=80e9)]
    assert "matmul 80.0 to 100.0 GFLOP/s" in bench.to_table(
        wobbly
    ) and "WARNING" not in bench.to_table(wobbly)
    moved = steady[:2] + [dataclasses.replace(steady[2], matmul_flop_rate=50e9)]
    assert "matmul 50.0 to 100.0 GFLOP/s\nWARNING: the matmul rate moved" in bench.to_table(moved)


def test_a_noisy_timing_is_flagged(monkeypatch):
    monkeypatch.setattr(bench, "time_call", lambda fn, **kw: (1.0, 0.5, 4))
    (r,) = bench.run_sweep(
        (8,), implementations=CUSTOM[:1], modes=(FORWARD,), **{**TINY, "matmul_n": 8}
    )
    assert r.status == "ok" and r.message == "noisy: IQR 50% of the median"
    assert "ok: noisy: IQR 50% of the median" in bench.to_table([r])


def test_bad_sweep_arguments(monkeypatch):
    with pytest.raises(ValueError, match="modes must be"):
        bench.run_sweep((8,), modes=("sideways",), **TINY)
    with pytest.raises(ValueError, match="embed_dim 16 is not divisible by heads 3"):
        bench.run_sweep((8,), **{**TINY, "heads": 3})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="sees no CUDA GPU"):
        bench.run_sweep((8,), **{**TINY, "device": "cuda"})


@pytest.mark.parametrize(
    "argv, complaint",
    [
        (["--lengths", "0,64"], "--lengths: expected positive integers"),
        (["--modes", "sideways"], "--modes: modes are 'forward' and 'forward+backward'"),
        (["--dtypes", "float17"], "--dtypes: expected floating dtypes"),
    ],
)
def test_cli_rejects_bad_options_with_a_message(argv, complaint, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main(argv)
    assert exit_.value.code == 2 and complaint in capsys.readouterr().err


def test_cli_quick_prints_a_table_and_writes_json(tmp_path):
    out = tmp_path / "quick.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mha_course.bench",
            "--quick",
            "--lengths",
            "16",
            "--threads",
            "1",
            "--min-run-time",
            "0.002",
            "--max-run-time",
            "0.02",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "implementation" in done.stdout and "× torch" in done.stdout
    rows = [
        line
        for line in done.stdout.splitlines()
        if line.startswith(("torch MHA", "package MHA", "SDPA"))
    ]
    assert len(rows) >= 6
    data = json.loads(out.read_text())
    assert data["environment"]["threads"] == 1
    assert {r["length"] for r in data["results"]} == {16}


def test_kernel_refusal_reasons_do_not_carry_torch_source_paths():
    warning = (
        "Both fused kernels do not support non-zero dropout. (Triggered internally at "
        "/build/aten/src/ATen/native/transformers/sdp_utils_cpp.h:241.)"
    )
    assert bench._first_sentence(warning) == "Both fused kernels do not support non-zero dropout."


def test_a_call_slower_than_the_time_budget_still_gets_three_blocks():
    import time

    median, iqr, runs = bench.time_call(
        lambda: time.sleep(0.01), threads=1, min_run_time=0.001, max_run_time=0.001, warmup=0
    )
    assert runs == 3 and 0.009 < median < 0.1 and iqr >= 0
