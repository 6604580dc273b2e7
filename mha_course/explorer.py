"""An interactive attention explorer: type a sentence, pick a layer and a head (or the average of
all heads), pick a query token, and see where it looks.

The logic is pure functions, tested without a browser: :func:`attention_for` runs the model,
:func:`select` picks one (L, L) map, :func:`query_row` and :func:`strongest` read one query's row,
:func:`highlight_html` colours the sentence by that row and :func:`draw` makes the figure.
:func:`attention_explorer` puts them behind ipywidgets.

In a notebook, :func:`attention_explorer` first shows a static matplotlib figure (what GitHub,
nbviewer and a test run see), then the controls. The live view under the controls is an image
widget redrawn on every change, never an ``Output`` widget, so an executed cell always saves the
same outputs.
"""

from __future__ import annotations

import html
import io
from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch

from .plotting import plot_attention
from .pretrained import SentenceAttention, attention_maps

__all__ = [
    "attention_for",
    "select",
    "query_row",
    "strongest",
    "query_choices",
    "highlight_html",
    "view_title",
    "draw",
    "AttentionExplorer",
    "attention_explorer",
]

SEED_SENTENCE = "Which do you like better, coffee or tea?"


def attention_for(model, sentence: str) -> SentenceAttention:
    """Tokens, word ids and every head's weights (layers, H, L, L) for one sentence."""
    if not isinstance(sentence, str):
        raise TypeError(f"sentence must be a str, got {type(sentence).__name__}")
    if not sentence.strip():
        raise ValueError("sentence is empty; type a few words")
    return attention_maps(model, [sentence])[0]


def _check_weights(weights) -> None:
    if not isinstance(weights, torch.Tensor):
        raise TypeError(
            f"weights must be a torch.Tensor (layers, H, L, L), got {type(weights).__name__}"
        )
    if weights.dim() != 4 or weights.size(-1) != weights.size(-2):
        raise ValueError(f"weights must be (layers, H, L, L), got shape {tuple(weights.shape)}")


def select(weights: torch.Tensor, layer: int, head: int | None = None) -> torch.Tensor:
    """The (L, L) map of one ``layer`` and ``head``; ``head=None`` averages the layer's heads
    (rows still sum to 1, since each head's do)."""
    _check_weights(weights)
    n_layers, n_heads = weights.shape[:2]
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < n_layers:
        raise ValueError(f"layer must be an int in [0, {n_layers}), got {layer!r}")
    if head is None:
        return weights[layer].mean(dim=0)
    if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < n_heads:
        raise ValueError(
            f"head must be an int in [0, {n_heads}) or None for the average, got {head!r}"
        )
    return weights[layer, head]


def query_row(matrix: torch.Tensor, query_index: int) -> torch.Tensor:
    """Row ``query_index`` of an (L, L) map: how that query token spreads its attention."""
    if not isinstance(matrix, torch.Tensor) or matrix.dim() != 2:
        raise ValueError(
            f"matrix must be a 2-D (L, L) tensor, got {getattr(matrix, 'shape', type(matrix).__name__)}"
        )
    L = matrix.size(0)
    if (
        isinstance(query_index, bool)
        or not isinstance(query_index, int)
        or not 0 <= query_index < L
    ):
        raise ValueError(f"query_index must be an int in [0, {L}), got {query_index!r}")
    return matrix[query_index]


def strongest(tokens: Sequence[str], row: torch.Tensor, k: int = 3) -> list[tuple[int, str, float]]:
    """The ``k`` keys with the largest weights in ``row``: (index, token, weight), largest first
    (ties: the earlier token first)."""
    if len(tokens) != row.numel():
        raise ValueError(f"got {len(tokens)} tokens for a row of {row.numel()} weights")
    order = sorted(range(len(tokens)), key=lambda j: (-float(row[j]), j))[:k]
    return [(j, tokens[j], float(row[j])) for j in order]


def query_choices(tokens: Sequence[str]) -> list[tuple[str, int]]:
    """Dropdown options, one per token: ("3: coffee", 3). The index tells repeated words apart."""
    return [(f"{i}: {token}", i) for i, token in enumerate(tokens)]


def highlight_html(tokens: Sequence[str], row: torch.Tensor, query_index: int) -> str:
    """The sentence as HTML, each token's background as strong as the query's attention to it
    (scaled so the largest weight is full colour); the query token is boxed."""
    if len(tokens) != row.numel():
        raise ValueError(f"got {len(tokens)} tokens for a row of {row.numel()} weights")
    if not 0 <= query_index < len(tokens):
        raise ValueError(f"query_index must be in [0, {len(tokens)}), got {query_index}")
    peak = float(row.max()) or 1.0
    spans = []
    for j, token in enumerate(tokens):
        weight = float(row[j])
        style = f"background: rgba(255, 140, 0, {weight / peak:.2f}); padding: 1px 3px; margin: 1px"
        if j == query_index:
            style += "; border: 2px solid #1f4e9c; font-weight: bold"
        spans.append(f'<span title="{weight:.3f}" style="{style}">{html.escape(token)}</span>')
    return '<div style="line-height: 2">' + " ".join(spans) + "</div>"


def view_title(layer: int, head: int | None, tokens: Sequence[str], query_index: int | None) -> str:
    """ "layer 2, head 7" or "layer 2, average of the heads", plus the highlighted query."""
    what = f"layer {layer}, " + ("average of the heads" if head is None else f"head {head}")
    return what if query_index is None else f"{what}; query {query_index}: {tokens[query_index]!r}"


