"""The course's diagrams are drawn by code, and images/ holds exactly what that code builds."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from mha_course import diagrams  # noqa: E402

IMAGES = Path(__file__).resolve().parent.parent / "images"


@pytest.mark.parametrize("name", sorted(diagrams.DIAGRAMS))
def test_each_diagram_draws_boxes_and_arrows(name):
    fig = diagrams.DIAGRAMS[name]()
    ax = fig.axes[0]
    assert len(ax.patches) >= 6 and len(ax.texts) >= 4
    plt.close(fig)


def test_images_folder_matches_the_diagram_code(tmp_path):
    assert {p.stem for p in IMAGES.glob("*.png")} == set(diagrams.DIAGRAMS)
    built = diagrams.build(tmp_path)
    assert [p.name for p in built] == [f"{name}.png" for name in diagrams.DIAGRAMS]
