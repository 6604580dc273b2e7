"""The course's diagrams, drawn with matplotlib so that they can be changed and rebuilt.

Each lesson's key picture is a :class:`Picture`: its file name in ``images/``, the function that
draws it, its alt text and the lessons that show it. ``python tools/authoring.py images`` draws
them all into ``images/`` and puts each into its lessons' notebooks, both versions, as a markdown
cell attachment (``![alt](attachment:NAME.png)``), which renders offline in JupyterLab, on Colab
and on Binder. ``python -m mha_course.diagrams [DIR]`` only draws them.

The pixels depend on the matplotlib version; what is checked everywhere is the names, and that
every notebook carries exactly the files in ``images/``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt

from .attention import (
    attention_diagram,
    heads_diagram,
    heads_split_merge_diagram,
    soft_lookup_diagram,
)
from .decoding import kv_cache_diagram, rope_diagram
from .layers import (
    encoder_layer_diagram,
    encoder_stack_diagram,
    minilm_diagram,
    post_ln_vs_pre_ln_diagram,
)
from .tiles import flash_kernel_diagram, online_softmax_tiles_diagram

__all__ = [
    "soft_lookup_diagram",
    "attention_diagram",
    "heads_diagram",
    "heads_split_merge_diagram",
    "encoder_layer_diagram",
    "post_ln_vs_pre_ln_diagram",
    "encoder_stack_diagram",
    "minilm_diagram",
    "online_softmax_tiles_diagram",
    "kv_cache_diagram",
    "rope_diagram",
    "flash_kernel_diagram",
    "Picture",
    "PICTURES",
    "DIAGRAMS",
    "build",
]


@dataclass(frozen=True)
class Picture:
    name: str  # images/NAME.png, and the attachment's name in a notebook
    draw: Callable[[], plt.Figure]
    alt: str  # the alt text every lesson gives it
    lessons: tuple[str, ...]  # the lessons ("02") whose notebooks show it

    @property
    def filename(self) -> str:
        return f"{self.name}.png"


PICTURES = (
    Picture(
        "soft_lookup",
        soft_lookup_diagram,
        "A query compared with three keys by dot products; a softmax turns the three matches into "
        "weights that sum to 1, and the result is the three values blended with those weights.",
        ("00",),
    ),
    Picture(
        "attention",
        attention_diagram,
        "Scaled dot-product attention as a flow: X projected to Q, K and V; the scores Q Kᵀ / √d_k, "
        "the mask, the softmax over the keys, and the weights times V, with each shape.",
        ("01",),
    ),
    Picture(
        "heads_split_merge",
        heads_split_merge_diagram,
        "A token-by-feature matrix coloured by head, cut into h per-head matrices of d features "
        "('b l (h d) -> b h l d'), attended at once, merged back ('b h l d -> b l (h d)') and "
        "multiplied by W^O.",
        ("02",),
    ),
    Picture(
        "post_ln_vs_pre_ln",
        post_ln_vs_pre_ln_diagram,
        "Two encoder layers side by side: post-LN adds each residual and then normalises; pre-LN "
        "normalises each sub-layer's input and adds the raw residual.",
        ("03",),
    ),
    Picture(
        "encoder_stack",
        encoder_stack_diagram,
        "The encoder: token ids embedded and added to the positional encoding (Step 1), then N "
        "post-LN layers of multi-head attention (Step 2) and a feed-forward network (Step 3), each "
        "with its residual and LayerNorm.",
        ("04",),
    ),
    Picture(
        "minilm",
        minilm_diagram,
        "all-MiniLM-L6-v2 from bottom to top: the tokenizer, BERT's embeddings, six encoder layers "
        "of twelve heads each, then the mean over the real tokens, normalised to a sentence "
        "embedding.",
        ("05",),
    ),
    Picture(
        "online_softmax_tiles",
        online_softmax_tiles_diagram,
        "A grid of score tiles, query blocks by key blocks; one query block visits its key blocks "
        "left to right, holding one tile at a time, while each query carries a running maximum, "
        "sum and output.",
        ("06",),
    ),
    Picture(
        "kv_cache",
        kv_cache_diagram,
        "One decoding step: the new token's key and value are appended to the cached keys and "
        "values, and its query attends over all of them; below, the cache grows by one row per "
        "generated token.",
        ("07",),
    ),
    Picture(
        "rope_rotation",
        rope_diagram,
        "RoPE: a pair of query features turned by m·θ and a pair of key features by n·θ, so that "
        "the angle between them grows with n − m; beside it, the two layouts of the pairs: "
        "neighbours 2i and 2i + 1 (interleaved, Meta's Llama) or i and i + D/2 (rotate half, "
        "Hugging Face's Llama).",
        ("08",),
    ),
    Picture(
        "flash_kernel_grid",
        flash_kernel_diagram,
        "A FlashAttention kernel: one program per query block, each looping over the key blocks up "
        "to the diagonal (causal) with an online softmax, then writing its output and log-sum-exp.",
        ("09",),
    ),
)
DIAGRAMS = {picture.name: picture.draw for picture in PICTURES}


def build(directory: Path) -> list[Path]:
    """Draw every picture into ``directory`` as NAME.png; returns the paths, in PICTURES' order."""
    directory.mkdir(exist_ok=True)
    paths = []
    for picture in PICTURES:
        fig = picture.draw()
        path = directory / picture.filename
        fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
        plt.close(fig)
        paths.append(path)
    return paths
