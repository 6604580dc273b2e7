"""Attention heatmaps with matplotlib only, so they render on GitHub, nbviewer, Colab and offline.

Rows are queries (the token that is looking), columns are keys (the tokens it looks at).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

__all__ = ["plot_attention", "plot_attention_grid"]


def _as_numpy(weights) -> np.ndarray:
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().float().cpu().numpy()
    return np.asarray(weights, dtype=float)


def _check_2d(name: str, w: np.ndarray, queries, keys) -> None:
    if w.ndim != 2:
        raise ValueError(f"{name} must be 2-D (L queries, S keys), got shape {w.shape}")
    if queries is not None and len(queries) != w.shape[0]:
        raise ValueError(f"got {len(queries)} query labels for {w.shape[0]} rows of {name}")
    if keys is not None and len(keys) != w.shape[1]:
        raise ValueError(f"got {len(keys)} key labels for {w.shape[1]} columns of {name}")


def plot_attention(
    weights,
    tokens: Sequence[str] | None = None,
    *,
    keys: Sequence[str] | None = None,
    mask=None,
    ax=None,
    title: str | None = None,
    annotate: bool | None = None,
    colorbar: bool = True,
    vmax: float | None = 1.0,
    cmap: str = "viridis",
):
    """Heatmap of one (L, S) attention matrix with token labels on both axes.

    ``tokens`` label the queries (rows) and, for self-attention, the keys too; pass ``keys`` for
    cross-attention. ``mask`` (bool, broadcastable to (L, S), True = may attend) marks the cells a
    query may not attend to with a grey hatch, so "zero because masked" and "zero because ignored"
    look different. Returns the axes.
    """
    w = _as_numpy(weights)
    queries = tokens
    keys = tokens if keys is None else keys
    _check_2d("weights", w, queries, keys)
    if ax is None:
        L, S = w.shape
        _, ax = plt.subplots(figsize=(min(1.0 + 0.5 * S, 10), min(0.8 + 0.45 * L, 9)))
    image = ax.imshow(w, cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto")
    if mask is not None:
        blocked = ~np.broadcast_to(_as_numpy(mask).astype(bool), w.shape)
        for i, j in zip(*np.nonzero(blocked)):
            ax.add_patch(
                plt.Rectangle(
                    (j - 0.5, i - 0.5), 1, 1, facecolor="0.85", edgecolor="0.5", hatch="///"
                )
            )
    if annotate is None:
        annotate = w.size <= 100
    if annotate:
        for (i, j), value in np.ndenumerate(w):
            if mask is None or not blocked[i, j]:
                ax.text(
                    j,
                    i,
                    f"{value:.2f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if value < 0.6 * (vmax or w.max() or 1) else "black",
                )
    ax.set_xticks(range(w.shape[1]), keys if keys is not None else range(w.shape[1]), rotation=90)
    ax.set_yticks(range(w.shape[0]), queries if queries is not None else range(w.shape[0]))
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if title:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="attention weight")
    return ax


def plot_attention_grid(
    weights,
    tokens: Sequence[str] | None = None,
    *,
    keys: Sequence[str] | None = None,
    mask=None,
    titles: Sequence[str] | None = None,
    row_labels: Sequence[str] | None = None,
    ncols: int | None = None,
    cell_size: float = 2.2,
    suptitle: str | None = None,
    vmax: float | None = 1.0,
    colorbar: bool = True,
):
    """A grid of heatmaps: ``weights`` is (H, L, S) -- one panel per head -- or (N, H, L, S) --
    one row per layer, one column per head. Heads and layers are numbered from 0, as in code.

    Every panel shares one colour scale (0 to ``vmax``, 1 by default, with one colorbar), so a
    diffuse head looks diffuse next to a sharp one; ``vmax=None`` scales each panel on its own.
    ``tokens`` label the queries and, unless ``keys`` is given, the keys: on every panel when they
    fit, otherwise on the bottom row and left column. ``mask`` (bool, broadcastable to (L, S),
    True = may attend) hatches the cells no query may attend to, as :func:`plot_attention` does.

    Returns the figure.
    """
    w = _as_numpy(weights)
    if w.ndim == 3:
        n_cols = ncols or min(w.shape[0], 4)
        n_rows = math.ceil(w.shape[0] / n_cols)
        panels = [w[i] for i in range(w.shape[0])]
    elif w.ndim == 4:
        n_rows, n_cols = w.shape[0], w.shape[1]
        panels = [w[r, c] for r in range(w.shape[0]) for c in range(w.shape[1])]
    else:
        raise ValueError(f"weights must be (H, L, S) or (layers, H, L, S), got shape {w.shape}")
    L, S = w.shape[-2:]
    keys = tokens if keys is None else keys
    _check_2d("each panel", panels[0], tokens, keys)
    blocked = None if mask is None else ~np.broadcast_to(_as_numpy(mask).astype(bool), (L, S))
    if titles is None:
        titles = [f"head {i % n_cols}" if w.ndim == 4 else f"head {i}" for i in range(len(panels))]
    fig, axes = plt.subplots(
        n_rows,
        n_cols,
        figsize=(cell_size * n_cols + (0.8 if colorbar else 0), cell_size * n_rows),
        squeeze=False,
    )
    label_every_panel = cell_size >= 2 and max(L, S) <= 16
    fontsize = 6 if max(L, S) <= 16 else 5
    image = None
    for k, ax in enumerate(axes.flat):
        if k >= len(panels):
            ax.axis("off")
            continue
        image = ax.imshow(panels[k], cmap="viridis", vmin=0.0, vmax=vmax, aspect="auto")
        if blocked is not None:
            for i, j in zip(*np.nonzero(blocked)):
                ax.add_patch(
                    plt.Rectangle(
                        (j - 0.5, i - 0.5),
                        1,
                        1,
                        facecolor="0.85",
                        edgecolor="0.6",
                        hatch="///",
                        linewidth=0.3,
                    )
                )
        ax.set_title(titles[k], fontsize=8)
        row, col = divmod(k, n_cols)
        bottom = row == n_rows - 1 or k + n_cols >= len(panels)
        if keys is not None and (label_every_panel or bottom) and max(L, S) <= 40:
            ax.set_xticks(range(S), keys, rotation=90, fontsize=fontsize)
        else:
            ax.set_xticks([])
        if tokens is not None and (label_every_panel or col == 0) and max(L, S) <= 40:
            ax.set_yticks(range(L), tokens, fontsize=fontsize)
        else:
            ax.set_yticks([])
        if bottom:
            ax.set_xlabel("key", fontsize=8)
        if col == 0:
            label = f"{row_labels[row]}\nquery" if row_labels is not None else "query"
            ax.set_ylabel(label, fontsize=8)
    if suptitle:
        fig.suptitle(suptitle)
    fig.tight_layout()
    if colorbar and image is not None and vmax is not None:
        fig.colorbar(
            image, ax=axes.ravel().tolist(), fraction=0.03, pad=0.02, label="attention weight"
        )
    return fig
