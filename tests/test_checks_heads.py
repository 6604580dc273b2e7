"""The checkers of the head split and merge accept every correct style and name the classic
mistakes. Lesson 02 folds both into its MultiHeadAttention exercise; they stay public."""

import pytest
import torch
from einops import rearrange

from mha_course import reference
from mha_course.checks import check_merge_heads, check_split_heads

from checker_helpers import fails_with, not_done, passes, skeleton

# ---------------------------------------------------------------- split_heads


def split_view(x, num_heads):
    B, L, E = x.shape
    return x.view(B, L, num_heads, E // num_heads).transpose(1, 2)


def split_loop(x, num_heads):
    D = x.size(-1) // num_heads
    return torch.stack([x[..., h * D : (h + 1) * D] for h in range(num_heads)], dim=1)


@pytest.mark.parametrize(
    "candidate",
    [
        reference.split_heads,
        split_view,
        lambda x, h: x.reshape(*x.shape[:2], h, -1).permute(0, 2, 1, 3),
        lambda x, h: torch.stack(x.chunk(h, dim=-1), dim=1),
        split_loop,
    ],
)
def test_split_heads_accepts_every_correct_style(candidate, capsys):
    passes(check_split_heads, candidate, capsys)


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (lambda x, h: x.view(x.size(0), h, x.size(1), -1), "x.view(B, H, L, D) cuts the tensor"),
        (lambda x, h: x.view(*x.shape[:2], h, -1), "did not move the heads axis"),
        (lambda x, h: rearrange(x, "b l (d h) -> b h l d", h=h), "every H-th feature"),
    ],
)
def test_split_heads_names_each_mistake(candidate, phrase):
    fails_with(check_split_heads, candidate, "Likely cause", phrase)


def test_split_heads_a_notebook_global_number_of_heads_is_caught():
    h = 2  # what a learner's notebook defines

    fails_with(
        check_split_heads,
        lambda x, num_heads: split_view(x, h),
        "Case 'x (2, 5, 12), 3 heads",
        "your result has 2 heads, but num_heads = 3 here",
        "D = E // num_heads = 4",
    )


def test_split_heads_a_crash_says_where_sizes_come_from(capsys):
    B = 2  # from the notebook: a crash on the case with one sentence

    fails_with(
        check_split_heads,
        lambda x, h: x.view(B, x.size(1), h, -1).transpose(1, 2),
        "Case 'one sentence",
        "RuntimeError",
        "never from the notebook",
    )
    not_done(check_split_heads, skeleton, capsys)


# ---------------------------------------------------------------- merge_heads


@pytest.mark.parametrize(
    "candidate",
    [
        reference.merge_heads,
        lambda x: x.transpose(1, 2).reshape(x.size(0), x.size(2), -1),
        lambda x: x.transpose(1, 2).contiguous().view(x.size(0), x.size(2), -1),
        lambda x: x.permute(0, 2, 1, 3).flatten(2),
        lambda x: torch.cat(x.unbind(dim=1), dim=-1),  # Concat(head_1, ..., head_h)
    ],
)
def test_merge_heads_accepts_every_correct_style(candidate, capsys):
    passes(check_merge_heads, candidate, capsys)


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (lambda x: x.reshape(x.size(0), x.size(2), -1), "without moving the heads axis back"),
        (lambda x: rearrange(x, "b h l d -> b l (d h)"), "you interleaved the heads' features"),
        (lambda x: rearrange(x, "b h l d -> b (h l) d"), "you stacked the heads along the tokens"),
        (lambda x: x.transpose(1, 2), "did not merge it with the features"),
        (
            lambda x: x.transpose(1, 2).view(x.size(0), x.size(2), -1),
            "view cannot merge the axes of a transposed tensor",
        ),
    ],
)
def test_merge_heads_names_each_mistake(candidate, phrase):
    fails_with(check_merge_heads, candidate, "Likely cause", phrase)


def test_merge_heads_inverts_split_heads_and_not_done(capsys):
    x = torch.randn(2, 5, 12)
    torch.testing.assert_close(reference.merge_heads(reference.split_heads(x, 3)), x)
    fails_with(check_merge_heads, lambda x: (x.transpose(1, 2).flatten(2),), "got tuple")
    not_done(check_merge_heads, skeleton, capsys)
