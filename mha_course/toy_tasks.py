"""The toy task of lesson 02, where a one-layer model can only succeed if its heads divide the work.

Each sequence holds ``n_pairs`` different letters, each once in lower case and once in upper case,
shuffled: like brackets whose opening and closing halves are somewhere in the sequence. At every
position a model must name

    previous   the token just before it
    next       the token just after it
    partner    the position of the same letter in the other case

Tokens are integers: token ``t < n_letters`` is a lower-case letter and ``t + n_letters`` is its
upper-case partner; :data:`ALPHABET` spells them. Everything here is a pure function of tensors.
"""

from __future__ import annotations

import torch

from ._validate import require_positive_int, require_tensor, shape_str

__all__ = [
    "LETTERS",
    "ALPHABET",
    "JOBS",
    "paired_letters",
    "partner_positions",
    "job_targets",
    "targets_from_partner",
    "head_scores",
    "format_scores",
]

# Twelve letters whose two cases look different in any font: no i/I/l, o/O, c/C, s/S, ...
LETTERS = "abdefghnqrty"
ALPHABET = list(LETTERS) + list(LETTERS.upper())  # token t -> its letter; t and t + 12 are partners
JOBS = ("previous", "next", "partner")


def paired_letters(
    batch_size: int,
    n_pairs: int = 6,
    n_letters: int = len(LETTERS),
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """A batch of sequences, (B, 2·n_pairs) int64: ``n_pairs`` different letters drawn from
    ``n_letters``, each once in lower case (token t) and once in upper case (token t + n_letters),
    in a random order. The same ``generator`` state gives the same batch."""
    require_positive_int("batch_size", batch_size)
    require_positive_int("n_pairs", n_pairs)
    require_positive_int("n_letters", n_letters)
    if n_pairs > n_letters:
        raise ValueError(
            f"n_pairs ({n_pairs}) must be at most n_letters ({n_letters}): the letters differ"
        )
    # a random permutation per row is the argsort of random numbers; keep its first n_pairs letters
    letters = torch.rand(batch_size, n_letters, generator=generator).argsort(-1)[:, :n_pairs]
    tokens = torch.cat([letters, letters + n_letters], dim=1)  # (B, 2·n_pairs), lower then upper
    order = torch.rand(batch_size, 2 * n_pairs, generator=generator).argsort(-1)  # shuffle each row
    return tokens.gather(1, order)


def _same_letter_elsewhere(tokens: torch.Tensor, n_letters: int) -> torch.Tensor:
    """(B, L, L) bool: True where key j holds the letter of query i, in the other position."""
    letter = tokens % n_letters  # (B, L)
    L = tokens.size(1)
    not_self = ~torch.eye(L, dtype=torch.bool, device=tokens.device)
    return (letter[:, :, None] == letter[:, None, :]) & not_self


def _require_tokens(tokens) -> None:
    require_tensor("tokens", tokens)
    if tokens.dim() != 2 or tokens.is_floating_point():
        raise ValueError(
            f"tokens must be (B, L) integers, got {tokens.dtype} of shape {shape_str(tokens.shape)}"
        )


def partner_positions(tokens: torch.Tensor, n_letters: int = len(LETTERS)) -> torch.Tensor:
    """(B, L) int64: for each position, the position of its partner (same letter, other case).

    ``tokens`` is (B, L) as :func:`paired_letters` makes them: every letter exactly twice."""
    _require_tokens(tokens)
    partner = _same_letter_elsewhere(tokens, n_letters)
    if not bool((partner.sum(-1) == 1).all()):
        raise ValueError("every letter must occur exactly twice in each sequence (once per case)")
    return partner.int().argmax(-1)


def job_targets(tokens: torch.Tensor, n_letters: int = len(LETTERS)) -> dict[str, torch.Tensor]:
    """The expected key of each job, as masks: ``{"previous", "next", "partner"}`` -> (B, L, L) bool,
    True where key j is query i's target. The first query has no previous key, the last no next."""
    _require_tokens(tokens)
    return _with_neighbours(_same_letter_elsewhere(tokens, n_letters))


def _with_neighbours(partner: torch.Tensor) -> dict[str, torch.Tensor]:
    """The three jobs' targets, given the partner job's (B, L, L) mask."""
    B, L, _ = partner.shape
    i = torch.arange(L, device=partner.device)[:, None]  # queries, as a column
    j = torch.arange(L, device=partner.device)[None, :]  # keys, as a row
    return {
        "previous": (j == i - 1).expand(B, L, L),
        "next": (j == i + 1).expand(B, L, L),
        "partner": partner,
    }


def targets_from_partner(partner: torch.Tensor) -> dict[str, torch.Tensor]:
    """:func:`job_targets` from the partners' positions, (B, L) as :func:`partner_positions` gives
    them, rather than from the tokens: ``{job: (B, L, L) bool}``."""
    require_tensor("partner", partner)
    if partner.dim() != 2 or partner.is_floating_point():
        raise ValueError(
            f"partner must be (B, L) integers, got {partner.dtype} of shape {shape_str(partner.shape)}"
        )
    L = partner.size(1)
    keys = torch.arange(L, device=partner.device)
    return _with_neighbours(keys == partner[:, :, None])


def head_scores(weights: torch.Tensor, targets: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """How much each head does each job: ``{job: (H,)}``, the attention mass a head puts on the
    job's target keys, averaged over the batch and over every query that has a target.

    ``weights`` is (B, H, L, S), per head, rows summing to 1; ``targets`` maps a job to a (B, L, S)
    bool mask (see :func:`job_targets`). 1.0: the head always looks there and nowhere else; a head
    that spreads its attention evenly over S keys scores (number of targets) / S."""
    require_tensor("weights", weights)
    if weights.dim() != 4:
        raise ValueError(f"weights must be (B, H, L, S), got shape {shape_str(weights.shape)}")
    scores = {}
    for job, target in targets.items():
        if target.shape != weights.shape[:1] + weights.shape[2:]:
            raise ValueError(
                f"targets[{job!r}] has shape {shape_str(target.shape)}, expected (B, L, S) = "
                f"{shape_str(weights.shape[:1] + weights.shape[2:])} to match weights"
            )
        mass = (weights * target[:, None].to(weights.dtype)).sum(-1)  # (B, H, L)
        has_target = target.any(-1)  # (B, L)
        scores[job] = mass.transpose(0, 1)[:, has_target].mean(-1)  # (H,)
    return scores


def format_scores(scores: dict[str, torch.Tensor], chance: float | None = None) -> str:
    """A table, one row per head (numbered from 0) and one column per job, two decimals;
    with ``chance``, a last row with the score of a head that spreads its attention evenly."""
    names = list(scores)
    lines = ["head" + "".join(f"{name:>10}" for name in names)]
    for i in range(len(scores[names[0]])):
        lines.append(f"{i:>4}" + "".join(f"{float(scores[name][i]):>10.2f}" for name in names))
    if chance is not None:
        lines.append("chance" + f"{chance:>8.2f}" + f"{chance:>10.2f}" * (len(names) - 1))
    return "\n".join(lines)