def draw(
    attention: SentenceAttention,
    layer: int,
    head: int | None = None,
    query_index: int | None = None,
    ax=None,
):
    """The heatmap of one view with token labels; the query's row is framed in red. Returns the figure."""
    matrix = select(attention.weights, layer, head)
    if query_index is not None:
        query_row(matrix, query_index)  # validates the index
    L = len(attention.tokens)
    if ax is None:
        _, ax = plt.subplots(figsize=(min(2.5 + 0.42 * L, 11), min(2.0 + 0.38 * L, 10)))
    plot_attention(
        matrix,
        attention.tokens,
        ax=ax,
        annotate=False,
        title=view_title(layer, head, attention.tokens, query_index),
    )
    if query_index is not None:
        ax.add_patch(
            plt.Rectangle((-0.5, query_index - 0.5), L, 1, fill=False, edgecolor="red", linewidth=2)
        )
    ax.figure.tight_layout()
    return ax.figure


class AttentionExplorer:
    """The widgets and their wiring. ``attention_explorer`` shows one; tests drive one directly
    by setting the controls' ``.value``."""

    def __init__(
        self,
        model,
        sentence: str = SEED_SENTENCE,
        layer: int = 0,
        head: int | None = None,
        query_index: int | None = None,
    ):
        import ipywidgets as widgets

        self.model = model
        self.attention = attention_for(model, sentence)
        n_layers, n_heads = self.attention.weights.shape[:2]
        select(self.attention.weights, layer, head)  # validates layer and head
        if query_index is None:
            query_index = 1 if len(self.attention.tokens) > 2 else 0  # the first word, not [CLS]
        query_row(self.attention.weights[0, 0], query_index)  # validates the index

        self.sentence = widgets.Text(
            value=sentence,
            description="sentence",
            continuous_update=False,
            layout=widgets.Layout(width="90%"),
        )
        self.layer = widgets.IntSlider(value=layer, min=0, max=n_layers - 1, description="layer")
        self.head = widgets.IntSlider(
            value=0 if head is None else head,
            min=0,
            max=n_heads - 1,
            description="head",
            disabled=head is None,
        )
        self.average = widgets.Checkbox(value=head is None, description="average heads")
        self.query = widgets.Dropdown(
            options=query_choices(self.attention.tokens), value=query_index, description="query"
        )
        self.text = widgets.HTML()
        self.image = widgets.Image(format="png")
        self.status = widgets.HTML()
        self.widget = widgets.VBox(
            [
                self.sentence,
                widgets.HBox([self.layer, self.head, self.average]),
                self.query,
                self.text,
                self.image,
                self.status,
            ]
        )
        self._updating = False  # True while the sentence's change resets the query dropdown
        self.sentence.observe(self._on_sentence, names="value")
        for control in (self.layer, self.head, self.average, self.query):
            control.observe(self._on_view, names="value")
        self._refresh()

    @property
    def view(self) -> tuple[int, int | None, int]:
        """(layer, head or None for the average, query index) as the controls stand."""
        return self.layer.value, None if self.average.value else self.head.value, self.query.value

    def figure(self):
        """A new matplotlib figure of the current view (the caller closes it)."""
        return draw(self.attention, *self.view)

    def _on_sentence(self, change) -> None:
        try:
            attention = attention_for(self.model, change["new"])
        except ValueError as error:
            self.status.value = f"<i>{html.escape(str(error))}</i>"
            return
        self.attention = attention
        self.status.value = ""
        old = self.query.value
        # New options reset a dropdown to its first one (with notifications held too, once they
        # are let go): set them, then the old index where it still fits, and draw once.
        self._updating = True
        try:
            self.query.options = query_choices(attention.tokens)
            self.query.value = min(old, len(attention.tokens) - 1)
        finally:
            self._updating = False
        self._refresh()

    def _on_view(self, change) -> None:
        if self._updating:
            return
        self.head.disabled = self.average.value
        self._refresh()

    def _refresh(self) -> None:
        layer, head, query = self.view
        row = query_row(select(self.attention.weights, layer, head), query)
        looks_at = ", ".join(
            f"{token} ({weight:.2f})" for _, token, weight in strongest(self.attention.tokens, row)
        )
        self.text.value = (
            highlight_html(self.attention.tokens, row, query)
            + f"<div><b>{html.escape(self.attention.tokens[query])}</b> looks most at: "
            + f"{html.escape(looks_at)}</div>"
        )
        figure = self.figure()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=80)
        plt.close(figure)
        self.image.value = buffer.getvalue()

    def _ipython_display_(self) -> None:
        """The static figure first (seen everywhere), then the live controls."""
        from IPython.display import display

        figure = self.figure()
        display(figure)
        plt.close(figure)
        display(_widget_bundle(self.widget), raw=True)
        if hasattr(self.widget, "_handle_displayed"):  # ipywidgets 7 tells the widget it is shown
            self.widget._handle_displayed()


def _widget_bundle(widget) -> dict:
    """What a notebook saves for a widget, built the same way under ipywidgets 7 (Colab's, which
    has no ``_repr_mimebundle_``) and 8: the widget view for Jupyter, and instead of the repr of
    every control (PNG bytes included) a short, stable text, shown where widgets cannot run and
    compared by test runs."""
    return {
        "text/plain": "Attention explorer: run this notebook in Jupyter to use the controls.",
        "application/vnd.jupyter.widget-view+json": {
            "version_major": 2,
            "version_minor": 0,
            "model_id": widget.model_id,
        },
    }


def attention_explorer(
    model,
    sentence: str = SEED_SENTENCE,
    layer: int = 0,
    head: int | None = None,
    query_index: int | None = None,
) -> None:
    """Show the explorer for ``sentence``: a static figure of the starting view, then the
    controls (sentence box, layer and head pickers, "average heads", query token)."""
    from IPython.display import display

    display(AttentionExplorer(model, sentence, layer=layer, head=head, query_index=query_index))
