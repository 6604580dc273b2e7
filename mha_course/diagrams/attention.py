"""Attention itself: the soft lookup (lesson 00), scaled dot-product attention (01), and the heads
split and merged (02)."""

from __future__ import annotations

import math

from matplotlib.patches import Rectangle

from ._draw import COLORS, HEAD_COLORS, NEW, _arrow, _box, _canvas, _cells, _panel

LOOKUP_MATCHES = (2.0, 0.4, -0.5)  # q · k_j of the soft-lookup picture's three keys


def soft_lookup_diagram():
    """A query matched against every key, the matches turned into weights, the values blended."""
    fig, ax = _canvas(10.5, 4.6, (-0.4, 14.6), (-0.9, 5.6))
    weights = [math.exp(s) for s in LOOKUP_MATCHES]
    weights = [w / sum(weights) for w in weights]
    rows = (3.9, 2.4, 0.9)
    for x, header in (
        (3.2, "keys"),
        (5.6, "matches\nq · k$_j$"),
        (8.1, "weights: softmax of\nmatches / T (T = 1)"),
        (11.4, "values"),
    ):
        ax.text(x, 4.95, header, ha="center", va="center", fontsize=9, color="0.3")
    _box(ax, 0.7, 2.4, "query q", "proj", w=1.5, h=0.7)
    for j, (y, match, weight) in enumerate(zip(rows, LOOKUP_MATCHES, weights), start=1):
        _arrow(ax, (1.45, 2.4), (2.4, y))
        _box(ax, 3.2, y, f"key k$_{j}$", "input", w=1.5)
        _arrow(ax, (3.95, y), (4.85, y))
        _box(ax, 5.6, y, f"{match:+.1f}", "attn", w=1.3)
        _arrow(ax, (6.25, y), (6.95, y))
        ax.add_patch(
            Rectangle((7.0, y - 0.22), 1.5 * weight, 0.44, facecolor=NEW, edgecolor="0.3", lw=0.8)
        )
        ax.text(7.05 + 1.5 * weight, y, f" w$_{j}$ = {weight:.2f}", va="center", fontsize=9)
        _arrow(ax, (9.75, y), (10.4, y))
        _box(ax, 11.4, y, f"w$_{j}$ × value v$_{j}$", "input", w=1.9)
        _arrow(ax, (12.35, y), (13.15, 2.4), color=NEW, lw=0.6 + 3 * weight)
    _box(ax, 13.8, 2.4, "result\nΣ$_j$ w$_j$ v$_j$", "out", w=1.3, h=0.9)
    ax.text(
        6.9,
        -0.45,
        "A dictionary returns the value of the one key equal to the query; attention returns\n"
        "a blend of all the values, weighted by how well each key matches (weights sum to 1).",
        ha="center",
        va="center",
        fontsize=9,
        color="0.3",
    )
    ax.set_title("Attention as a soft dictionary lookup", fontsize=12)
    return fig


def attention_diagram():
    """Scaled dot-product attention: from X to softmax(Q Kᵀ / √d_k) V, with the shapes."""
    fig, ax = _canvas(7.5, 6.2, (-0.5, 8.5), (-0.6, 7.0))
    _box(ax, 4, 6.4, "X  (L × d_model)", "input", w=2.6)
    for x, name in (
        (1.3, "Q = X W$^Q$\n(L × d_k)"),
        (4, "K = X W$^K$\n(L × d_k)"),
        (6.7, "V = X W$^V$\n(L × d_v)"),
    ):
        _box(ax, x, 5.0, name, "proj", w=2.2, h=0.8)
        _arrow(ax, (4, 6.1), (x, 5.42))
    steps = [
        (3.8, "scores = Q Kᵀ / √d_k   (L × L)"),
        (2.7, "mask: forbidden pairs → −∞"),
        (1.6, "weights = softmax over the keys"),
        (0.1, "output = weights · V   (L × d_v)"),
    ]
    _box(ax, 2.6, steps[0][0], steps[0][1], "attn", w=4.2)
    _arrow(ax, (1.3, 4.6), (1.6, 4.1))
    _arrow(ax, (4, 4.6), (3.6, 4.1))
    _box(ax, 2.6, steps[1][0], steps[1][1], "attn", w=4.2)
    _box(ax, 2.6, steps[2][0], steps[2][1], "attn", w=4.2)
    _arrow(ax, (2.6, 3.52), (2.6, 2.98))
    _arrow(ax, (2.6, 2.42), (2.6, 1.88))
    _box(ax, 4.6, steps[3][0], steps[3][1], "out", w=4.2)
    _arrow(ax, (2.6, 1.32), (3.8, 0.38))
    _arrow(ax, (6.7, 4.6), (5.6, 0.38))
    ax.set_title("Scaled dot-product attention", fontsize=12)
    return fig


