"""Reading a sweep: the table, the summary with what was not measured and why, ratios and growth
exponents, and files that load back with their environment."""

import dataclasses

import pytest
import torch

from mha_course import bench
from mha_course.bench import FORWARD, Result

ENV = bench.environment(torch.device("cpu"), threads=1)


def synthetic(name, times, peaks, mode=FORWARD, dtype="float32"):
    return [
        Result(
            name,
            "cpu",
            dtype,
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


def not_run(name, L, status, message, mode=FORWARD):
    return Result(name, "cpu", "float32", mode, 1, L, 8, 2, status, message, score_bytes=8 * L * L)


@pytest.fixture
def mixed():
    """Every status a sweep records, with None and float fields, in a Sweep with its environment."""
    ok = synthetic("torch MHA", [1e-3, 2e-3, 4e-3], [10, 20, 40])
    ok[0] = dataclasses.replace(ok[0], iqr_s=1e-4, runs=7, max_error=1e-7, flops=1e6, flop_rate=1e9)
    rows = ok + [
        *synthetic("loop over heads", [1.0], [1]),
        *synthetic("einsum", [1.0], [1]),
        not_run("no scale", 64, "wrong", "relative error 0.5 > 0.001"),
        not_run(
            "loop over heads", 256, "skipped", "too slow for the budget (predicted 3 s per call)"
        ),
        not_run(
            "einsum", 256, "skipped", "would not fit in memory (predicted peak 9 GiB, 4 GiB free)"
        ),
        not_run("SDPA cuDNN", 64, "unsupported", "this device has no such kernel"),
        not_run("SDPA cuDNN", 128, "unsupported", "this device has no such kernel"),
        not_run("big", 128, "oom", "OutOfMemoryError: simulated"),
        not_run("big", 256, "oom", "skipped: out of memory at L=128"),
    ]
    return bench.Sweep(rows, ENV)


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_results_round_trip_through_files_with_the_environment(mixed, tmp_path, suffix):
    path = tmp_path / f"sweep{suffix}"
    (bench.to_csv if suffix == ".csv" else bench.to_json)(mixed, path)
    loaded = bench.load(path)
    assert list(loaded) == list(mixed)
    assert loaded.environment == mixed.environment
    env = loaded.environment
    assert env.torch_version == torch.__version__ and env.device == "cpu" and env.device_name
    assert env.threads == 1 and "profiler" in env.memory_method


def test_csv_is_tidy_with_environment_columns(mixed, tmp_path):
    path = tmp_path / "sweep.csv"
    bench.to_csv(mixed, path)
    header, *rows = path.read_text().splitlines()
    assert header.split(",") == [f.name for f in dataclasses.fields(Result)] + [
        f.name for f in dataclasses.fields(bench.Environment)
    ]
    assert len(rows) == len(mixed)


def test_files_need_an_environment(tmp_path):
    with pytest.raises(ValueError, match="no environment"):
        bench.to_json(synthetic("a", [1, 2, 3], [1, 2, 3]), tmp_path / "x.json")


def test_table_shows_every_result_and_the_ratio_to_torch(mixed):
    rows = list(mixed) + [
        dataclasses.replace(r, implementation="slow", median_s=2 * r.median_s) for r in mixed[:3]
    ]
    table = bench.to_table(rows, ENV)
    assert "forward, float32 on cpu, B=1 E=8 H=2" in table and "| 1 thread |" in table
    lines = table.splitlines()
    assert all(" 1.00 " in line for line in lines if line.startswith("torch MHA  "))
    assert all(" 2.00 " in line for line in lines if line.startswith("slow  "))
    assert "wrong: relative error 0.5 > 0.001" in table
    assert "skipped: too slow for the budget (predicted 3 s per call)" in table
    for name in ("no scale", "loop over heads", "einsum", "big"):
        assert any(line.startswith(f"{name}  ") for line in lines), name


def test_table_warns_when_the_matmul_rate_moved_during_a_block():
    steady = [
        dataclasses.replace(r, matmul_flop_rate=100e9) for r in synthetic("a", [1, 2, 3], [1, 2, 3])
    ]
    assert "matmul 100.0 GFLOP/s" in bench.to_table(steady)
    assert "WARNING" not in bench.to_table(steady)
    wobbly = steady[:2] + [dataclasses.replace(steady[2], matmul_flop_rate=80e9)]
    assert "matmul 80.0 to 100.0 GFLOP/s" in bench.to_table(wobbly)
    assert "WARNING" not in bench.to_table(wobbly)
    moved = steady[:2] + [dataclasses.replace(steady[2], matmul_flop_rate=50e9)]
    assert "matmul 50.0 to 100.0 GFLOP/s\nWARNING: the matmul rate moved" in bench.to_table(moved)


def test_a_noisy_result_shows_its_flag_in_the_table():
    (r,) = synthetic("a", [1.0], [1])
    r = dataclasses.replace(r, message="noisy: IQR 50% of the median")
    assert "ok: noisy: IQR 50% of the median" in bench.to_table([r])


def test_ratio_and_growth_exponent():
    results = synthetic("quadratic", [1.0, 4.0, 16.0], [100, 400, 1600]) + synthetic(
        "torch MHA", [0.5, 1.0, 2.0], [10, 20, 40]
    )
    assert bench.ratio(results, "quadratic") == {64: 2.0, 128: 4.0, 256: 8.0}
    assert bench.growth_exponent(results, "quadratic", "peak_bytes") == pytest.approx(2.0)
    assert bench.growth_exponent(results, "torch MHA", "median_s") == pytest.approx(1.0)
    assert bench.growth_exponent(results, "absent") is None
    assert bench.growth_exponent(results, "quadratic", min_length=256) is None  # one point


def test_memory_slope_is_a_least_squares_fit_over_the_long_end():
    # quadratic (1, 4, 16) with a spike at the middle length: a slope from the two longest lengths
    # is thrown off, the least-squares fit over three (equally spaced in log L) is not
    results = synthetic("spiky", [1.0, 8.0, 16.0], [100, 800, 1600])
    assert bench.growth_exponent(results, "spiky", "median_s", min_length=128) == pytest.approx(1.0)
    assert bench.growth_exponent(results, "spiky", "median_s") == pytest.approx(2.0)


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
    assert ["loop", "over", "heads", "p", "=", "2.00"] in rows
    assert ["SDPA", "p", "=", "1.00"] in rows
    assert len(rows) == 4  # one row per implementation, a table rather than one long line
    two = bench.summary(results, fit_lengths=2)
    assert "fitted over L = 128, 256:" in two and "loop over heads  p = 2.00" in two
    assert "not measured" not in text


def test_what_was_not_measured_is_grouped_by_reason(mixed):
    groups = bench.skipped(mixed)
    assert list(groups) == [
        "too slow for the budget",
        "would not fit in memory",
        "unsupported on this device",
        "out of memory",
    ]
    assert [r.implementation for r in groups["unsupported on this device"]] == ["SDPA cuDNN"] * 2
    assert all(r.status != "ok" for rows in groups.values() for r in rows)
    report = bench.skipped_report(mixed)
    assert report.splitlines() == [
        "not measured:",
        "  too slow for the budget:",
        "    loop over heads  float32 forward L = 256",
        "  would not fit in memory:",
        "    einsum  float32 forward L = 256",
        "  unsupported on this device:",
        "    SDPA cuDNN  every case (this device has no such kernel)",
        "  out of memory:",
        "    big  every case",
    ]
    assert report in bench.summary(mixed)
    assert bench.skipped_report(synthetic("a", [1, 2, 3], [1, 2, 3])) == ""


def test_lengths_not_measured_are_listed_forward_first_per_dtype():
    """A sweep runs length by length, both modes each time, so the rows of a series come
    interleaved; the report lists each dtype's forward lengths first all the same."""
    rows = [
        not_run("loop", L, "skipped", "too slow for the budget (predicted 1 s per call)", mode)
        for L in (256, 512)
        for mode in ("forward+backward", FORWARD)
    ]
    assert bench.skipped_report(rows).splitlines()[-1] == "    loop  every case"
    rows.append(not_run("loop", 128, "ok", "", FORWARD))  # measured once: lengths are listed
    assert bench.skipped_report(rows).splitlines()[-1] == (
        "    loop  float32 forward L = 256, 512; float32 forward+backward L = 256, 512"
    )
