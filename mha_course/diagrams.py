"""The course's diagrams, drawn with matplotlib so they can be changed and rebuilt.

The notebooks call these functions (a drawn figure renders on GitHub, nbviewer, Colab and offline
JupyterLab alike); ``python -m mha_course.diagrams`` writes them to ``images/`` for the README.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

__all__ = [
    "attention_diagram",
    "heads_diagram",
    "encoder_layer_diagram",
    "post_ln_vs_pre_ln_diagram",
    "DIAGRAMS",
]

COLORS = {
    "input": "#e8eef7",
    "proj": "#fde9c9",
    "attn": "#d8ecd8",
    "norm": "#efe0f5",
    "ffn": "#fbd9d3",
    "add": "#ffffff",
    "out": "#e8eef7",
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


def attention_diagram():
    """Scaled dot-product attention: from X to softmax(Q Kᵀ / √d_k) V, with the shapes."""
    fig, ax = _canvas(7.5, 6.2, (-0.5, 8.5), (-0.6, 7.0))
    _box(ax, 4, 6.4, "X  (L × d_model)", "input", w=2.6)
    for x, name in (
        (1.3, "Q = X W$^Q$\n(L × d_k)"),
        (4, "K = X W$^K$\n(L × d_k)"),
        (6.7, "V = X W$^V$\n(L × d_v)"),
    ):
        _box(ax, x, 5.0, name, "proj", w=2.0, h=0.8)
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
        ax.add_patch(
            FancyBboxPatch(
                (x - width / 2 + 0.08, 2.85),
                width - 0.16,
                0.6,
                boxstyle="round,pad=0.02",
                facecolor=HEAD_COLORS[i],
                alpha=0.35,
                edgecolor=HEAD_COLORS[i],
            )
        )
        label = f"head {i + 1}\nd_k = d_model/h" if h <= 4 else f"head\n{i + 1}"
        ax.text(x, 3.15, label, ha="center", va="center", fontsize=8)
        _arrow(ax, (x, 4.02), (x, 3.47))
        ax.add_patch(
            FancyBboxPatch(
                (x - width / 2 + 0.08, 1.75),
                width - 0.16,
                0.6,
                boxstyle="round,pad=0.02",
                facecolor=COLORS["attn"],
                edgecolor="0.3",
            )
        )
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


def _layer_column(ax, x, norm_first: bool, title: str):
    """One encoder layer drawn bottom-up at column x; residual paths on the left."""
    if norm_first:
        boxes = [
            (0.9, "LayerNorm", "norm"),
            (2.0, "Multi-head attention", "attn"),
            (3.1, "+", "add"),
            (4.2, "LayerNorm", "norm"),
            (5.3, "Feed-forward (FFN)", "ffn"),
            (6.4, "+", "add"),
        ]
    else:
        boxes = [
            (0.9, "Multi-head attention", "attn"),
            (2.0, "+", "add"),
            (3.1, "LayerNorm", "norm"),
            (4.2, "Feed-forward (FFN)", "ffn"),
            (5.3, "+", "add"),
            (6.4, "LayerNorm", "norm"),
        ]
    ax.text(x, -0.2, "X′ = embeddings + PE", ha="center", fontsize=9)
    previous = 0.05
    for y, text, kind in boxes:
        if text == "+":
            ax.add_patch(plt.Circle((x, y), 0.22, facecolor="white", edgecolor="0.3"))
            ax.text(x, y, "+", ha="center", va="center", fontsize=13)
            bottom, top = y - 0.22, y + 0.22
        else:
            _box(ax, x, y, text, kind, w=2.3, h=0.5, fontsize=9)
            bottom, top = y - 0.25, y + 0.25
        _arrow(ax, (x, previous), (x, bottom))
        previous = top
    _arrow(ax, (x, previous), (x, 7.25))
    ax.text(x, 7.35, "output", ha="center", fontsize=9)
    adds = [y for y, text, _ in boxes if text == "+"]
    # The residual branches off where the sub-layer's input is: below the attention (or its
    # pre-norm), and after the first block's output: after its LayerNorm in post-LN, after its add in pre-LN.
    first_block_output = 3.1 + 0.25 if not norm_first else adds[0] + 0.22
    starts = [0.4, first_block_output + 0.28]
    for start, add in zip(starts, adds):
        ax.plot([x, x - 1.5, x - 1.5], [start, start, add], color="#c44e52", lw=1.3)
        _arrow(ax, (x - 1.5, add), (x - 0.22, add), color="#c44e52")
    ax.text(
        x - 1.6,
        (starts[0] + adds[0]) / 2,
        "residual",
        rotation=90,
        ha="right",
        va="center",
        fontsize=8,
        color="#c44e52",
    )
    ax.text(x, 7.75, title, ha="center", fontsize=11)


def encoder_layer_diagram():
    """The encoder layer of the lesson (post-LN): Step 2 and Step 3 with their residuals."""
    fig, ax = _canvas(5.0, 6.8, (-1.5, 4.5), (-0.6, 8.1))
    _layer_column(ax, 1.8, norm_first=False, title="Encoder layer (post-LN)")
    ax.text(3.2, 2.0, "Step 2:\nZ = LayerNorm(X′ + MultiHead(X′))", fontsize=8, va="center")
    ax.text(3.2, 5.3, "Step 3:\nLayerNorm(FFN(Z) + Z)", fontsize=8, va="center")
    ax.set_xlim(-1.5, 6.5)
    return fig


def post_ln_vs_pre_ln_diagram():
    """The same block two ways: normalise after the add (BERT) or before each sub-layer (GPT-2)."""
    fig, ax = _canvas(8.5, 6.8, (-1.5, 9.5), (-0.6, 8.1))
    _layer_column(ax, 1.8, norm_first=False, title="post-LN (original, BERT)")
    _layer_column(ax, 7.0, norm_first=True, title="pre-LN (GPT-2, most new models)")
    return fig


DIAGRAMS = {
    "attention": attention_diagram,
    "multi_head": heads_diagram,
    "encoder_layer": encoder_layer_diagram,
    "post_ln_vs_pre_ln": post_ln_vs_pre_ln_diagram,
}


def build(directory: Path) -> list[Path]:
    directory.mkdir(exist_ok=True)
    paths = []
    for name, draw in DIAGRAMS.items():
        fig = draw()
        path = directory / f"{name}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
        plt.close(fig)
        paths.append(path)
    return paths


if __name__ == "__main__":
    out = (
        Path(sys.argv[1])
        if len(sys.argv) > 1
        else Path(__file__).resolve().parent.parent / "images"
    )
    for p in build(out):
        print("wrote", p)
