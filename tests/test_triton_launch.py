"""Lesson 09's launch (mha_course.triton_launch): the course's kernel called as any Triton kernel
is, ``kernel[grid](...)``, each launch checked before it runs. Under Triton's interpreter
(tests/conftest.py turns it on where there is no GPU); skipped, with the reason, where Triton
cannot run."""

import math
import re

import pytest
import torch
import torch.nn.functional as F

from mha_course import triton_attention

REASON = triton_attention.triton_unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"Triton cannot run here: {REASON}")

if REASON is None:
    from mha_course.triton_launch import flash_kernel, grid_problem, launch_kernel


@pytest.fixture
def kernel():
    if not triton_attention.interpreting():
        pytest.skip("Triton was imported here to compile for a GPU, not to interpret")
    return flash_kernel()


def tensors(B=2, H=3, L=21, S=18, D=16):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, L, H, D, generator=g).transpose(1, 2)  # a view, as lesson 02 splits heads
    k, v = (torch.randn(B, H, S, D, generator=g) for _ in range(2))
    return q, k, v, torch.empty(B, H, L, D), torch.empty(B, H, L)


def arguments(q, k, v, out, lse, **changes):
    """The launch's arguments, as launch_kernel passes them, with ``changes``."""
    named = dict(H=q.size(1), L=q.size(2), S=k.size(2), qk_scale=q.size(-1) ** -0.5 / math.log(2))
    named.update(D=q.size(-1), IS_CAUSAL=False, BLOCK_M=16, BLOCK_N=16)
    strides = [n for x in (q, k, v, out) for n in x.stride()]
    positional = [
        changes.pop(name, x) for name, x in zip(("Q", "K", "V", "Out", "LSE"), (q, k, v, out, lse))
    ]
    if "strides" in changes:
        strides = changes.pop("strides")
    named.update(changes)
    constants = {name: named.pop(name) for name in ("D", "IS_CAUSAL", "BLOCK_M", "BLOCK_N")}
    return [*positional, *strides, *named.values()], constants


def test_launch_kernel_runs_a_view_and_its_grid_may_be_triton_s_function(kernel):
    q, k, v, out, lse = tensors()
    got, got_lse = launch_kernel(kernel, q, k, v, is_causal=True)
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    args, constants = arguments(q, k, v, out, lse)
    kernel[lambda meta: (math.ceil(meta["L"] / meta["BLOCK_M"]), 6)](*args, **constants)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(lse, torch.logsumexp(q @ k.mT / 4, -1), atol=1e-5, rtol=1e-4)
    assert got_lse.dtype == torch.float32 and got.stride() == q.stride()  # the output: q's layout


q0, k0, v0, out0, lse0 = tensors()
# (what is wrong, the launch's changes, the exception, words of its message)
REFUSED = [
    ("Out not q's shape", {"Out": out0[:, :, :20]}, ValueError, r"Out \(the output\) must be \(2, 3, 21, 16\)"),
    ("LSE float16", {"LSE": lse0.half()}, ValueError, "must be a contiguous float32 tensor of B·H·L = 126"),
    ("LSE a view", {"LSE": torch.empty(2, 21, 3).transpose(1, 2)}, ValueError, "that is not contiguous"),
    ("k not a tensor", {"K": [1.0]}, TypeError, r"K \(k\) must be a torch.Tensor, got list"),
    ("contiguous strides for q", {"strides": [*q0.contiguous().stride(), *[n for x in (k0, v0, out0) for n in x.stride()]]},
     ValueError, r"strides passed for Q \(q\) are \(1008, 336, 16, 1\), but its own are \(1008, 16, 48, 1\)"),
    ("S for L", {"S": 21}, ValueError, "S must be 18 for these tensors, got 21"),
    ("D not the head dim", {"D": 32}, ValueError, "D must be the head dim, 16"),
    ("qk_scale 0", {"qk_scale": 0.0}, ValueError, "qk_scale must be a number > 0, got 0.0"),
    ("IS_CAUSAL 1", {"IS_CAUSAL": 1}, TypeError, "IS_CAUSAL must be a bool, got 1"),
    ("BLOCK_M 8", {"BLOCK_M": 8}, ValueError, r"BLOCK_M must be one of \(16, 32, 64, 128, 256\), got 8"),
]  # fmt: skip


@pytest.mark.parametrize(
    "changes, error, message", [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED]
)
def test_a_launch_that_would_read_or_write_the_wrong_numbers_is_refused(
    kernel, changes, error, message
):
    args, constants = arguments(q0, k0, v0, out0, lse0, **changes)
    with pytest.raises(error, match=message):
        kernel[(2, 6)](*args, **constants)


def test_a_missing_argument_names_the_kernel_s_signature(kernel):
    args, constants = arguments(q0, k0, v0, out0, lse0)
    with pytest.raises(TypeError, match=r"kernel\[grid\]\(Q, K, V, Out, LSE, .*missing .*BLOCK_N"):
        kernel[(2, 6)](*args, **{n: c for n, c in constants.items() if n != "BLOCK_N"})


@pytest.mark.parametrize(
    "grid, problem",
    [
        ((2, 6), None),
        ((2,), None),
        ((3, 6), r"the grid = \(3, 6\) launches programs with no queries .* at most \(2, 6\)"),
        ((6, 2), r"the grid = \(6, 2\) launches"),
        ((2, 6, 2), "launches programs"),
        (2, "the grid must be a tuple of two ints, got 2"),
        ((2.0, 6), "a tuple of two ints"),
    ],
)
def test_grid_problem(grid, problem):
    found = grid_problem(grid, B=2, H=3, L=21, block_m=16)
    assert found is None if problem is None else re.search(problem, found)
