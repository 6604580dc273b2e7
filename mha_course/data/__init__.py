"""Text that lesson 07's language model learns from, shipped with the package (nothing is
downloaded): two plays by Shakespeare, *The Tempest* and *A Midsummer Night's Dream*, about
95 KB each. Their source and licence are in this folder's README.md.

* :func:`load_text` gives a play (or both) as one string;
* :class:`CharVocabulary` turns text into token ids, one per character, and back;
* :func:`random_windows` draws a batch of training windows from a long sequence of ids: each
  target is its input shifted by one token, the next character at every position.
"""

from __future__ import annotations

from importlib import resources

import torch
from torch import Tensor

from .._validate import require_positive_int, shape_str

__all__ = ["PLAYS", "load_text", "CharVocabulary", "random_windows"]

PLAYS = {"tempest": "tempest.txt", "midsummer": "midsummer_nights_dream.txt"}


def load_text(name: str = "shakespeare") -> str:
    """A play as one string: ``"tempest"``, ``"midsummer"``, or ``"shakespeare"`` (both, The
    Tempest first, separated by a blank line)."""
    if name == "shakespeare":
        return "\n\n".join(load_text(play) for play in PLAYS)
    if name not in PLAYS:
        known = ", ".join(repr(n) for n in ("shakespeare", *PLAYS))
        raise ValueError(f"no text named {name!r}; the texts are {known}")
    return resources.files(__name__).joinpath(PLAYS[name]).read_text(encoding="utf-8")


class CharVocabulary:
    """One token per distinct character of ``text``, in sorted order: ``encode`` and ``decode``."""

    def __init__(self, text: str) -> None:
        if not isinstance(text, str) or not text:
            raise ValueError("text must be a non-empty string")
        self.chars = sorted(set(text))
        self._ids = {char: i for i, char in enumerate(self.chars)}

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> Tensor:
        """The ids of ``text``'s characters, a 1-D int64 tensor."""
        unknown = sorted(set(text) - self._ids.keys())
        if unknown:
            raise ValueError(f"characters not in the vocabulary: {unknown!r}")
        return torch.tensor([self._ids[char] for char in text], dtype=torch.long)

    def decode(self, ids) -> str:
        """The text of a 1-D sequence of ids (a tensor or a list)."""
        if isinstance(ids, Tensor):
            if ids.dim() != 1:
                raise ValueError(
                    f"decode one sequence at a time: ids has shape {shape_str(ids.shape)}"
                )
            ids = ids.tolist()
        return "".join(self.chars[i] for i in ids)

    def __repr__(self) -> str:
        return f"CharVocabulary({len(self)} characters)"


def random_windows(
    data: Tensor, batch_size: int, length: int, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    """``batch_size`` windows of ``length`` ids from random places of ``data`` (1-D), and their
    targets: the same windows one id later. Both (batch_size, length)."""
    require_positive_int("batch_size", batch_size)
    require_positive_int("length", length)
    if data.dim() != 1 or data.numel() <= length:
        raise ValueError(
            f"data must be 1-D and longer than length = {length}, got shape {shape_str(data.shape)}"
        )
    starts = torch.randint(0, data.numel() - length, (batch_size,), generator=generator)
    index = starts[:, None] + torch.arange(length + 1)  # (B, length + 1)
    windows = data[index]
    return windows[:, :-1], windows[:, 1:]
