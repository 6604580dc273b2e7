"""Checker for lesson 02's scoring of the toy task: how much of each head's attention goes to the
key each job expects (the previous token, the next one, the partner)."""

from __future__ import annotations

import torch

from .. import reference
from ..toy_tasks import JOBS, paired_letters, partner_positions
from ._core import Mistake, checker
from ._failure import ExerciseFailure
from ._steps import call_diagnosed, randn, require_tensor

__all__ = ["check_job_scores"]

_DEFINITION = (
    "a job's score is the weight a head puts on the job's key (previous: i − 1, next: i + 1, "
    "partner: partner[b, i]), averaged over the batch and over the queries that have such a key"
)


def _diagonal(w: torch.Tensor, offset: int) -> torch.Tensor:
    return torch.diagonal(w, offset=offset, dim1=-2, dim2=-1)  # (B, H, L - |offset|)


def _on_partner(w: torch.Tensor, partner: torch.Tensor) -> torch.Tensor:
    index = partner[:, None, :, None].expand(w.size(0), w.size(1), -1, 1)
    return w.gather(-1, index).squeeze(-1)  # (B, H, L)


def _scores(previous, next_, on_partner, reduce) -> dict[str, torch.Tensor]:
    return {job: reduce(t) for job, t in zip(JOBS, (previous, next_, on_partner), strict=True)}


def _per_head(t: torch.Tensor) -> torch.Tensor:
    return t.mean(dim=(0, 2))


def _mistake(run):
    """One job's part of a wrong version of the whole dict."""
    return lambda job: lambda w, partner: run(w, partner)[job]


def _wrapped(w: torch.Tensor, offset: int) -> torch.Tensor:
    """w[..., i, i + offset] for every query i, the key index wrapping round at the ends."""
    i = torch.arange(w.size(-1))
    return w[..., i, (i + offset) % w.size(-1)]


_WRONG = [
    (
        "divided by L",
        lambda w, p: _scores(
            _diagonal(w, -1).sum(-1) / w.size(-1),
            _diagonal(w, 1).sum(-1) / w.size(-1),
            _on_partner(w, p),
            lambda t: t.mean(0) if t.dim() == 2 else _per_head(t),
        ),
        "you averaged the previous and next scores over all L queries, but query 0 has no "
        "previous key and query L − 1 no next one: average over the L − 1 queries that have "
        "one.",
    ),
    (
        "ends wrapped round",
        lambda w, p: _scores(_wrapped(w, -1), _wrapped(w, 1), _on_partner(w, p), _per_head),
        "query 0's 'previous key' wrapped round to the last key (index −1, or torch.roll), and "
        "the last query's 'next key' to key 0. Those queries have no such key: leave them out "
        "of the average.",
    ),
    (
        "previous and next swapped",
        lambda w, p: _scores(_diagonal(w, 1), _diagonal(w, -1), _on_partner(w, p), _per_head),
        "previous and next are swapped: rows are queries and columns keys, so query i's previous "
        "key is weights[..., i, i − 1], just below the main diagonal.",
    ),
    (
        "summed",
        lambda w, p: _scores(
            _diagonal(w, -1), _diagonal(w, 1), _on_partner(w, p), lambda t: t.sum(dim=(0, 2))
        ),
        f"you summed over the queries and the batch; {_DEFINITION}.",
    ),
    (
        "each query's own key",
        lambda w, p: _scores(_diagonal(w, -1), _diagonal(w, 1), _diagonal(w, 0), _per_head),
        "the partner score is each query's weight on itself (the main diagonal). The partner of "
        "query i is the key at position partner[b, i]: pick that column of row i.",
    ),
    (
        "averaged over the heads too",
        lambda w, p: _scores(
            _diagonal(w, -1), _diagonal(w, 1), _on_partner(w, p), lambda t: t.mean()
        ),
        "you averaged over the heads too; keep one score per head, (H,), and average over the "
        "batch and the queries only.",
    ),
    (
        "not averaged over the batch",
        lambda w, p: _scores(
            _diagonal(w, -1), _diagonal(w, 1), _on_partner(w, p), lambda t: t.mean(-1)
        ),
        "you kept one score per sequence and head, (B, H); average over the batch too: one "
        "score per head, (H,).",
    ),
]


def _mistakes(job: str) -> list[Mistake]:
    return [Mistake(name, _mistake(run)(job), why) for name, run, why in _WRONG]


def _weights(g, B, H, L, dtype=torch.float32):
    """Random attention weights, (B, H, L, L): each row sums to 1 over the keys."""
    e = (2 * randn(g, B, H, L, L, dtype=dtype)).exp()
    return e / e.sum(dim=-1, keepdim=True)


def _one_head_per_job(partner: torch.Tensor) -> torch.Tensor:
    """(B, 3, L, L): head 0 on the previous key, head 1 on the next, head 2 on the partner (a
    query without such a key on itself)."""
    B, L = partner.shape
    eye = torch.eye(L)
    previous = eye.roll(-1, dims=1)
    previous[0] = eye[0]
    next_ = eye.roll(1, dims=1)
    next_[-1] = eye[-1]
    on_partner = torch.nn.functional.one_hot(partner, L).float()
    return torch.stack([previous.expand(B, L, L), next_.expand(B, L, L), on_partner], dim=1)


def _cases():
    g = torch.Generator().manual_seed(22)

    def partner(B, n_pairs):
        return partner_positions(paired_letters(B, n_pairs, generator=g))

    p = partner(2, 3)
    yield "weights (2, 3, 6, 6), 3 letters in both cases", _weights(g, 2, 3, 6), p
    p = partner(2, 3)
    yield (
        "one head per job, each always on its key: scores 1 on the diagonal",
        _one_head_per_job(p),
        p,
    )
    p = partner(1, 2)
    yield "a single sequence and head: weights (1, 1, 4, 4)", _weights(g, 1, 1, 4), p
    p = partner(4, 6)
    yield (
        "float64, the lesson's size: weights (4, 8, 12, 12)",
        _weights(g, 4, 8, 12, dtype=torch.float64),
        p,
    )


def _require_jobs(case: str, got) -> None:
    if not isinstance(got, dict):
        raise ExerciseFailure(
            f"Case {case!r}: return a dict {{job: (H,) tensor}}, got {type(got).__name__}."
        )
    if set(got) != set(JOBS):
        raise ExerciseFailure(
            f"Case {case!r}: the dict's keys are {sorted(got)}, expected {list(JOBS)}."
        )


@checker(
    "job_scores",
    "Replace `raise NotImplementedError` with each head's score for each job, {job: (H,)}.",
)
def check_job_scores(candidate) -> int:
    """Check ``candidate(weights (B, H, L, L), partner (B, L)) -> {job: (H,)}`` against the
    reference, naming the classic mistakes."""
    n = 0
    for case, weights, partner in _cases():
        args = (weights, partner)
        got = call_diagnosed(candidate, case, args, crash_hint=f"{_DEFINITION}.")
        _require_jobs(case, got)
        expected = reference.job_scores(*args)
        for job in JOBS:
            require_tensor(
                case,
                f"the {job!r} scores",
                got[job],
                expected[job],
                _mistakes(job),
                args,
                shape_hint=f"one score per head: (H,) = ({weights.size(1)},).",
                fallback_cause=f"{_DEFINITION}.",
            )
        n += 1
    return n
