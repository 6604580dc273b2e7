"""The toy task of lesson 02: the sequences are what they claim to be, and the head scores are
what their definition says, checked on attention weights whose answers are known and against a
brute-force loop."""

import pytest
import torch

from mha_course.toy_tasks import (
    ALPHABET,
    JOBS,
    LETTERS,
    format_scores,
    head_scores,
    job_targets,
    paired_letters,
    partner_positions,
    targets_from_partner,
)


def test_alphabet_pairs_each_letter_with_its_upper_case():
    n = len(LETTERS)
    assert len(ALPHABET) == 2 * n and len(set(ALPHABET)) == 2 * n
    assert all(ALPHABET[t + n] == ALPHABET[t].upper() for t in range(n))
    assert not set("iIlLoO") & set(ALPHABET)  # letters that are easy to misread are left out


def test_paired_letters_holds_each_chosen_letter_once_in_each_case():
    tokens = paired_letters(50, n_pairs=6, generator=torch.Generator().manual_seed(0))
    assert tokens.shape == (50, 12) and tokens.dtype == torch.int64
    for row in tokens.tolist():
        lower = sorted(t for t in row if t < 12)
        upper = sorted(t - 12 for t in row if t >= 12)
        assert lower == upper and len(set(lower)) == 6  # 6 different letters, each in both cases


def test_paired_letters_is_shuffled_and_reproducible():
    first = paired_letters(200, generator=torch.Generator().manual_seed(1))
    again = paired_letters(200, generator=torch.Generator().manual_seed(1))
    assert torch.equal(first, again)
    assert not torch.equal(first, paired_letters(200, generator=torch.Generator().manual_seed(2)))
    # not "lower cases first": some upper-case letter comes before its lower case
    assert (first[:, 0] >= 12).any() and (first[:, -1] < 12).any()


def test_paired_letters_rejects_more_pairs_than_letters():
    with pytest.raises(ValueError, match="n_pairs"):
        paired_letters(2, n_pairs=13)
    with pytest.raises(ValueError, match="batch_size"):
        paired_letters(0)


def test_partner_positions_points_at_the_same_letter_in_the_other_case():
    tokens = torch.tensor([[0, 13, 12, 1], [5, 2, 17, 14]])  # a B A b | f c F C  (12 letters)
    assert partner_positions(tokens).tolist() == [[2, 3, 0, 1], [2, 3, 0, 1]]
    tokens = paired_letters(20, generator=torch.Generator().manual_seed(3))
    partner = partner_positions(tokens)
    assert torch.equal(tokens.gather(1, partner), (tokens + 12) % 24)  # the other case
    assert torch.equal(partner.gather(1, partner), torch.arange(12).expand(20, 12))  # an involution


def test_partner_positions_rejects_a_letter_that_is_not_paired():
    with pytest.raises(ValueError, match="exactly twice"):
        partner_positions(torch.tensor([[0, 12, 1, 2]]))
    with pytest.raises(ValueError, match="integers"):
        partner_positions(torch.zeros(1, 4))


def test_job_targets_mark_the_neighbours_and_the_partner():
    tokens = torch.tensor([[0, 13, 12, 1]])
    targets = job_targets(tokens)
    assert tuple(targets) == JOBS
    assert all(t.shape == (1, 4, 4) and t.dtype == torch.bool for t in targets.values())
    assert targets["previous"][0].nonzero().tolist() == [[1, 0], [2, 1], [3, 2]]  # (query, key)
    assert targets["next"][0].nonzero().tolist() == [[0, 1], [1, 2], [2, 3]]
    assert targets["partner"][0].nonzero().tolist() == [[0, 2], [1, 3], [2, 0], [3, 1]]


def test_targets_from_the_partners_positions_are_the_jobs_targets():
    tokens = paired_letters(6, n_pairs=4, generator=torch.Generator().manual_seed(7))
    expected, got = job_targets(tokens), targets_from_partner(partner_positions(tokens))
    assert tuple(got) == JOBS and all(torch.equal(got[job], expected[job]) for job in JOBS)
    with pytest.raises(ValueError, match="partner must be"):
        targets_from_partner(torch.zeros(2, 3))


def brute_force(weights, targets):
    """The score as its definition says: per head, a loop over sequences and queries that have a
    target, summing the weights on the target keys."""
    B, H, L, S = weights.shape
    out = {}
    for job, target in targets.items():
        scores = []
        for h in range(H):
            masses = [
                sum(weights[b, h, i, j].item() for j in range(S) if target[b, i, j])
                for b in range(B)
                for i in range(L)
                if target[b, i].any()
            ]
            scores.append(sum(masses) / len(masses))
        out[job] = torch.tensor(scores, dtype=weights.dtype)
    return out


def test_head_scores_on_heads_whose_answer_is_known():
    tokens = paired_letters(4, generator=torch.Generator().manual_seed(4))  # (4, 12)
    targets = job_targets(tokens)
    L = 12
    eye = torch.eye(L, dtype=torch.float64)
    previous_head = eye.roll(-1, dims=1).expand(4, L, L)  # query i -> key i-1 (query 0 -> key 11)
    next_head = eye.roll(1, dims=1).expand(4, L, L)  # query i -> key i+1
    partner_head = torch.nn.functional.one_hot(partner_positions(tokens), L).double()
    uniform_head = torch.full((4, L, L), 1 / L, dtype=torch.float64)
    # (B, 4 heads, L, L): one head per job, then one that spreads its attention evenly
    weights = torch.stack([previous_head, next_head, partner_head, uniform_head], dim=1)
    scores = head_scores(weights, targets)
    one_and_chance = torch.tensor([1.0, 1 / L], dtype=torch.float64)
    assert torch.allclose(scores["previous"][[0, 3]], one_and_chance)
    assert torch.allclose(scores["next"][[1, 3]], one_and_chance)
    assert torch.allclose(scores["partner"][[2, 3]], one_and_chance)
    # each head does only its own job
    assert scores["partner"][0] < 0.5 and scores["previous"][1] == 0


def test_head_scores_match_the_brute_force_definition():
    tokens = paired_letters(3, n_pairs=3, n_letters=5, generator=torch.Generator().manual_seed(5))
    weights = torch.rand(3, 2, 6, 6, generator=torch.Generator().manual_seed(6)).softmax(-1)
    targets = job_targets(tokens, n_letters=5)
    got, expected = head_scores(weights, targets), brute_force(weights, targets)
    assert all(torch.allclose(got[job], expected[job], atol=1e-6) for job in JOBS)


def test_head_scores_rejects_targets_that_do_not_fit():
    with pytest.raises(ValueError, match=r"\(B, H, L, S\)"):
        head_scores(torch.rand(2, 6, 6), {"next": torch.zeros(2, 6, 6, dtype=torch.bool)})
    with pytest.raises(ValueError, match="targets\\['next'\\]"):
        head_scores(torch.rand(2, 1, 6, 6), {"next": torch.zeros(2, 5, 5, dtype=torch.bool)})


def test_format_scores_is_one_row_per_head_and_a_chance_row():
    scores = {"previous": torch.tensor([0.912, 0.1]), "next": torch.tensor([0.05, 1.0])}
    table = format_scores(scores, chance=1 / 12).splitlines()
    assert table[0].split() == ["head", "previous", "next"]
    assert table[1].split() == ["0", "0.91", "0.05"] and table[2].split() == ["1", "0.10", "1.00"]
    assert table[3].split() == ["chance", "0.08", "0.08"]
    assert len({len(line) for line in table}) == 1  # the columns line up
    assert len(format_scores(scores).splitlines()) == 3
