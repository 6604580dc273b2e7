"""check_job_scores (lesson 02) accepts every correct style and names each classic mistake."""

import pytest
import torch

from mha_course import reference
from mha_course.checks import check_job_scores
from mha_course.toy_tasks import head_scores, job_targets, paired_letters, partner_positions

from checker_helpers import fails_with, not_done, passes, skeleton


def diagonals_and_gather(weights, partner):
    """The lesson's answer."""
    previous = weights.diagonal(offset=-1, dim1=-2, dim2=-1)
    next_ = weights.diagonal(offset=1, dim1=-2, dim2=-1)
    B, H, L, _ = weights.shape
    index = partner[:, None, :, None].expand(B, H, L, 1)
    on_partner = weights.gather(-1, index).squeeze(-1)
    return {
        "previous": previous.mean(dim=(0, 2)),
        "next": next_.mean(dim=(0, 2)),
        "partner": on_partner.mean(dim=(0, 2)),
    }


def masks(weights, partner):
    """A bool mask of the expected keys per job, the weights summed under it."""
    B, H, L, S = weights.shape
    i, j = torch.arange(L)[:, None], torch.arange(S)[None, :]
    targets = {
        "previous": (j == i - 1).expand(B, L, S),
        "next": (j == i + 1).expand(B, L, S),
        "partner": j == partner[:, :, None],
    }
    scores = {}
    for job, target in targets.items():
        mass = (weights * target[:, None]).sum(-1)  # (B, H, L)
        scores[job] = mass[:, :, target.any(-1)[0]].mean(dim=(0, 2))
    return scores


def loops(weights, partner):
    """Plain loops over the sequences and the queries."""
    B, H, L, _ = weights.shape
    totals = {job: torch.zeros(H, dtype=weights.dtype) for job in ("previous", "next", "partner")}
    for b in range(B):
        for i in range(L):
            if i > 0:
                totals["previous"] += weights[b, :, i, i - 1]
            if i < L - 1:
                totals["next"] += weights[b, :, i, i + 1]
            totals["partner"] += weights[b, :, i, partner[b, i]]
    counts = {"previous": B * (L - 1), "next": B * (L - 1), "partner": B * L}
    return {job: total / counts[job] for job, total in totals.items()}


@pytest.mark.parametrize(
    "candidate",
    [reference.job_scores, diagonals_and_gather, masks, loops],
    ids=lambda f: f.__name__,
)
def test_accepts_every_correct_style(candidate, capsys):
    out = passes(check_job_scores, candidate, capsys)
    assert out.startswith("✅ job_scores: all 4 cases"), out


@pytest.mark.parametrize("mistake", check_job_scores.table.mistakes, ids=lambda m: m.name)
def test_names_each_classic_mistake(mistake):
    message = fails_with(check_job_scores, mistake.run, "Likely cause", mistake.explanation)
    assert message.count("Likely cause") == 1


def test_the_classic_mistakes_as_a_learner_writes_them():
    def wrapped(weights, partner):  # torch.roll: query 0's previous key is the last one
        scores = diagonals_and_gather(weights, partner)
        L = weights.size(-1)
        i = torch.arange(L)
        scores["previous"] = weights[..., i, (i - 1) % L].mean(dim=(0, 2))
        return scores

    def divided_by_L(weights, partner):
        scores = diagonals_and_gather(weights, partner)
        L = weights.size(-1)
        for job, offset in (("previous", -1), ("next", 1)):
            on_key = weights.diagonal(offset=offset, dim1=-2, dim2=-1)
            scores[job] = on_key.sum(-1).mean(0) / L
        return scores

    fails_with(check_job_scores, wrapped, "Likely cause", "wrapped round")
    fails_with(check_job_scores, divided_by_L, "Likely cause", "over all L queries")


def test_the_jobs_come_as_a_dict_with_the_three_names():
    fails_with(check_job_scores, lambda w, p: list(reference.job_scores(w, p).values()), "dict")
    fails_with(
        check_job_scores,
        lambda w, p: dict(zip(("prev", "next", "partner"), reference.job_scores(w, p).values())),
        "keys are ['next', 'partner', 'prev']",
    )


def test_unsolved_skeleton_is_not_done_yet(capsys):
    not_done(check_job_scores, skeleton, capsys)


def test_the_reference_is_the_packages_head_scores_on_the_jobs_targets():
    tokens = paired_letters(5, generator=torch.Generator().manual_seed(0))
    weights = torch.rand(5, 3, 12, 12).softmax(-1)
    expected = head_scores(weights, job_targets(tokens))
    got = reference.job_scores(weights, partner_positions(tokens))
    assert all(torch.allclose(got[job], expected[job]) for job in expected)
