"""Lesson 02's scoring of the toy task's heads: how much of each head's attention goes to the key
each job expects (the previous token, the next one, the partner)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..toy_tasks import JOBS, head_scores, paired_letters, partner_positions, targets_from_partner
from . import families
from ._core import exercise
from ._failure import ExerciseFailure
from ._table import Case, Out, Table, seeded_randn

__all__ = ["check_job_scores", "JOB_SCORES"]


def job_scores(weights, partner):
    """The reference: ``{job: (H,)}``, the weight each head puts on the job's key, averaged over the
    batch and the queries that have one: the package's head_scores on the jobs' targets."""
    return head_scores(weights, targets_from_partner(partner))


_DEFINITION = (
    "a job's score is the weight a head puts on the job's key (previous: i − 1, next: i + 1, "
    "partner: partner[b, i]), averaged over the batch and over the queries that have such a key"
)


def _on(w, offset: int = 0, partner=None, wrap: bool = False):
    """Each query's weight on its key i + offset (or on partner[b, i]): (B, H, L or fewer)."""
    if partner is not None:
        return w.gather(-1, partner[:, None, :, None].expand(*w.shape[:3], 1)).squeeze(-1)
    if wrap:  # the key index wraps round at the ends
        i = torch.arange(w.size(-1))
        return w[..., i, (i + offset) % w.size(-1)]
    return torch.diagonal(w, offset=offset, dim1=-2, dim2=-1)


_REDUCED = {  # (B, H, ·) weights on the jobs' keys -> one score per head, or not
    "summed": lambda t: t.sum(dim=(0, 2)),
    "averaged over the heads too": lambda t: t.mean(),
    "not averaged over the batch": lambda t: t.mean(-1),
    "divided by L": lambda t: t.sum(-1).mean(0) / (t.size(-1) + 1),  # L − 1 queries, over L
}


def _job_scores(flaw=""):
    """The job scores, with ``flaw`` switched on."""

    def job_scores(w, partner):
        wrap = flaw == "ends wrapped round"
        previous, next_ = _on(w, -1, wrap=wrap), _on(w, 1, wrap=wrap)
        if flaw == "previous and next swapped":
            previous, next_ = next_, previous
        on_partner = _on(w) if flaw == "each query's own key" else _on(w, partner=partner)
        reduce = _REDUCED.get(flaw, lambda t: t.mean(dim=(0, 2)))
        scores = {
            job: reduce(t) for job, t in zip(JOBS, (previous, next_, on_partner), strict=True)
        }
        return scores | ({"partner": on_partner.mean(dim=(0, 2))} if flaw == "divided by L" else {})

    return job_scores


_FLAWS = {
    "divided by L": "you averaged the previous and next scores over all L queries; query 0 has no "
    "previous key and query L − 1 no next one: average over the L − 1 that have one.",
    "ends wrapped round": "query 0's 'previous key' wrapped round to the last key (index −1, or "
    "torch.roll), the last query's 'next key' to key 0: those have no such key, leave them out.",
    "previous and next swapped": "previous and next are swapped: rows are queries and columns "
    "keys, so query i's previous key is in column i − 1 of row i, just below the main diagonal.",
    "summed": f"you summed over the queries and the batch; {_DEFINITION}.",
    "each query's own key": "the partner score is each query's weight on itself (the main "
    "diagonal); the partner of query i is the key partner[b, i], that column of row i.",
    "averaged over the heads too": "you averaged over the heads too; keep one score per head, "
    "(H,), and average over the batch and the queries only.",
    "not averaged over the batch": "you kept one score per sequence and head, (B, H); average over "
    "the batch too: one score per head, (H,).",
}


def _cases():
    randn, g = seeded_randn(22), torch.Generator().manual_seed(22)

    def partner(B, n_pairs):
        return partner_positions(paired_letters(B, n_pairs, generator=g))

    def weights(B, H, L):  # random attention weights: each row sums to 1 over the keys
        return (2 * randn(B, H, L, L)).softmax(dim=-1)

    def one_head_per_job(p):
        """(B, 3, L, L): one head on each job's key (a query without such a key on itself)."""
        (B, L), eye = p.shape, torch.eye(p.size(1))
        previous, next_ = eye.roll(-1, dims=1), eye.roll(1, dims=1)
        previous[0], next_[-1] = eye[0], eye[-1]
        heads = previous.expand(B, L, L), next_.expand(B, L, L), F.one_hot(p, L).float()
        return torch.stack(heads, 1)

    yield Case("weights (2, 3, 6, 6), 3 letters in both cases", (weights(2, 3, 6), partner(2, 3)))
    p = partner(2, 3)
    name = "one head per job, each always on its key: scores 1 on the diagonal"
    yield Case(name, (one_head_per_job(p), p))
    name = "a single sequence and head: weights (1, 1, 4, 4)"
    yield Case(name, (weights(1, 1, 4), partner(1, 2)))
    name = "float64, the lesson's size: weights (4, 8, 12, 12)"
    yield Case(name, (weights(4, 8, 12).double(), partner(4, 6)))


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
    mistakes=families.mistakes(_job_scores, _FLAWS, **_FLAWS),
    outputs=[
        Out(f"the {job!r} scores", job, _head_count, fallback=f"{_DEFINITION}.") for job in JOBS
    ],
    shape_checks=[_require_jobs],
    crash=f"{_DEFINITION}.",
)
todo = "Replace `raise NotImplementedError` with each head's score for each job, {job: (H,)}."
check_job_scores = exercise("job_scores", "02", reference=job_scores, todo=todo, table=JOB_SCORES)
