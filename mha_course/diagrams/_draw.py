"""The diagrams' drawing kit: the palette, a box, an arrow, a canvas and a grid of cells."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

COLORS = {
    "input": "#e8eef7",
    "proj": "#fde9c9",
    "attn": "#d8ecd8",
    "norm": "#efe0f5",
    "ffn": "#fbd9d3",
    "add": "#ffffff",
    "out": "#e8eef7",
    "cache": "#f3f3f3",
}
HEAD_COLORS = [
    "#4c72b0",
    "#dd8452",
    "#55a868",
    "#c44e52",
    "#8172b3",
    "#937860",
    "#da8bc3",
    "#8c8c8c",
]
RESIDUAL = "#c44e52"
NEW = "#dd8452"  # what a step adds (a new token, the tile in fast memory)


def _box(ax, x, y, text, kind, w=1.8, h=0.55, fontsize=10):
    ax.add_patch(
        FancyBboxPatch(
            (x - w / 2, y - h / 2),
            w,
            h,
            boxstyle="round,pad=0.04,rounding_size=0.08",
            facecolor=COLORS[kind],
            edgecolor="0.3",
            linewidth=1.0,
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize)


def _panel(ax, x, y, w, h, face, edge="0.3", alpha=1.0):
    """A plain rounded rectangle, its lower-left corner at (x, y), for text placed by the caller."""
    ax.add_patch(
        FancyBboxPatch(
            (x, y),
            w,
            h,
            boxstyle="round,pad=0.02",
            facecolor=face,
            alpha=alpha,
            edgecolor=edge,
        )
    )


def _arrow(ax, start, end, style="-|>", color="0.25", connection="arc3", lw=1.2):
    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle=style,
            mutation_scale=12,
            color=color,
            connectionstyle=connection,
            linewidth=lw,
            shrinkA=0,
            shrinkB=0,
        )
    )


def _canvas(width, height, xlim, ylim):
    fig, ax = plt.subplots(figsize=(width, height))
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def _cells(ax, x, y, rows, cols, size, colors, alpha=0.55, edge="0.35"):
    """A grid of rows × cols square cells, its top-left corner at (x, y); ``colors(r, c)`` gives
    each cell's face colour (None: white)."""
    for r in range(rows):
        for c in range(cols):
            ax.add_patch(
                Rectangle(
                    (x + c * size, y - (r + 1) * size),
                    size,
                    size,
                    facecolor=colors(r, c) or "white",
                    alpha=alpha if colors(r, c) else 1.0,
                    edgecolor=edge,
                    linewidth=0.6,
                )
            )
