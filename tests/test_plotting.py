"""Plot helpers draw labelled heatmaps."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from mha_course.plotting import plot_attention, plot_attention_grid  # noqa: E402


def test_heatmap_has_token_labels_on_both_axes_and_marks_masked_cells():
    w = torch.softmax(torch.randn(3, 4), -1)
    mask = torch.tensor([[True, True, False, False]]).expand(3, 4)
    ax = plot_attention(w, ["a", "b", "c"], keys=["k0", "k1", "k2", "k3"], mask=mask, title="t")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["k0", "k1", "k2", "k3"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert ax.get_xlabel() and ax.get_ylabel()
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert len(hatched) == 6  # 3 queries x 2 masked keys
    plt.close("all")


def test_self_attention_labels_both_axes_from_one_list():
    ax = plot_attention(torch.eye(2), ["x", "y"])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["x", "y"]
    plt.close("all")


def test_heatmap_rejects_wrong_labels_and_shapes():
    with pytest.raises(ValueError, match="got 2 query labels for 3 rows"):
        plot_attention(torch.rand(3, 3), ["a", "b"])
    with pytest.raises(ValueError, match="must be 2-D"):
        plot_attention(torch.rand(2, 3, 3))


@pytest.mark.parametrize("shape, panels", [((5, 4, 4), 5), ((2, 3, 4, 4), 6)])
def test_grid_has_one_panel_per_head(shape, panels):
    fig = plot_attention_grid(torch.rand(shape), ["a", "b", "c", "d"])
    heatmaps = [ax for ax in fig.axes if ax.get_title().startswith("head")]
    assert len(heatmaps) == panels and all(ax.has_data() for ax in heatmaps)
    assert (
        len(fig.axes) - len(heatmaps) - (8 - panels if len(shape) == 3 else 0) == 1
    )  # one shared colorbar
    assert all(im.get_clim() == (0.0, 1.0) for ax in heatmaps for im in ax.get_images())
    plt.close("all")


def test_grid_hatches_masked_cells_on_every_panel():
    mask = torch.ones(3, 3, dtype=torch.bool).tril()  # 3 masked cells
    fig = plot_attention_grid(torch.rand(2, 3, 3), ["a", "b", "c"], mask=mask)
    heatmaps = [ax for ax in fig.axes if ax.get_title().startswith("head")]
    assert [sum(bool(p.get_hatch()) for p in ax.patches) for ax in heatmaps] == [3, 3]
    plt.close("all")
