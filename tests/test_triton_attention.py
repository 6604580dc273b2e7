"""Lesson 09's Triton kernel against torch's scaled_dot_product_attention.

On a CPU the kernel runs in Triton's interpreter (``TRITON_INTERPRET=1``, set per test by the
``interpreter`` fixture), in float32 with small tiles (16 × 16), so that small odd shapes span
several tiles, partial ones included. Those tests are skipped, with the reason, where Triton
cannot be imported; the argument checks and the module's import without Triton run everywhere.
The tests marked ``gpu`` (tests/conftest.py's ``gpu`` fixture) compare float16, bfloat16 and
float32 on a CUDA device. Speed is the business of benchmarks/bench_flash.py, not of a test.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from test_gpu import assert_as_close_as_torch, no_tf32, require_dtype  # noqa: F401 (a fixture)

from mha_course import triton_attention
from mha_course.triton_attention import flash_attention, flash_forward

REASON = triton_attention.triton_unavailable()
if REASON is None:
    import triton
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    from mha_course.triton_kernels import attend_tile, launch_grid

    @triton.jit
    def step_that_always_masks(
        q, k, v, m, sum_exp, acc, q_pos, k_pos, S, qk_scale,
        IS_CAUSAL: tl.constexpr, MASKED: tl.constexpr,
    ):  # fmt: skip
        """Correct, written another way: natural exp, the mask on every tile."""
        s = tl.dot(q, tl.trans(k)) * (qk_scale * 0.6931471805599453)  # scale · q·k, base e
        visible = (k_pos[None, :] < S) & ((k_pos[None, :] <= q_pos[:, None]) | (not IS_CAUSAL))
        s = tl.where(visible, s, float("-inf"))
        m_e = m * 0.6931471805599453  # the running max, base e
        m_new = tl.maximum(m_e, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_e - m_new)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        return m_new * 1.4426950408889634, sum_exp * alpha + tl.sum(p, 1), acc

    @triton.jit
    def step_without_rescale(
        q, k, v, m, sum_exp, acc, q_pos, k_pos, S, qk_scale,
        IS_CAUSAL: tl.constexpr, MASKED: tl.constexpr,
    ):  # fmt: skip
        """The classic mistake: the old sums are not rescaled when the max rises."""
        s = tl.dot(q, tl.trans(k)) * qk_scale
        if MASKED:
            visible = k_pos[None, :] < S
            if IS_CAUSAL:
                visible = visible & (k_pos[None, :] <= q_pos[:, None])
            s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        return m_new, sum_exp + tl.sum(p, 1), tl.dot(p.to(v.dtype), v, acc)


needs_triton = pytest.mark.skipif(REASON is not None, reason=f"Triton cannot run here: {REASON}")


@pytest.fixture
def interpreter():
    """Skips the test unless Triton runs its interpreter in this process (tests/conftest.py turns
    it on where there is no GPU, before anything imports Triton)."""
    if REASON is not None:
        pytest.skip(f"Triton cannot run here: {REASON}")
    if not triton_attention.interpreting():
        pytest.skip("Triton was imported here to compile for a GPU, not to interpret")


def inputs(B, H, L, S, D, dtype=torch.float32, device="cpu", seed=0):
    """q as a view of a (B, L, H, D) tensor (not contiguous, as multi-head attention's split
    gives it), k and v contiguous (B, H, S, D); all three require grad."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, L, H, D, generator=g).to(device, dtype).transpose(1, 2)
    k, v = (torch.randn(B, H, S, D, generator=g).to(device, dtype) for _ in range(2))
    return [x.requires_grad_() for x in (q, k, v)]


def reference(q, k, v, is_causal, dtype=None):
    """torch's attention, and its gradients, on copies (optionally in another dtype)."""
    q, k, v = (x.detach().to(dtype or x.dtype).requires_grad_() for x in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal), (q, k, v)


