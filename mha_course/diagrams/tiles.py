"""Attention in tiles: the online softmax over key blocks (lesson 06) and the FlashAttention
kernel's program grid (lesson 09)."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Patch, Rectangle

from ._draw import COLORS, HEAD_COLORS, NEW, _arrow, _box

DONE, TO_COME, SKIPPED = "#d9d9d9", "white", "#bdbdbd"


def _tile_grid(ax, blocks: int, tile, ylabels, xlabel):
    """A blocks × blocks grid of score tiles, query blocks down, key blocks across, on real axes;
    ``tile(i, j)`` gives each tile's (face colour, hatch)."""
    for i in range(blocks):
        for j in range(blocks):
            face, hatch = tile(i, j)
            ax.add_patch(
                Rectangle((j, i), 1, 1, facecolor=face, hatch=hatch, edgecolor="0.3", lw=1.0)
            )
    ax.set_xlim(0, blocks)
    ax.set_ylim(blocks, 0)
    ax.set_aspect("equal")
    ax.set_xticks([j + 0.5 for j in range(blocks)], [f"K$_{j}$, V$_{j}$" for j in range(blocks)])
    ax.set_yticks([i + 0.5 for i in range(blocks)], ylabels)
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.tick_params(length=0)
    ax.set_xlabel(xlabel)


def online_softmax_tiles_diagram(blocks: int = 4, row: int = 1, now: int = 2):
    """One query block's tiles of scores, visited key block by key block with a running state."""
    fig, (ax, side) = plt.subplots(
        1, 2, figsize=(10.0, 4.8), gridspec_kw={"width_ratios": [1.0, 1.15]}, layout="constrained"
    )

    def tile(i, j):
        if i != row:
            return COLORS["cache"], None
        return (DONE, "//") if j < now else (NEW, None) if j == now else (TO_COME, None)

    _tile_grid(
        ax,
        blocks,
        tile,
        [f"Q$_{i}$" for i in range(blocks)],
        "keys j, in blocks of keys and values",
    )
    ax.set_ylabel("queries i, in blocks")
    _arrow(ax, (0.15, row + 0.8), (blocks - 0.15, row + 0.8), color="0.2")
    ax.text(
        now + 0.5,
        row + 0.45,
        "tile S$_{ij}$\nin fast\nmemory",
        ha="center",
        va="center",
        fontsize=8,
    )
    ax.text(
        blocks / 2,
        blocks + 0.35,
        "loop over the key blocks, left to right, for query block Q$_1$",
        ha="center",
        va="center",
        fontsize=8.5,
    )
    ax.legend(
        handles=[
            Patch(facecolor=DONE, hatch="//", edgecolor="0.3", label="used, thrown away"),
            Patch(facecolor=NEW, edgecolor="0.3", label="the one tile held now"),
            Patch(facecolor=TO_COME, edgecolor="0.3", label="still to come"),
            Patch(facecolor=COLORS["cache"], edgecolor="0.3", label="other query blocks: the same"),
        ],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12),
        ncol=2,
        fontsize=8,
        frameon=False,
    )
    side.set_xlim(0, 6)
    side.set_ylim(0, 6)
    side.axis("off")
    side.text(3, 5.7, "what each query carries from block to block", ha="center", fontsize=10)
    for y, text in (
        (4.8, "m: the largest score so far"),
        (3.85, "ℓ: the sum of e$^{s - m}$ so far"),
        (2.9, "o: the sum of e$^{s - m}$ v so far (unnormalised)"),
    ):
        _box(side, 3, y, text, "attn", w=5.4, h=0.6, fontsize=9)
    side.text(
        3,
        2.05,
        "a block that raises m brings ℓ and o to the new maximum",
        ha="center",
        fontsize=8.5,
        color="0.3",
    )
    _box(
        side,
        3,
        1.15,
        "after the last block:  output = o / ℓ  (exact)",
        "out",
        w=5.4,
        h=0.6,
        fontsize=9,
    )
    side.text(
        3,
        0.25,
        "memory: one tile of scores, never the L × S matrix",
        ha="center",
        fontsize=8.5,
        color="0.3",
    )
    fig.suptitle("Attention in tiles with the online softmax", fontsize=12)
    return fig


def flash_kernel_diagram(blocks: int = 4, shown: int = 2):
    """FlashAttention's forward as a GPU kernel: one program per query block, a loop over key
    blocks, the tiles above the diagonal skipped when causal."""
    fig, (ax, side) = plt.subplots(
        1, 2, figsize=(10.5, 6.0), gridspec_kw={"width_ratios": [1.0, 1.3]}, layout="constrained"
    )

    def tile(i, j):
        if j > i:
            return SKIPPED, "xx"
        return HEAD_COLORS[i] + ("99" if i == shown else "40"), "//" if j == i else None

    _tile_grid(
        ax,
        blocks,
        tile,
        [f"program {i}: Q$_{i}$" for i in range(blocks)],
        "keys j, in blocks of BLOCK_N",
    )
    ax.set_ylabel("queries, in blocks of BLOCK_M: one program each")
    _arrow(ax, (0.15, shown + 0.5), (shown + 0.85, shown + 0.5), color="white", lw=1.8)
    ax.legend(
        handles=[
            Patch(facecolor="0.85", edgecolor="0.3", label="tile computed"),
            Patch(
                facecolor="0.85", hatch="//", edgecolor="0.3", label="diagonal tile: masked inside"
            ),
            Patch(facecolor=SKIPPED, hatch="xx", edgecolor="0.3", label="causal: never loaded"),
        ],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.04),
        ncol=1,
        fontsize=8,
        frameon=False,
    )
    side.set_xlim(-0.5, 6.4)
    side.set_ylim(0, 6.4)
    side.axis("off")
    side.text(
        3.2,
        6.15,
        f"program i = tl.program_id(0), here i = {shown}; all run in parallel",
        ha="center",
        fontsize=9.5,
    )
    steps = [
        (5.3, "load Q$_i$ (BLOCK_M × D) into fast memory, once", "input"),
        (4.35, "for each key block j (causal: j ≤ i): load K$_j$, V$_j$", "proj"),
        (3.4, "S = Q$_i$ K$_j$ᵀ · scale, on chip; update m, ℓ, acc", "attn"),
        (2.45, "after the loop: O$_i$ = acc / ℓ, lse$_i$ = m + log ℓ", "out"),
    ]
    for k, (y, text, kind) in enumerate(steps):
        _box(side, 3.2, y, text, kind, w=6.1, h=0.62, fontsize=9)
        if k:
            _arrow(side, (3.2, y + 0.64), (3.2, y + 0.32))
    _arrow(side, (0.1, 3.4), (0.1, 4.35), connection="arc3,rad=-0.6", color="0.4")
    side.text(-0.2, 3.875, "loop", rotation=90, ha="right", va="center", fontsize=8, color="0.4")
    side.text(3.2, 1.45, "write O$_i$ and lse$_i$ to main memory (HBM)", ha="center", fontsize=9)
    side.text(
        3.2,
        0.55,
        "grid = (⌈L / BLOCK_M⌉, B·H): one program per query block and head",
        ha="center",
        fontsize=8.5,
        color="0.3",
    )
    fig.suptitle(
        "A FlashAttention kernel: a grid of programs, each looping over key blocks", fontsize=12
    )
    return fig
