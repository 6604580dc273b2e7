"""Measure what attention heads do, over many sentences, instead of eyeballing one map.

A *pattern* is a rule that says, for each query token i, which key tokens are its targets:

    previous     the token just before i
    next         the token just after i
    self         i itself
    cls          the [CLS] token
    sep          the [SEP] token
    same_word    the other pieces of i's word ("coffee" "##s") and other occurrences of the word
    punctuation  punctuation tokens (. , ? ! ; : ' " - ...)

A head's *score* for a pattern is the attention mass it puts on the targets, averaged over every
query token (of every sentence) that has at least one target: 1.0 means "always looks there and
nowhere else", and a head that spreads its attention evenly over the L tokens scores the *chance*
level, the mean of |targets| / L. A query is never its own target, except for ``self``; so [SEP]
looking at itself does not count as "attends to [SEP]".

Everything here is a pure function of weight tensors and token lists; :func:`measure_head_patterns`
runs a model to get them.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from ._validate import require_positive_int, require_tensor, shape_str

__all__ = [
    "PATTERNS",
    "DESCRIPTIONS",
    "HeadScore",
    "is_punctuation",
    "word_ids_from_tokens",
    "target_masks",
    "PatternTally",
    "head_pattern_scores",
    "measure_head_patterns",
    "top_heads",
    "score_grid",
    "format_top_heads",
]

PATTERNS = ("previous", "next", "self", "cls", "sep", "same_word", "punctuation")
DESCRIPTIONS = {
    "previous": "attends to the previous token",
    "next": "attends to the next token",
    "self": "attends to itself",
    "cls": "attends to [CLS]",
    "sep": "attends to [SEP]",
    "same_word": "attends to the same word (its other pieces, other occurrences)",
    "punctuation": "attends to punctuation",
}
SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[PAD]", "[MASK]")  # not [UNK]: it stands for a real word


@dataclass(frozen=True)
class HeadScore:
    """One row of the tidy table: how much ``(layer, head)`` follows ``pattern``.

    ``queries`` is the number of query tokens that had a target (what the score averages over).
    """

    pattern: str
    layer: int
    head: int
    score: float
    chance: float
    queries: int

    @property
    def lift(self) -> float:
        """score / chance: how many times more than an evenly spread head."""
        return self.score / self.chance if self.chance > 0 else float("nan")


# ---------------------------------------------------------------- which keys are targets


def is_punctuation(token: str) -> bool:
    """True for a token made only of punctuation (BERT's definition: ASCII symbols such as
    ``$ + < = > ^ ` | ~`` count, as does every Unicode punctuation character)."""
    token = token.removeprefix("##")
    return (
        bool(token) and token not in SPECIAL_TOKENS and all(_is_punctuation_char(c) for c in token)
    )


def _is_punctuation_char(char: str) -> bool:
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def word_ids_from_tokens(tokens: Sequence[str]) -> list[int | None]:
    """Word index of each WordPiece token: a ``##`` piece continues the word before it; special
    tokens belong to no word (None). Use the tokenizer's own ``word_ids`` when you have them."""
    word_ids: list[int | None] = []
    word = -1
    for token in tokens:
        if token in SPECIAL_TOKENS:
            word_ids.append(None)
            continue
        if not (token.startswith("##") and word_ids and word_ids[-1] is not None):
            word += 1
        word_ids.append(word)
    return word_ids


def _word_texts(tokens: Sequence[str], word_ids: Sequence[int | None]) -> list[str | None]:
    """The whole word each token belongs to ("coffee" + "##s" -> "coffees"), lower-cased."""
    pieces: dict[int, list[str]] = {}
    for token, word in zip(tokens, word_ids):
        if word is not None:
            pieces.setdefault(word, []).append(token.removeprefix("##"))
    return [None if w is None else "".join(pieces[w]).lower() for w in word_ids]


def target_masks(
    tokens: Sequence[str],
    word_ids: Sequence[int | None] | None = None,
    cls_token: str = "[CLS]",
    sep_token: str = "[SEP]",
) -> torch.Tensor:
    """Bool (P, L, L), one (L, L) mask per pattern of :data:`PATTERNS`: True where key j is a
    target of query i."""
    tokens = list(tokens)
    L = len(tokens)
    word_ids = word_ids_from_tokens(tokens) if word_ids is None else list(word_ids)
    if len(word_ids) != L:
        raise ValueError(f"got {len(word_ids)} word_ids for {L} tokens; give one per token")
    i = torch.arange(L).unsqueeze(1)  # queries, as a column
    j = torch.arange(L).unsqueeze(0)  # keys, as a row
    not_self = i != j
    words = _word_texts(tokens, word_ids)
    ids = torch.tensor([-1 if w is None else w for w in word_ids])
    same_piece_of_word = (ids.unsqueeze(1) == ids.unsqueeze(0)) & (ids.unsqueeze(1) >= 0)
    same_text = torch.tensor(
        [[a is not None and a == b for b in words] for a in words], dtype=torch.bool
    )
    masks = {
        "previous": j == i - 1,
        "next": j == i + 1,
        "self": i == j,
        "cls": torch.tensor([t == cls_token for t in tokens]).expand(L, L) & not_self,
        "sep": torch.tensor([t == sep_token for t in tokens]).expand(L, L) & not_self,
        "same_word": (same_piece_of_word | same_text) & not_self,
        "punctuation": torch.tensor([is_punctuation(t) for t in tokens]).expand(L, L) & not_self,
    }
    return torch.stack([masks[p] for p in PATTERNS])


# ---------------------------------------------------------------- scoring


class PatternTally:
    """Running sums over sentences: attention mass on targets, number of queries with a target,
    and the chance level, per (pattern, layer, head)."""

    def __init__(self) -> None:
        self.mass: torch.Tensor | None = None  # (P, layers, H), float64
        self.queries = torch.zeros(len(PATTERNS), dtype=torch.long)  # (P,)
        self.chance = torch.zeros(len(PATTERNS), dtype=torch.float64)  # (P,) sum of |targets| / L

    def add(
        self,
        weights: torch.Tensor,
        tokens: Sequence[str],
        word_ids: Sequence[int | None] | None = None,
    ) -> None:
        """Add one sentence: ``weights`` (layers, H, L, L) or (H, L, L), rows = queries."""
        require_tensor("weights", weights)
        if weights.dim() == 3:
            weights = weights.unsqueeze(0)
        if (
            weights.dim() != 4
            or weights.size(-1) != weights.size(-2)
            or weights.size(-1) != len(tokens)
        ):
            raise ValueError(
                f"weights must be (layers, H, L, L) with L = {len(tokens)} tokens, "
                f"got shape {shape_str(weights.shape)}"
            )
        masks = target_masks(tokens, word_ids)  # (P, L, L)
        has_target = masks.any(dim=-1)  # (P, L): queries that have at least one target
        on_targets = torch.einsum(
            "nhqk,pqk->pnhq", weights.double().cpu(), masks.double()
        )  # (P, layers, H, L)
        mass = (on_targets * has_target[:, None, None, :]).sum(dim=-1)  # (P, layers, H)
        if self.mass is None:
            self.mass = torch.zeros_like(mass)
        if self.mass.shape != mass.shape:
            raise ValueError(
                f"weights have {weights.size(0)} layers and {weights.size(1)} heads, "
                f"but earlier sentences had shape {tuple(self.mass.shape[1:])}"
            )
        self.mass += mass
        self.queries += has_target.sum(dim=-1)
        self.chance += masks.sum(dim=-1).double().sum(dim=-1) / len(tokens)

    def table(self) -> list[HeadScore]:
        """The tidy table: one :class:`HeadScore` per (pattern, layer, head); NaN scores for a
        pattern no query ever had a target for (e.g. ``same_word`` on sentences without repeats)."""
        if self.mass is None:
            raise ValueError("no sentences added yet")
        queries = self.queries.clamp(min=1).double()
        scores = self.mass / queries[:, None, None]
        chance = self.chance / queries
        rows = []
        for p, pattern in enumerate(PATTERNS):
            for layer in range(scores.size(1)):
                for head in range(scores.size(2)):
                    none = self.queries[p] == 0
                    rows.append(
                        HeadScore(
                            pattern,
                            layer,
                            head,
                            float("nan") if none else scores[p, layer, head].item(),
                            float("nan") if none else chance[p].item(),
                            int(self.queries[p]),
                        )
                    )
        return rows


def head_pattern_scores(samples: Iterable) -> list[HeadScore]:
    """The tidy table for ``samples``, each ``(weights (layers, H, L, L), tokens, word_ids)`` (or
    an object with those attributes, such as :class:`mha_course.pretrained.SentenceAttention`)."""
    tally = PatternTally()
    for sample in samples:
        if hasattr(sample, "weights"):
            sample = (sample.weights, sample.tokens, sample.word_ids)
        tally.add(*sample)
    return tally.table()


def measure_head_patterns(model, sentences: Sequence[str], batch_size: int = 16) -> list[HeadScore]:
    """Run ``model`` (from :func:`~mha_course.pretrained.load_minilm`) on ``sentences`` and score
    every head on every pattern."""
    from .pretrained import attention_maps

    return head_pattern_scores(attention_maps(model, sentences, batch_size=batch_size))


# ---------------------------------------------------------------- reading the table


def top_heads(table: Sequence[HeadScore], k: int = 3) -> dict[str, list[HeadScore]]:
    """The ``k`` highest-scoring heads of each pattern, best first."""
    require_positive_int("k", k)
    top = {}
    for pattern in PATTERNS:
        rows = [r for r in table if r.pattern == pattern and r.score == r.score]  # drop NaN
        top[pattern] = sorted(rows, key=lambda r: (-r.score, r.layer, r.head))[:k]
    return top


def score_grid(table: Sequence[HeadScore], pattern: str) -> torch.Tensor:
    """One pattern's scores as a (layers, H) tensor, for a heatmap."""
    if pattern not in PATTERNS:
        raise ValueError(f"pattern must be one of {PATTERNS}, got {pattern!r}")
    rows = [r for r in table if r.pattern == pattern]
    if not rows:
        raise ValueError("the table is empty")
    grid = torch.full((max(r.layer for r in rows) + 1, max(r.head for r in rows) + 1), float("nan"))
    for r in rows:
        grid[r.layer, r.head] = r.score
    return grid


def format_top_heads(top: dict[str, list[HeadScore]]) -> str:
    """A plain-text summary: per pattern, its chance level and the top heads with their scores."""
    lines = []
    for pattern, rows in top.items():
        if not rows:
            lines.append(f"{pattern:<12} no query had a target")
            continue
        heads = ", ".join(f"L{r.layer}H{r.head} {r.score:.2f}" for r in rows)
        lines.append(
            f"{pattern:<12} chance {rows[0].chance:.2f} | top: {heads}  ({DESCRIPTIONS[pattern]})"
        )
    return "\n".join(lines)