# (B, H, L, S, D, is_causal): odd lengths, L ≠ S both ways, D = 16 to 64 (48: padded to 64)
CASES = [
    (2, 3, 37, 29, 32, False),
    (2, 3, 37, 29, 32, True),  # causal, L > S: queries 29.. see every key
    (1, 2, 19, 45, 16, True),  # causal, L < S: keys 19.. seen by no query
    (2, 2, 33, 33, 64, True),
    (1, 2, 32, 48, 64, False),  # whole tiles only: no tile of keys needs a mask
    (2, 1, 5, 70, 48, False),  # one partial tile of queries; D padded
    (1, 1, 1, 1, 16, True),
]


@pytest.mark.parametrize("B, H, L, S, D, is_causal", CASES)
def test_output_and_gradients_equal_torchs(interpreter, B, H, L, S, D, is_causal):
    q, k, v = inputs(B, H, L, S, D)
    out = flash_attention(q, k, v, is_causal=is_causal)
    expected, leaves = reference(q, k, v, is_causal)
    assert out.shape == (B, H, L, D) and out.dtype == q.dtype
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
    d_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    out.backward(d_out)
    expected.backward(d_out)
    for name, ours, theirs in zip("qkv", (q, k, v), leaves):
        torch.testing.assert_close(ours.grad, theirs.grad, atol=1e-4, rtol=1e-4, msg=f"d{name}")


@pytest.mark.parametrize("blocks", [(16, 32), (32, 16), (64, 64)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_any_tile_sizes_give_the_same_output_and_log_sum_exp(interpreter, blocks, is_causal):
    """BLOCK_M ≠ BLOCK_N moves the diagonal within the tiles; the log-sum-exp is torch's."""
    q, k, v = (x.detach() for x in inputs(2, 2, 41, 53, 32))
    out, lse = flash_forward(q, k, v, is_causal=is_causal, blocks=blocks)
    torch.testing.assert_close(out, reference(q, k, v, is_causal)[0], atol=1e-4, rtol=1e-4)
    scores = q @ k.mT / 32**0.5
    if is_causal:
        scores = scores.masked_fill(torch.ones(41, 53).tril().logical_not(), float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(scores, -1), atol=1e-4, rtol=1e-4)


def test_a_given_scale_is_used(interpreter):
    q, k, v = (x.detach() for x in inputs(1, 2, 20, 24, 16))
    out = flash_attention(q, k, v, is_causal=True, scale=0.3)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3)
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)


def test_float16_in_the_interpreter(interpreter):
    q, k, v = (x.detach() for x in inputs(1, 2, 21, 18, 32, dtype=torch.float16))
    out = flash_attention(q, k, v, is_causal=True)
    expected = reference(q, k, v, True, torch.float32)[0]
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.float(), expected, atol=3e-3, rtol=3e-3)


def test_empty_batches_and_queries_give_empty_outputs(interpreter):
    for B, L in ((0, 5), (1, 0)):
        q, k, v = (x.detach() for x in inputs(B, 2, L, 7, 16))
        assert flash_attention(q, k, v).shape == (B, 2, L, 16)


# ---------------------------------------------------------------- a learner's pieces


@pytest.mark.parametrize("is_causal", [False, True])
def test_a_step_passed_in_runs_inside_the_kernel(interpreter, is_causal):
    """What an exercise checker does: the learner's inner step in the package's kernel."""
    q, k, v = (x.detach() for x in inputs(2, 2, 37, 29, 32))
    expected = reference(q, k, v, is_causal)[0]
    out, _ = flash_forward(q, k, v, is_causal=is_causal, step=step_that_always_masks)
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
    wrong, _ = flash_forward(q, k, v, is_causal=is_causal, step=step_without_rescale)
    assert (wrong - expected).abs().max() > 1e-2


def test_a_step_defined_without_the_interpreter_still_runs_in_it(interpreter):
    """Triton fixes a function's mode when it is defined; the kernel runs it in the current one."""
    compiled = JITFunction(attend_tile.fn)  # as @triton.jit makes it without TRITON_INTERPRET
    q, k, v = (x.detach() for x in inputs(1, 2, 20, 20, 16))
    out, _ = flash_forward(q, k, v, is_causal=True, step=compiled)
    torch.testing.assert_close(out, reference(q, k, v, True)[0], atol=1e-4, rtol=1e-4)


