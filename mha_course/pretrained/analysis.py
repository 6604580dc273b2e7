"""Reading the model's attention: every layer's and head's weights, one sentence at a time.

:func:`attention_maps` runs the model on a list of sentences and hands back, for each, its word
pieces, the word each piece belongs to, and the weights of all layers and heads cropped to the
real tokens. Lesson 05 draws them; :mod:`mha_course.head_patterns` scores them over many
sentences and :mod:`mha_course.explorer` shows them behind widgets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .._validate import require_positive_int
from .model import MiniLM, check_sentences

__all__ = ["SentenceAttention", "attention_maps"]


@dataclass
class SentenceAttention:
    """One sentence's attention maps, cropped to its real tokens (no padding).

    ``tokens`` are the word pieces (``"[CLS]"``, ``"coffee"``, ``"##s"``, ...), ``word_ids`` the word
    each piece belongs to (None for [CLS] and [SEP]), ``weights`` (layers, H, L, L) on the CPU.
    """

    tokens: list[str]
    word_ids: list[int | None]
    weights: torch.Tensor


@torch.no_grad()
def attention_maps(
    model: MiniLM, sentences: Sequence[str], batch_size: int = 16
) -> list[SentenceAttention]:
    """Every layer's and head's attention weights for each sentence, padding cropped away."""
    sentences = check_sentences(sentences)
    require_positive_int("batch_size", batch_size)
    maps = []
    for start in range(0, len(sentences), batch_size):
        encodings = model.encodings(sentences[start : start + batch_size])
        batch = model.as_batch(encodings)
        attentions = torch.stack(
            model(**batch, output_attentions=True).attentions, dim=1
        )  # (B, layers, H, L, L)
        for encoding, weights in zip(encodings, attentions):
            L = sum(encoding.attention_mask)  # this sentence's real tokens
            maps.append(
                SentenceAttention(
                    list(encoding.tokens[:L]),
                    list(encoding.word_ids[:L]),
                    weights[..., :L, :L].float().cpu(),
                )
            )
    return maps
