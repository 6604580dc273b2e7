"""The attention explorer's logic (pure functions) and its widgets, driven without a browser."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch

from mha_course.explorer import (
    AttentionExplorer,
    attention_explorer,
    attention_for,
    draw,
    highlight_html,
    query_choices,
    query_row,
    select,
    strongest,
    view_title,
)

SENTENCE = "Which do you like better, coffee or tea?"


@pytest.fixture(scope="module")
def model():
    from mha_course.pretrained import load_minilm

    return load_minilm("cpu")


@pytest.fixture(scope="module")
def seed(model):
    return attention_for(model, SENTENCE)


def test_attention_for_is_the_model_attention_of_the_sentence(model, seed):
    batch = model.tokenize([SENTENCE])
    with torch.no_grad():
        expected = torch.stack(model(**batch, output_attentions=True).attentions, dim=1)[0]
    assert seed.tokens == [
        "[CLS]",
        "which",
        "do",
        "you",
        "like",
        "better",
        ",",
        "coffee",
        "or",
        "tea",
        "?",
        "[SEP]",
    ]
    assert seed.word_ids[0] is None and seed.word_ids[1] == 0
    assert seed.weights.shape == (6, 12, 12, 12)
    torch.testing.assert_close(seed.weights, expected)
    torch.testing.assert_close(seed.weights.sum(-1), torch.ones(6, 12, 12))
    with pytest.raises(TypeError, match="sentence must be a str"):
        attention_for(model, ["a list"])
    with pytest.raises(ValueError, match="empty"):
        attention_for(model, "   ")


def test_select_one_head_or_the_average():
    weights = torch.softmax(
        torch.randn(3, 4, 5, 5, generator=torch.Generator().manual_seed(0)), dim=-1
    )
    assert torch.equal(select(weights, 2, 1), weights[2, 1])
    average = select(weights, 1, None)
    torch.testing.assert_close(
        average, (weights[1, 0] + weights[1, 1] + weights[1, 2] + weights[1, 3]) / 4
    )
    torch.testing.assert_close(average.sum(-1), torch.ones(5))
    with pytest.raises(ValueError, match=r"layer must be an int in \[0, 3\), got 3"):
        select(weights, 3)
    with pytest.raises(ValueError, match=r"head must be an int in \[0, 4\) or None"):
        select(weights, 0, -1)
    with pytest.raises(ValueError, match="layer must be"):
        select(weights, True)
    with pytest.raises(ValueError, match=r"\(layers, H, L, L\)"):
        select(weights[0], 0)


def test_query_row_strongest_and_choices():
    matrix = torch.tensor([[0.5, 0.5, 0.0], [0.1, 0.3, 0.6], [0.2, 0.2, 0.6]])
    assert torch.equal(query_row(matrix, 1), matrix[1])
    with pytest.raises(ValueError, match=r"query_index must be an int in \[0, 3\), got 3"):
        query_row(matrix, 3)
    tokens = ["[CLS]", "tea", "[SEP]"]
    assert strongest(tokens, matrix[1], k=2) == [
        (2, "[SEP]", pytest.approx(0.6)),
        (1, "tea", pytest.approx(0.3)),
    ]
    assert [j for j, _, _ in strongest(tokens, matrix[0])] == [
        0,
        1,
        2,
    ]  # a tie keeps the earlier token first
    assert query_choices(tokens) == [("0: [CLS]", 0), ("1: tea", 1), ("2: [SEP]", 2)]
    with pytest.raises(ValueError, match="got 2 tokens for a row of 3"):
        strongest(tokens[:2], matrix[0])


def test_highlight_html_colours_by_weight_and_boxes_the_query():
    tokens = ["[CLS]", "a", "<b>", "[SEP]"]
    row = torch.tensor([0.1, 0.2, 0.4, 0.3])
    text = highlight_html(tokens, row, query_index=1)
    assert text.count("<span") == 4
    assert "&lt;b&gt;" in text and "<b>" not in text  # tokens are escaped
    assert "rgba(255, 140, 0, 1.00)" in text  # the strongest key: full colour
    assert "rgba(255, 140, 0, 0.25)" in text  # 0.1 / 0.4
    assert text.count("border") == 1
    spans = text.split("<span")[1:]
    assert "border" in spans[1] and 'title="0.200"' in spans[1]
    with pytest.raises(ValueError, match="query_index must be in"):
        highlight_html(tokens, row, 4)


def test_draw_makes_a_labelled_heatmap_with_the_query_row_framed(seed):
    figure = draw(seed, 2, None, 7)
    ax = figure.axes[0]
    assert ax.get_title() == "layer 2, average of the heads; query 7: 'coffee'"
    assert [t.get_text() for t in ax.get_xticklabels()] == seed.tokens
    image = ax.images[0].get_array()
    torch.testing.assert_close(torch.tensor(image.data).float(), seed.weights[2].mean(0))
    frames = [p for p in ax.patches if p.get_edgecolor()[:3] == (1.0, 0.0, 0.0)]
    assert len(frames) == 1 and frames[0].get_y() == 6.5
    plt.close(figure)
    assert view_title(0, 3, seed.tokens, None) == "layer 0, head 3"


def test_the_widgets_follow_the_controls(model, seed):
    explorer = AttentionExplorer(model, SENTENCE, layer=1, head=4)
    assert explorer.view == (1, 4, 1)  # the first word is the default query
    first_image, first_text = bytes(explorer.image.value), explorer.text.value
    assert first_image.startswith(b"\x89PNG")
    explorer.layer.value = 3
    assert explorer.view == (3, 4, 1)
    assert bytes(explorer.image.value) != first_image and explorer.text.value != first_text
    row = seed.weights[3, 4, 1]
    assert explorer.text.value.startswith(highlight_html(seed.tokens, row, 1))
    explorer.average.value = True
    assert explorer.view == (3, None, 1) and explorer.head.disabled
    explorer.query.value = 9  # "tea"
    assert "<b>tea</b> looks most at" in explorer.text.value
    figure = explorer.figure()
    assert figure.axes[0].get_title() == "layer 3, average of the heads; query 9: 'tea'"
    plt.close(figure)
    explorer.sentence.value = "Tea?"  # shorter: the query moves to the last token
    assert explorer.attention.tokens == ["[CLS]", "tea", "?", "[SEP]"]
    assert [label for label, _ in explorer.query.options] == [
        "0: [CLS]",
        "1: tea",
        "2: ?",
        "3: [SEP]",
    ]
    assert explorer.query.value == 3
    explorer.sentence.value = ""  # an empty sentence is reported, and the last one stays
    assert "empty" in explorer.status.value and explorer.attention.tokens[1] == "tea"
    with pytest.raises(ValueError, match="head must be"):
        AttentionExplorer(model, SENTENCE, head=12)


def test_attention_explorer_shows_a_static_figure_first_then_the_widgets(model, monkeypatch):
    import IPython.display

    shown = []

    def fake_display(obj, raw=False):
        if hasattr(obj, "_ipython_display_"):
            obj._ipython_display_()
        else:
            shown.append(obj)

    monkeypatch.setattr(IPython.display, "display", fake_display)
    open_before = set(plt.get_fignums())
    assert attention_explorer(model, "Coffee or tea?", layer=4) is None
    assert len(shown) == 2
    figure, bundle = shown
    assert isinstance(figure, matplotlib.figure.Figure)
    assert figure.axes[0].get_title() == "layer 4, average of the heads; query 1: 'coffee'"
    assert set(bundle) == {"text/plain", "application/vnd.jupyter.widget-view+json"}
    # a short, stable text (what a test run compares), not the repr of every widget
    assert (
        bundle["text/plain"]
        == "Attention explorer: run this notebook in Jupyter to use the controls."
    )
    assert set(plt.get_fignums()) == open_before  # nothing left open to be drawn a second time
    view = bundle["application/vnd.jupyter.widget-view+json"]
    assert view["version_major"] == 2 and len(view["model_id"]) == 32


def test_a_new_sentence_keeps_the_query_index_where_it_fits(model, monkeypatch):
    explorer = AttentionExplorer(model, SENTENCE, layer=2, query_index=4)  # "like"
    drawn = []
    monkeypatch.setattr(explorer, "figure", lambda: drawn.append(explorer.view) or plt.figure())
    explorer.sentence.value = "I like tea and coffee."
    assert explorer.attention.tokens[:4] == ["[CLS]", "i", "like", "tea"]
    assert explorer.view == (2, None, 4)  # still query 4 ("and" now), not token 0
    assert "<b>and</b> looks most at" in explorer.text.value
    assert drawn == [(2, None, 4)]  # drawn once, for the new sentence
    explorer.sentence.value = "Tea?"  # too short for index 4: the last token
    assert explorer.view == (2, None, 3)