def test_a_grid_passed_in_is_used_and_checked(interpreter):
    q, k, v = (x.detach() for x in inputs(2, 2, 37, 29, 32))
    out, _ = flash_forward(q, k, v, grid=launch_grid)
    torch.testing.assert_close(out, reference(q, k, v, False)[0], atol=1e-4, rtol=1e-4)

    def one_head_only(B, H, L, BLOCK_M):
        return triton.cdiv(L, BLOCK_M), 1

    out, lse = flash_forward(q, k, v, grid=one_head_only)
    assert out[0, 0].isfinite().all() and out[0, 1].isnan().all() and lse[1].isnan().all()
    with pytest.raises(ValueError, match=r"= \(3, 40\) launches programs .* at most \(3, 4\)"):
        flash_forward(q, k, v, grid=lambda B, H, L, BLOCK_M: (3, 10 * B * H))
    with pytest.raises(TypeError, match="grid must return a tuple of two ints, got 3"):
        flash_forward(q, k, v, grid=lambda B, H, L, BLOCK_M: 3)


# ---------------------------------------------------------------- what it refuses, and why

q4, k4 = torch.zeros(1, 2, 5, 16), torch.zeros(1, 2, 7, 16)
# (what is wrong, the call's arguments, the exception, words of its message)
REFUSED = [
    ("q not a tensor", ([1.0], k4, k4), {}, TypeError, "q must be a torch.Tensor"),
    ("is_causal not a bool", (q4, k4, k4), {"is_causal": 1}, TypeError, "is_causal must be a bool"),
    ("q 3-D", (q4[0], k4, k4), {}, ValueError, r"q must be 4-D .*got 3-D shape \(2, 5, 16\)"),
    ("k's D", (q4, k4[..., :8], k4), {}, ValueError, r"k must be \(B, H, S, D\) = \(1, 2, S, 16\)"),
    ("v's S", (q4, k4, k4[:, :, :6]), {}, ValueError, r"v must have k's shape .*\(1, 2, 6, 16\)"),
    ("no keys", (q4, k4[:, :, :0], k4[:, :, :0]), {}, ValueError, "at least one key"),
    ("D > 128", (*(torch.zeros(1, 1, 3, 130),) * 3,), {}, ValueError, "at most 128"),
    ("dtypes differ", (q4, k4.double(), k4), {}, ValueError, "share one dtype"),
    ("float64", (q4.double(), k4.double(), k4.double()), {}, ValueError, "share one dtype"),
    ("devices differ", (q4, k4.to("meta"), k4), {}, ValueError, "on one device"),
    ("another device", (q4.to("meta"), k4.to("meta"), k4.to("meta")), {}, ValueError, "meta"),
    ("a mask", (q4, k4, k4), {"attn_mask": torch.ones(5, 7).bool()}, ValueError, "no attn_mask"),
    ("scale 0", (q4, k4, k4), {"scale": 0.0}, ValueError, "finite number > 0, got 0.0"),
    ("scale a string", (q4, k4, k4), {"scale": "1"}, TypeError, "scale must be a float"),
]


@pytest.mark.parametrize(
    "args, kwargs, error, message", [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED]
)
def test_what_it_cannot_do_is_refused_at_the_call(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        flash_attention(*args, **kwargs)


@pytest.mark.parametrize(
    "asked, message",
    [
        (None, r"on the CPU.*TRITON_INTERPRET is not set.*\['TRITON_INTERPRET'\] = '1' before"),
        ("1", r"on the CPU.*TRITON_INTERPRET is set, but Triton was imported before it was"),
    ],
)
def test_cpu_tensors_without_the_interpreter_say_how_to_turn_it_on(monkeypatch, asked, message):
    monkeypatch.setattr(triton_attention, "interpreting", lambda: False)
    if asked is None:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    else:
        monkeypatch.setenv("TRITON_INTERPRET", asked)
    with pytest.raises(ValueError, match=message):
        flash_attention(q4, k4, k4)


SET_TOO_LATE = """
import os, torch, triton  # Triton imported first: it compiles for a GPU from now on
os.environ["TRITON_INTERPRET"] = "1"
from mha_course.triton_attention import flash_attention
try:
    flash_attention(*(torch.zeros(1, 1, 4, 16),) * 3)
except ValueError as error:
    print(error)
"""


@needs_triton
def test_the_interpreter_asked_for_after_triton_was_imported_is_named():
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", SET_TOO_LATE], capture_output=True, text=True, env=environment
    )
    assert "Triton was imported before it was: restart Python" in done.stdout, done.stderr


