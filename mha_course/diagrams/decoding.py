"""Generating with attention: the decoder's KV cache (lesson 07) and RoPE's rotation (lesson 08)."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
from matplotlib.patches import Arc

from ._draw import COLORS, HEAD_COLORS, NEW, _arrow, _box, _canvas, _cells

CACHE_WEIGHTS = (0.10, 0.35, 0.05, 0.20, 0.30)  # the new query's weights in the KV-cache picture


def _cache(ax, x, top, rows, size, label, name):
    """A cache of ``rows`` cached rows and one new row (the last), labelled on the left."""
    _cells(ax, x, top, rows + 1, 3, size, lambda r, c: NEW if r == rows else COLORS["cache"], 1.0)
    for r in range(rows + 1):
        tag = f"{name}$_{{{r}}}$" if r < rows else f"{name}$_t$ new"
        ax.text(x + 3 * size + 0.08, top - (r + 0.5) * size, tag, va="center", fontsize=8)
    ax.text(x + 1.5 * size, top + 0.15, label, ha="center", va="bottom", fontsize=9)


def kv_cache_diagram(cached: int = 4):
    """One decoding step: the new token's query against the cached keys, the weights, the values;
    its own key and value appended. Below, the cache growing step by step."""
    fig, ax = _canvas(10.5, 6.0, (-0.4, 14.0), (-1.2, 6.4))
    size, top = 0.42, 4.6
    rows = [top - (r + 0.5) * size for r in range(cached + 1)]
    _box(ax, 1.3, 5.5, "new token x$_t$\n(B, 1, d_model)", "input", w=2.2, h=0.75, fontsize=9)
    _arrow(ax, (1.3, 5.1), (1.3, 4.5))
    _box(ax, 1.3, 4.1, "q$_t$, k$_t$, v$_t$\nits projections", "proj", w=2.2, h=0.75, fontsize=9)
    _cache(ax, 4.2, top, cached, size, "K cache (B, H, S, D)", "k")
    _cache(ax, 9.6, top, cached, size, "V cache", "v")
    _arrow(ax, (2.4, 3.9), (4.15, rows[-1]), color=NEW)
    _arrow(ax, (2.4, 3.9), (9.55, rows[-1]), color=NEW, connection="arc3,rad=0.25")
    ax.text(2.6, 3.0, "append\nk$_t$, v$_t$", fontsize=8, ha="center", va="center", color=NEW)
    _arrow(ax, (2.4, 4.3), (4.15, rows[0]))
    ax.text(3.1, 4.55, "q$_t$ · k$_j$\nfor every key", fontsize=8, ha="center", va="bottom")
    weights_x = 6.9
    for y, w in zip(rows, CACHE_WEIGHTS):
        _arrow(ax, (6.2, y), (weights_x - 0.05, y), color="0.55", lw=0.6)
        ax.add_patch(
            plt.Rectangle(
                (weights_x, y - size / 2),
                size,
                size,
                facecolor=COLORS["attn"],
                edgecolor="0.35",
                lw=0.6,
            )
        )
        ax.text(weights_x + size / 2, y, f"{w:.2f}", ha="center", va="center", fontsize=6.5)
        _arrow(ax, (weights_x + size + 0.05, y), (9.55, y), color="0.55", lw=0.5 + 4 * w)
    ax.text(
        weights_x + size / 2, top + 0.15, "weights\n(softmax)", ha="center", va="bottom", fontsize=9
    )
    _box(
        ax,
        12.9,
        3.55,
        "output$_t$ =\nweights · V\n(B, 1, d_model)",
        "out",
        w=2.0,
        h=1.0,
        fontsize=9,
    )
    _arrow(ax, (11.45, 3.55), (11.85, 3.55))
    ax.text(
        6.9,
        1.85,
        "in every layer and head: the new token is projected once; the S cached "
        "keys\nand values are read, never recomputed",
        ha="center",
        fontsize=8.5,
        color="0.3",
    )
    small = 0.24
    ax.text(6.9, 1.15, "the cache grows by one row per generated token", ha="center", fontsize=9)
    for step, height in enumerate(range(3, 7)):
        x = 1.0 + step * 3.4

        def color(r, c, height=height, step=step):
            return NEW if not step or r == height - 1 else COLORS["cache"]

        _cells(ax, x, 0.9, height, 3, small, color, 1.0)
        name = "prompt: T = 3 tokens" if not step else f"step {step}: S = {height - 1}, T = 1"
        ax.text(
            x + 1.5 * small, 0.9 - height * small - 0.12, name, ha="center", va="top", fontsize=8
        )
        if step:
            _arrow(ax, (x - 2.4, 0.5), (x - 0.25, 0.5))
    ax.set_title(
        "The decoder's KV cache: one new token attends over everything cached", fontsize=12
    )
    return fig


def _angle_arc(ax, start, end, radius, text, color):
    ax.add_patch(Arc((0, 0), 2 * radius, 2 * radius, theta1=start, theta2=end, color=color, lw=1.2))
    middle = math.radians((start + end) / 2)
    ax.text(
        (radius + 0.13) * math.cos(middle),
        (radius + 0.13) * math.sin(middle),
        text,
        ha="center",
        va="center",
        fontsize=9,
        color=color,
    )


def rope_diagram(q_angle=15.0, k_angle=60.0, theta=25.0, m=1, n=3, D=8):
    """RoPE: one pair of features turned by position × θ_i, shown for a query at m and a key at n,
    and the two ways features make pairs: neighbours (interleaved) or halves (rotate half)."""
    fig, (ax, side) = plt.subplots(
        1, 2, figsize=(11.0, 4.8), gridspec_kw={"width_ratios": [1, 1.1]}, layout="constrained"
    )
    ax.add_patch(plt.Circle((0, 0), 1.0, fill=False, color="0.8", ls=":"))
    q_color, k_color = HEAD_COLORS[0], HEAD_COLORS[1]
    for angle, color, name, turned in (
        (q_angle, q_color, "q", q_angle + m * theta),
        (k_angle, k_color, "k", k_angle + n * theta),
    ):
        for a, style, label in ((angle, "--", name), (turned, "-", f"{name} rotated")):
            x, y = math.cos(math.radians(a)), math.sin(math.radians(a))
            ax.annotate(
                "", (x, y), (0, 0), arrowprops=dict(arrowstyle="-|>", color=color, ls=style, lw=1.6)
            )
            ax.text(1.12 * x, 1.12 * y, label, color=color, ha="center", va="center", fontsize=9)
    _angle_arc(ax, q_angle, q_angle + m * theta, 0.45, "m·θ$_i$", q_color)
    _angle_arc(ax, k_angle, k_angle + n * theta, 0.7, "n·θ$_i$", k_color)
    ax.set_xlim(-1.35, 1.35)
    ax.set_ylim(-0.6, 1.35)
    ax.set_aspect("equal")
    ax.axhline(0, color="0.7", lw=0.8)
    ax.axvline(0, color="0.7", lw=0.8)
    ax.set_xlabel("first feature of pair i")
    ax.set_ylabel("second feature of pair i")
    ax.set_title(f"pair i of a query at position m = {m} and a key at n = {n}", fontsize=10)
    ax.text(
        0,
        -0.42,
        "the angle between the rotated q and k grows by (n − m)·θ$_i$:\n"
        "their dot product depends on the offset n − m only",
        ha="center",
        fontsize=8.5,
    )
    side.set_xlim(-0.4, D + 0.6)
    side.set_ylim(-4.6, 2.2)
    side.set_aspect("equal")
    side.axis("off")
    half = D // 2
    for top, name, pair_of in (
        (1.0, "interleaved (Meta's Llama, GPT-J): pair i = features 2i, 2i + 1", lambda c: c // 2),
        (
            -2.4,
            "rotate half (Hugging Face's Llama): pair i = features i, i + D/2",
            lambda c: c % half,
        ),
    ):
        _cells(side, 0.2, top, 1, D, 1.0, lambda r, c, pair_of=pair_of: HEAD_COLORS[pair_of(c)])
        for c in range(D):
            side.text(0.7 + c, top - 0.5, f"{c}", ha="center", va="center", fontsize=9)
        for i in range(half):
            first, second = [c for c in range(D) if pair_of(c) == i]
            width = second - first
            side.add_patch(
                Arc(
                    (0.7 + (first + second) / 2, top),
                    width,
                    0.5 + 0.25 * width,
                    theta1=0,
                    theta2=180,
                    color=HEAD_COLORS[i],
                    lw=1.3,
                )
            )
        side.text(0.2 + half, top + 1.0, name, ha="center", fontsize=9)
    thetas = ", ".join(f"{10000 ** (-2 * i / D):.3g}" for i in range(half))
    side.text(
        0.2 + half,
        -4.3,
        f"pair i turns by p·θ$_i$, θ$_i$ = 10000$^{{-2i/D}}$: {thetas} rad per position (D = {D});\n"
        "the same model either way, once W$^Q$ and W$^K$ follow the layout; values are not rotated",
        ha="center",
        fontsize=8.5,
    )
    side.set_title(f"which features pair up, D = {D}: two layouts", fontsize=10)
    fig.suptitle(
        "RoPE: each query and key turned by an angle that grows with its position", fontsize=12
    )
    return fig
