"""Lesson 02's scoring of the toy task's heads: how much of each head's attention goes to the key
each job expects (the previous token, the next one, the partner)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..toy_tasks import JOBS, head_scores, paired_letters, partner_positions, targets_from_partner
from ._core import Mistake, exercise
from ._failure import ExerciseFailure
from ._table import Case, Out, Table, seeded_randn

__all__ = ["check_job_scores", "JOB_SCORES"]


def job_scores(weights, partner):
    """The reference: ``{job: (H,)}``, the weight each head puts on the job's key (previous: i − 1,
    next: i + 1, partner: partner[b, i]), averaged over the batch and the queries that have one;
    the package's head_scores on the jobs' targets."""
    return head_scores(weights, targets_from_partner(partner))


_DEFINITION = (
    "a job's score is the weight a head puts on the job's key (previous: i − 1, next: i + 1, "
    "partner: partner[b, i]), averaged over the batch and over the queries that have such a key"
)


def _scores(previous, next_, partner, reduce=lambda t: t.mean(dim=(0, 2))):
    """Three (B, H, ·) tensors of weights on the jobs' keys, reduced to one score per head."""
    return {job: reduce(t) for job, t in zip(JOBS, (previous, next_, partner), strict=True)}


def _on(w, offset: int = 0, partner=None, wrap: bool = False):
    """Each query's weight on its key i + offset (or on partner[b, i]): (B, H, L or fewer)."""
    if partner is not None:
        return w.gather(-1, partner[:, None, :, None].expand(*w.shape[:3], 1)).squeeze(-1)
    if wrap:  # the key index wraps round at the ends
        i = torch.arange(w.size(-1))
        return w[..., i, (i + offset) % w.size(-1)]
    return torch.diagonal(w, offset=offset, dim1=-2, dim2=-1)


def _over_L(t):
    """(B, H, L − 1) -> (H,): summed over the L − 1 queries that have the key, divided by L."""
    return t.sum(-1).mean(0) / (t.size(-1) + 1)


MISTAKES = [
    Mistake(
        "divided by L",
        lambda w, p: (
            _scores(_on(w, -1), _on(w, 1), _on(w, partner=p), _over_L)
            | {"partner": _on(w, partner=p).mean(dim=(0, 2))}
        ),
        "you averaged the previous and next scores over all L queries, but query 0 has no "
        "previous key and query L − 1 no next one: average over the L − 1 queries that have one.",
    ),
    Mistake(
        "ends wrapped round",
        lambda w, p: _scores(_on(w, -1, wrap=True), _on(w, 1, wrap=True), _on(w, partner=p)),
        "query 0's 'previous key' wrapped round to the last key (index −1, or torch.roll), and the "
        "last query's 'next key' to key 0. Those queries have no such key: leave them out of the "
        "average.",
    ),
    Mistake(
        "previous and next swapped",
        lambda w, p: _scores(_on(w, 1), _on(w, -1), _on(w, partner=p)),
        "previous and next are swapped: rows are queries and columns keys, so query i's previous "
        "key is in column i − 1 of row i, just below the main diagonal.",
    ),
    Mistake(
        "summed",
        lambda w, p: _scores(_on(w, -1), _on(w, 1), _on(w, partner=p), lambda t: t.sum(dim=(0, 2))),
        f"you summed over the queries and the batch; {_DEFINITION}.",
    ),
    Mistake(
        "each query's own key",
        lambda w, p: _scores(_on(w, -1), _on(w, 1), _on(w)),
        "the partner score is each query's weight on itself (the main diagonal). The partner of "
        "query i is the key at position partner[b, i]: that column of row i.",
    ),
    Mistake(
        "averaged over the heads too",
        lambda w, p: _scores(_on(w, -1), _on(w, 1), _on(w, partner=p), lambda t: t.mean()),
        "you averaged over the heads too; keep one score per head, (H,), and average over the "
        "batch and the queries only.",
    ),
    Mistake(
        "not averaged over the batch",
        lambda w, p: _scores(_on(w, -1), _on(w, 1), _on(w, partner=p), lambda t: t.mean(-1)),
        "you kept one score per sequence and head, (B, H); average over the batch too: one score "
        "per head, (H,).",
    ),
]


def _weights(randn, B, H, L):
    """Random attention weights, (B, H, L, L): each row sums to 1 over the keys."""
    return (2 * randn(B, H, L, L)).softmax(dim=-1)


def _one_head_per_job(partner: torch.Tensor) -> torch.Tensor:
    """(B, 3, L, L): head 0 on the previous key, head 1 on the next, head 2 on the partner (a
    query without such a key on itself)."""
    B, L = partner.shape
    eye = torch.eye(L)
    previous, next_ = eye.roll(-1, dims=1), eye.roll(1, dims=1)
    previous[0], next_[-1] = eye[0], eye[-1]
    return torch.stack(
        [previous.expand(B, L, L), next_.expand(B, L, L), F.one_hot(partner, L).float()], 1
    )


def _cases():
    randn, g = seeded_randn(22), torch.Generator().manual_seed(22)

    def partner(B, n_pairs):
        return partner_positions(paired_letters(B, n_pairs, generator=g))

    p = partner(2, 3)
    yield Case("weights (2, 3, 6, 6), 3 letters in both cases", (_weights(randn, 2, 3, 6), p))
    p = partner(2, 3)
    name = "one head per job, each always on its key: scores 1 on the diagonal"
    yield Case(name, (_one_head_per_job(p), p))
    p = partner(1, 2)
    yield Case("a single sequence and head: weights (1, 1, 4, 4)", (_weights(randn, 1, 1, 4), p))
    p = partner(4, 6)
    name = "float64, the lesson's size: weights (4, 8, 12, 12)"
    yield Case(name, (_weights(randn, 4, 8, 12).double(), p))


def _require_jobs(case: Case, got, expected) -> None:
    if not isinstance(got, dict):
        raise ExerciseFailure(
            f"Case {case.name!r}: the result should be a dict {{job: (H,) tensor}}, got "
            f"{type(got).__name__}."
        )
    if set(got) != set(JOBS):
        raise ExerciseFailure(
            f"Case {case.name!r}: the dict's keys are {sorted(got)}, expected {list(JOBS)}."
        )


def _head_count(got, case: Case) -> str:
    return f"one score per head: (H,) = ({case.args[0].size(1)},)."


JOB_SCORES = Table(
    cases=_cases,
    reference=job_scores,
    mistakes=MISTAKES,
    outputs=[
        Out(f"the {job!r} scores", job, _head_count, fallback=f"{_DEFINITION}.") for job in JOBS
    ],
    shape_checks=[_require_jobs],
    crash=f"{_DEFINITION}.",
)
check_job_scores = exercise(
    "job_scores",
    "02",
    reference=job_scores,
    todo="Replace `raise NotImplementedError` with each head's score for each job, {job: (H,)}.",
    table=JOB_SCORES,
)
