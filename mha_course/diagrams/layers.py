"""Layers and stacks: post-LN vs pre-LN (lesson 03), the encoder stack (04), MiniLM (05)."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch, Rectangle

from ._draw import COLORS, RESIDUAL, _arrow, _box, _canvas, _panel


def _layer_column(
    ax, x, norm_first: bool, title: str | None, y0=0.0, below="X′ = embeddings + PE", above="output"
):
    """One encoder layer drawn bottom-up at column x from height y0; residual paths on the left."""
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
    boxes = [(y0 + y, text, kind) for y, text, kind in boxes]
    if below:
        ax.text(x, y0 - 0.2, below, ha="center", fontsize=9)
    previous = y0 + 0.05
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
    _arrow(ax, (x, previous), (x, y0 + 7.25))
    adds = [y for y, text, _ in boxes if text == "+"]
    # The residual branches off where the sub-layer's input is: below the attention (or its
    # pre-norm), and after the first block's output: after its LayerNorm in post-LN, after its add in pre-LN.
    first_block_output = y0 + 3.1 + 0.25 if not norm_first else adds[0] + 0.22
    starts = [y0 + 0.4, first_block_output + 0.28]
    for start, add in zip(starts, adds):
        ax.plot([x, x - 1.5, x - 1.5], [start, start, add], color=RESIDUAL, lw=1.3)
        _arrow(ax, (x - 1.5, add), (x - 0.22, add), color=RESIDUAL)
    ax.text(
        x - 1.6,
        (starts[0] + adds[0]) / 2,
        "residual",
        rotation=90,
        ha="right",
        va="center",
        fontsize=8,
        color=RESIDUAL,
    )
    if above:
        ax.text(x, y0 + 7.35, above, ha="center", fontsize=9)
    if title:
        ax.text(x, y0 + 7.75, title, ha="center", fontsize=11)


def encoder_layer_diagram():
    """The encoder layer of the lesson (post-LN): Step 2 and Step 3 with their residuals."""
    fig, ax = _canvas(5.0, 6.8, (-1.5, 4.5), (-0.6, 8.1))
    _layer_column(ax, 1.8, norm_first=False, title=None)
    ax.text(3.2, 2.0, "Step 2:\nZ = LayerNorm(X′ + MultiHead(X′))", fontsize=8, va="center")
    ax.text(3.2, 5.3, "Step 3:\nLayerNorm(FFN(Z) + Z)", fontsize=8, va="center")
    ax.set_title("Encoder layer (post-LN)", fontsize=12)
    ax.set_xlim(-1.5, 6.5)
    return fig


def post_ln_vs_pre_ln_diagram():
    """The same block two ways: normalise after the add (BERT) or before each sub-layer (GPT-2)."""
    fig, ax = _canvas(8.5, 7.0, (-1.5, 9.5), (-0.6, 8.4))
    _layer_column(ax, 1.8, norm_first=False, title="post-LN (original, BERT)")
    _layer_column(ax, 7.0, norm_first=True, title="pre-LN (GPT-2, most new models)")
    ax.set_title("Where the LayerNorm goes: after the add, or before each sub-layer", fontsize=12)
    return fig


def _step_bracket(ax, x, bottom, top, text):
    ax.plot([x, x + 0.15, x + 0.15, x], [bottom, bottom, top, top], color="0.4", lw=1.0)
    ax.text(x + 0.3, (bottom + top) / 2, text, fontsize=8.5, va="center")


def encoder_stack_diagram():
    """The encoder: Step 1 (embeddings + positions) once, then N layers of Steps 2 and 3."""
    fig, ax = _canvas(8.0, 7.6, (-0.6, 9.6), (-2.5, 8.3))
    x = 1.9
    ax.text(x, -2.25, "token ids (B, L)", ha="center", fontsize=9)
    _arrow(ax, (x, -2.0), (x, -1.45))
    _box(ax, x, -1.2, "Embedding", "input", w=2.3, h=0.5, fontsize=9)
    _arrow(ax, (x, -0.95), (x, -0.47))
    ax.add_patch(plt.Circle((x, -0.25), 0.22, facecolor="white", edgecolor="0.3"))
    ax.text(x, -0.25, "+", ha="center", va="center", fontsize=13)
    _box(ax, 4.95, -0.25, "positional encoding PE\n(L, d_model)", "input", w=3.1, h=0.7, fontsize=9)
    _arrow(ax, (3.35, -0.25), (x + 0.22, -0.25))
    _step_bracket(ax, 6.75, -1.45, -0.0, "Step 1:  X′ = Embedding + PE\n(Step1_out, once)")
    _layer_column(ax, x, norm_first=False, title=None, below=None, above=None)
    ax.add_patch(
        FancyBboxPatch(
            (-0.15, 0.25),
            4.25,
            6.55,
            boxstyle="round,pad=0.05,rounding_size=0.2",
            facecolor="none",
            edgecolor="0.45",
            linestyle="--",
        )
    )
    ax.text(4.0, 6.55, "× N", fontsize=14, ha="right", va="center")
    _step_bracket(
        ax, 4.3, 0.55, 3.4, "Step 2:  Step2_out =\nLayerNorm(MultiHead(Step1_out)\n+ Step1_out)"
    )
    _step_bracket(
        ax, 4.3, 3.85, 6.7, "Step 3:  Step3_out =\nLayerNorm(FFN(Step2_out)\n+ Step2_out)"
    )
    ax.text(
        4.65,
        0.75,
        "N layers (6 in the paper),\neach with its own weights",
        fontsize=8.5,
        va="center",
        color="0.3",
    )
    ax.text(x, 7.45, "encoder output (B, L, d_model)", ha="center", fontsize=9)
    ax.set_title("The encoder: Step 1 once, then N layers of Steps 2 and 3 (post-LN)", fontsize=12)
    return fig


def minilm_diagram(layers: int = 6, heads: int = 12):
    """all-MiniLM-L6-v2: tokens, BERT's embeddings, 6 post-LN layers of 12 heads, mean pooling."""
    fig, ax = _canvas(9.0, 8.0, (-0.6, 11.0), (-0.7, 9.6))
    x = 3.6
    ax.text(x, -0.45, "“Which do you like better, coffee or tea?”", ha="center", fontsize=9)
    _arrow(ax, (x, -0.25), (x, 0.2))
    _box(
        ax,
        x,
        0.55,
        "tokenizer (WordPiece): [CLS] which do … tea ? [SEP]",
        "input",
        w=6.4,
        h=0.6,
        fontsize=9,
    )
    _arrow(ax, (x, 0.87), (x, 1.3))
    _box(
        ax,
        x,
        1.7,
        "embeddings: word + position + token type, LayerNorm\n(B, L, 384)",
        "input",
        w=6.4,
        h=0.75,
        fontsize=9,
    )
    size, bottom = 0.32, 2.55
    for i in range(layers):
        y = bottom + i * 0.62
        _arrow(ax, (x, y - 0.12 if i else 2.1), (x, y + 0.02))
        _panel(ax, x - 2.6, y + 0.04, 5.2, 0.44, COLORS["norm"])
        ax.text(x - 2.45, y + 0.26, f"layer {i}", fontsize=8, va="center")
        for h in range(heads):
            ax.add_patch(
                Rectangle(
                    (x - 1.7 + h * size, y + 0.1),
                    size * 0.85,
                    size * 0.85,
                    facecolor=COLORS["attn"],
                    edgecolor="0.35",
                    lw=0.6,
                )
            )
    top = bottom + layers * 0.62 - 0.1
    ax.text(
        x + 2.85,
        bottom + layers * 0.31,
        f"{layers} layers × {heads} heads = {layers * heads} heads:\n"
        "lesson 04's post-LN layer with GELU,\nLayerNorm ε = 1e-12, d_model = 384,\n"
        "d_k = 384 / 12 = 32, d_ff = 1536",
        fontsize=8.5,
        va="center",
    )
    _arrow(ax, (x, top), (x, top + 0.4))
    _box(ax, x, top + 0.72, "last hidden state   (B, L, 384)", "out", w=6.4, h=0.6, fontsize=9)
    _arrow(ax, (x, top + 1.04), (x, top + 1.45))
    _box(
        ax,
        x,
        top + 1.77,
        "mean over the real tokens (attention_mask = 1)",
        "proj",
        w=6.4,
        h=0.6,
        fontsize=9,
    )
    _arrow(ax, (x, top + 2.09), (x, top + 2.5))
    _box(
        ax,
        x,
        top + 2.82,
        "normalise to length 1:  sentence embedding (B, 384)",
        "out",
        w=6.4,
        h=0.6,
        fontsize=9,
    )
    ax.text(
        x + 3.4,
        top + 2.82,
        "dot product of two\n= their cosine similarity",
        fontsize=8.5,
        va="center",
        color="0.3",
    )
    ax.set_title("all-MiniLM-L6-v2: the encoder you built, loaded with real weights", fontsize=12)
    return fig
