"""Plots of a sweep: time and peak memory against sequence length, log-log, with an L² guide."""

from __future__ import annotations

from collections.abc import Sequence

from .records import FORWARD, Result

__all__ = ["line_styles", "plot_sweep"]


_MARKERS = "osD^vP*Xh<>p"
_COLORS = [
    "tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
    "tab:pink", "tab:gray", "tab:olive", "tab:cyan", "black", "gold",
]  # fmt: skip


def line_styles(names: Sequence[str]) -> dict[str, dict]:
    """One distinct matplotlib style (color, marker, line style) per implementation name, in
    order, so that lines lying on top of each other stay distinguishable: markers are hollow and
    of different shapes. Pass ``**line_styles(names)[name]`` to ``ax.plot``."""
    return {
        name: dict(
            color=_COLORS[i % len(_COLORS)],
            marker=_MARKERS[i % len(_MARKERS)],
            linestyle=("-", "--", "-.")[(i // len(_COLORS)) % 3],
            markerfacecolor="none",
            markersize=7 if i % 2 else 5,
        )
        for i, name in enumerate(names)
    }


def plot_sweep(
    results: Sequence[Result],
    *,
    mode: str = FORWARD,
    dtype: str | None = None,
    implementations: Sequence[str] | None = None,
    axes=None,
):
    """Log-log plots of median time and peak memory against sequence length L, one line per
    implementation (styles from :func:`line_styles` of ``implementations`` when given, so that a
    name keeps its style across plots), vertical bars one IQR long centred on each
    median time, a dashed L² guide line through the largest value at the longest L, and (memory
    panel) the analytic size of one score matrix. The legend is outside, right of the memory
    panel. Returns the figure."""
    import matplotlib.pyplot as plt

    rows = [
        r
        for r in results
        if r.mode == mode and r.status == "ok" and (dtype is None or r.dtype == dtype)
    ]
    if not rows:
        raise ValueError(f"no successful results with mode={mode!r} and dtype={dtype!r} to plot")
    names = list(dict.fromkeys(r.implementation for r in rows))
    names = [n for n in names if implementations is None or n in implementations]
    styles = line_styles(
        names if implementations is None else implementations
    )  # same in every plot
    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    fig = axes[0].figure
    lengths = sorted({r.length for r in rows})
    panels = (
        (axes[0], "median_s", 1.0, "median time per call (s); bars: IQR"),
        (axes[1], "peak_bytes", 2.0**20, "peak memory of one call (MiB)"),
    )
    for ax, quantity, unit, label in panels:
        for name in names:
            mine = sorted(
                (r for r in rows if r.implementation == name and getattr(r, quantity)),
                key=lambda r: r.length,
            )
            if not mine:
                continue
            values = [getattr(r, quantity) / unit for r in mine]
            ax.plot([r.length for r in mine], values, label=name, **styles[name])
            spread = [(r.length, v, r.iqr_s / unit) for r, v in zip(mine, values) if r.iqr_s]
            if quantity == "median_s" and spread:
                L, v, iqr = zip(*spread)
                low = [max(m - q / 2, m / 10) for m, q in zip(v, iqr)]  # a log axis stays > 0
                ax.vlines(L, low, [m + q / 2 for m, q in zip(v, iqr)], color=styles[name]["color"])
        ends = [
            (r.length, getattr(r, quantity) / unit)
            for r in rows
            if r.implementation in names and getattr(r, quantity)
        ]
        if ends:
            L_max = max(L for L, _ in ends)
            top = max(v for L, v in ends if L == L_max)
            ax.plot(
                lengths,
                [top * (L / L_max) ** 2 for L in lengths],
                "k--",
                linewidth=1,
                label="∝ L² (guide)",
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length L")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    scores = sorted({(r.length, r.score_bytes / 2.0**20) for r in rows})
    axes[1].plot(*zip(*scores), ":", color="grey", label="one (B, H, L, L) score matrix")
    first = rows[0]
    fig.suptitle(
        f"{mode}, {first.dtype if dtype is None else dtype} on {first.device}, "
        f"B={first.batch}, d_model={first.embed_dim}, h={first.heads}"
    )
    axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.tight_layout()
    return fig