def heads_diagram(h: int = 4):
    """Multi-head attention: one big projection cut into h heads, attended separately, concatenated, W^O."""
    fig, ax = _canvas(8.5, 5.2, (-0.5, 10.5), (-0.3, 6.0))
    _box(ax, 5, 5.4, "X  (B, L, d_model)", "input", w=3.0)
    _box(ax, 5, 4.3, "Q, K, V = X W$^Q$, X W$^K$, X W$^V$    (B, L, d_model) each", "proj", w=7.4)
    _arrow(ax, (5, 5.12), (5, 4.58))
    width = 8.0 / h
    for i in range(h):
        x = 1 + width / 2 + i * width
        _panel(
            ax, x - width / 2 + 0.08, 2.85, width - 0.16, 0.6, HEAD_COLORS[i], HEAD_COLORS[i], 0.35
        )
        label = f"head {i + 1}\nd_k = d_model/h" if h <= 4 else f"head\n{i + 1}"
        ax.text(x, 3.15, label, ha="center", va="center", fontsize=8)
        _arrow(ax, (x, 4.02), (x, 3.47))
        _panel(ax, x - width / 2 + 0.08, 1.75, width - 0.16, 0.6, COLORS["attn"])
        ax.text(x, 2.05, "Attention", ha="center", va="center", fontsize=8)
        _arrow(ax, (x, 2.83), (x, 2.37))
        _arrow(ax, (x, 1.73), (5, 1.02), color=HEAD_COLORS[i])
    ax.text(
        9.4, 3.15, "split:\n'b l (h d)\n -> b h l d'", fontsize=8, va="center", family="monospace"
    )
    ax.text(
        9.4, 1.3, "concat:\n'b h l d\n -> b l (h d)'", fontsize=8, va="center", family="monospace"
    )
    _box(ax, 5, 0.75, "Concat(head$_1$ … head$_h$) W$^O$    (B, L, d_model)", "out", w=6.4)
    ax.set_title("Multi-head attention: h heads in parallel, one projection each way", fontsize=12)
    return fig


def heads_split_merge_diagram(h: int = 4, d: int = 2, L: int = 4):
    """One token-by-feature matrix (L, h·d) read as h heads of (L, d), attended, merged, W^O."""
    fig, ax = _canvas(9.0, 6.6, (-1.4, 11.6), (-0.6, 9.0))
    size = 0.42
    width = h * d * size

    def by_head(_, c):
        return HEAD_COLORS[c // d]

    def matrix(x, y, caption, colors):
        _cells(ax, x, y, L, h * d, size, colors)
        ax.text(x + width / 2, y + 0.22, caption, ha="center", va="bottom", fontsize=9)
        for r in range(L):
            ax.text(x - 0.1, y - (r + 0.5) * size, f"t{r}", ha="right", va="center", fontsize=7)

    left = 5.0 - width / 2
    matrix(
        left,
        8.1,
        "Q = X W$^Q$   (B, L, h·d), and K, V alike: each token's features, head by head",
        by_head,
    )
    for i in range(h):
        ax.text(
            left + (i + 0.5) * d * size,
            8.1 - L * size - 0.08,
            f"head {i + 1}",
            ha="center",
            va="top",
            fontsize=7,
            color=HEAD_COLORS[i],
        )
    _arrow(ax, (5.0, 6.05), (5.0, 5.45))
    ax.text(5.2, 5.75, "split: 'b l (h d) -> b h l d'", fontsize=9, family="monospace", va="center")
    gap = 0.5
    stack_width = h * d * size + (h - 1) * gap
    for i in range(h):
        x = 5.0 - stack_width / 2 + i * (d * size + gap)
        _cells(ax, x, 5.2, L, d, size, lambda r, c, i=i: HEAD_COLORS[i])
        ax.text(
            x + d * size / 2,
            5.2 - L * size - 0.1,
            f"head {i + 1}\n(L, d)",
            ha="center",
            va="top",
            fontsize=7,
        )
    ax.text(
        5.0 + stack_width / 2 + 0.3,
        5.2 - L * size / 2,
        "attention in every head at once:\nthe head axis is a batch axis",
        fontsize=8,
        va="center",
        color="0.3",
    )
    _arrow(ax, (5.0, 2.9), (5.0, 2.3))
    ax.text(5.2, 2.6, "merge: 'b h l d -> b l (h d)'", fontsize=9, family="monospace", va="center")
    merged_left = 2.6 - width / 2
    matrix(merged_left, 1.9, "Concat(head$_1$ … head$_h$)   (B, L, h·d)", by_head)
    _box(ax, 5.55, 1.9 - L * size / 2, "× W$^O$\n(h·d × d_model)", "proj", w=2.2, h=0.8)
    _arrow(ax, (merged_left + width + 0.1, 1.9 - L * size / 2), (4.4, 1.9 - L * size / 2))
    _arrow(ax, (6.7, 1.9 - L * size / 2), (7.25, 1.9 - L * size / 2))
    _cells(ax, 7.35, 1.9, L, h * d, size, lambda r, c: COLORS["out"], alpha=1.0)
    ax.text(
        7.35 + width / 2, 2.12, "output   (B, L, d_model)", ha="center", va="bottom", fontsize=9
    )
    ax.text(
        7.35 + width / 2,
        1.9 - L * size - 0.12,
        "W$^O$ mixes the heads' features",
        ha="center",
        va="top",
        fontsize=8,
        color="0.3",
    )
    ax.set_title(
        "The heads split and merged: one (L, h·d) matrix is h (L, d) matrices", fontsize=12
    )
    return fig
