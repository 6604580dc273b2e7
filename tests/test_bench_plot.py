"""Plots of a sweep: log-log time and memory against L, an L² guide, IQR bars, distinct styles."""

import dataclasses

import matplotlib
import pytest

from mha_course import bench
from mha_course.bench import BACKWARD, Result

matplotlib.use("Agg")


def synthetic(name, times, peaks):
    return [
        Result(
            name,
            "cpu",
            "float32",
            bench.FORWARD,
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


def test_skipped_results_are_not_plotted():
    results = synthetic("a", [1.0, 4.0, 16.0], [100, 400, 1600])
    results[2] = dataclasses.replace(
        results[2], status="skipped", message="too slow for the budget"
    )
    fig = bench.plot_sweep(results)
    assert list(fig.axes[0].get_lines()[0].get_xdata()) == [64, 128]