def test_bfloat16_is_refused_in_the_interpreter(interpreter):
    with pytest.raises(ValueError, match="interpreter has no bfloat16"):
        flash_attention(q4.bfloat16(), k4.bfloat16(), k4.bfloat16())


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"blocks": (8, 16)}, ValueError, r"each a power of two from 16 to 256, got \(8, 16\)"),
        ({"step": lambda *a: a}, TypeError, "step must be a @triton.jit function, got function"),
    ],
)
def test_flash_forward_refuses_what_the_kernel_cannot_tile(interpreter, kwargs, error, message):
    with pytest.raises(error, match=message):
        flash_forward(q4, k4, k4, **kwargs)
    with pytest.raises(ValueError, match=r"power of two from 16 to 128, got D = 24"):
        flash_forward(*(torch.zeros(1, 1, 5, 24),) * 3)


# ---------------------------------------------------------------- without Triton

WITHOUT_TRITON = """
import sys
import torch
import mha_course
from mha_course import triton_attention
assert "triton" not in sys.modules, "importing the package imported Triton"
sys.modules["triton"] = None  # `import triton` now raises ImportError, as where it is missing
reason = triton_attention.triton_unavailable()
assert reason and "\\n" not in reason, reason
try:
    triton_attention.flash_attention(*(torch.zeros(1, 1, 4, 16),) * 3)
except ImportError as error:
    assert reason in str(error), error
    print("ImportError:", error)
else:
    raise AssertionError("flash_attention ran without Triton")
"""


def test_the_package_imports_without_triton_and_says_why_it_cannot_run():
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_TRITON],
        capture_output=True,
        text=True,
        env={**os.environ, "TRITON_INTERPRET": "1"},  # CPU tensors pass, up to the missing Triton
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ImportError: flash_attention needs Triton: Triton is not" in done.stdout


# ---------------------------------------------------------------- on a GPU

GPU_DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# ours and torch's, on the device, against the float64 answer: float32 to 1e-4 (TF32 off),
# float16 and bfloat16 no more than twice torch's own error (test_gpu's rule)
GPU_CASES = [(2, 3, 300, 257, 64), (1, 4, 129, 200, 128), (2, 2, 190, 190, 40)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", GPU_DTYPES, ids=str)
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("B, H, L, S, D", GPU_CASES)
def test_on_the_gpu_it_matches_torch(gpu, dtype, is_causal, B, H, L, S, D):
    require_dtype(dtype, gpu)
    if gpu.type == "cpu" and dtype == torch.bfloat16:  # MHA_COURSE_GPU_TESTS_ON=cpu
        pytest.skip("Triton's interpreter has no bfloat16")
    q, k, v = inputs(B, H, L, S, D, dtype, gpu)
    out = flash_attention(q, k, v, is_causal=is_causal)
    theirs, leaves = reference(q, k, v, is_causal)
    exact, exact_leaves = reference(q.cpu(), k.cpu(), v.cpu(), is_causal, torch.float64)
    assert_as_close_as_torch(out, theirs, exact, dtype)
    d_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    out.backward(d_out.to(gpu, dtype))
    theirs.backward(d_out.to(gpu, dtype))
    exact.backward(d_out)
    for name, ours, torchs, exact_leaf in zip("qkv", (q, k, v), leaves, exact_leaves):
        assert_as_close_as_torch(ours.grad, torchs.grad, exact_leaf.grad, dtype, f"d{name}")
