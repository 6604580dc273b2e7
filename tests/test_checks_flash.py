"""Lesson 09's checkers: a learner's Triton step and launch, run in the course's kernel under
Triton's interpreter (tests/conftest.py turns it on where there is no GPU). Correct answers in
other styles pass; each classic mistake, planted in a kernel written here (a table of small
variants of one step, and of one launch), gets its message. Where Triton cannot run, every check
says why and checks nothing (tested without Triton too)."""

import math
import subprocess
import sys
import types

import pytest
import torch

from mha_course import reference, triton_attention
from mha_course.checks import check_attend_tile, check_flash_launch, l09_flash
from mha_course.triton_attention import COURSE_STEP

from checker_helpers import fails_with, not_done, passes

REASON = triton_attention.triton_unavailable()
if REASON is None:
    import triton
    import triton.language as tl

    from mha_course.triton_kernels import attend_tile
    from mha_course.triton_launch import launch_kernel

    PLANTED = tl.constexpr("")  # no mistake: each planted step has one of its own

    def planted_step(
        q, k, v, m, sum_exp, acc, q_pos, k_pos, S, qk_scale,
        IS_CAUSAL: tl.constexpr, MASKED: tl.constexpr,
    ):  # fmt: skip
        """A correct step written another way (every tile masked, acc rescaled before the
        product), with the mistake PLANTED."""
        s = tl.dot(q, tl.trans(k))
        if PLANTED != "no scale":
            s = qk_scale * s
        visible = (k_pos[None, :] < S) | (PLANTED == "padding")
        if IS_CAUSAL:
            last = q_pos[:, None] + (1 if PLANTED == "diagonal + 1" else 0)
            if PLANTED == "diagonal":
                visible = visible & (k_pos[None, :] < last)
            else:
                visible = visible & (k_pos[None, :] <= last)
        s = tl.where(visible, s, -float("inf"))
        best = tl.maximum(tl.max(s, 1), m)
        shift = m if PLANTED == "exp first" else best
        if PLANTED == "natural exp":
            p = tl.exp(s - shift[:, None])
        else:
            p = tl.exp2(s - shift[:, None])
        rescale = tl.exp2(m - best)
        if PLANTED != "acc":
            acc = acc * rescale[:, None]
        acc += tl.dot(p.to(v.dtype), v)
        total = tl.sum(p, 1)
        if PLANTED == "sum":
            total += sum_exp
        else:
            total += sum_exp * rescale
        return (m if PLANTED == "max kept" else best), total, acc

    def planted(mistake: str):
        scope = {**globals(), "PLANTED": tl.constexpr(mistake)}
        step = types.FunctionType(planted_step.__code__, scope, "planted_step")
        step.__qualname__ = f"planted_step[{mistake}]"
        return triton.jit(step)

    @triton.jit
    def natural_step(
        q, k, v, m, sum_exp, acc, q_pos, k_pos, S, qk_scale,
        IS_CAUSAL: tl.constexpr, MASKED: tl.constexpr,
    ):  # fmt: skip
        """Correct, in natural logarithms: scores in base e, m converted at the door."""
        ln2 = 0.6931471805599453
        s = tl.dot(q, tl.trans(k)) * (qk_scale * ln2)
        if MASKED:
            visible = k_pos[None, :] < S
            if IS_CAUSAL:
                visible = visible & (k_pos[None, :] <= q_pos[:, None])
            s = tl.where(visible, s, float("-inf"))
        m_e = tl.maximum(m * ln2, tl.max(s, 1))
        p = tl.exp(s - m_e[:, None])
        alpha = tl.exp(m * ln2 - m_e)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        return m_e / ln2, sum_exp * alpha + tl.sum(p, 1), acc


needs_triton = pytest.mark.skipif(REASON is not None, reason=f"Triton cannot run here: {REASON}")


@pytest.fixture
def interpreter():
    if REASON is not None:
        pytest.skip(f"Triton cannot run here: {REASON}")
    if not triton_attention.interpreting():
        pytest.skip("Triton was imported here to compile for a GPU, not to interpret")


# ---------------------------------------------------------------- attend_tile


def test_attend_tile_passes_the_courses_step_and_other_styles(interpreter, capsys):
    for step in (attend_tile, planted(""), natural_step):
        assert passes(check_attend_tile, step, capsys).startswith("✅ attend_tile: all 6 cases")


STEP_MISTAKES = [  # (the planted mistake, words of the message)
    ("acc", "the output accumulator is not rescaled"),
    ("sum", "the running sum is not rescaled"),
    ("exp first", "the exponentials are taken before the new max is known"),
    ("diagonal", "the causal mask is off by one on the diagonal: query i sees key i itself"),
    ("diagonal + 1", "the causal mask is off by one on the diagonal: query i sees keys 0..i and"),
    ("padding", "the last tile's padding is not masked"),
    ("no scale", "the scores are not scaled"),
    ("natural exp", "the scores are in base 2"),
    ("max kept", "the running max is not carried"),
]


@pytest.mark.parametrize("mistake, phrase", STEP_MISTAKES, ids=[m for m, _ in STEP_MISTAKES])
def test_attend_tile_names_each_classic_mistake(interpreter, mistake, phrase):
    message = fails_with(check_attend_tile, planted(mistake), "Likely cause: ", phrase)
    assert len(message.splitlines()) <= 15


def test_attend_tile_names_the_dtype_of_a_float16_product(interpreter):
    source = l09_flash_step_source().replace("p.to(v.dtype)", "p")
    namespace = {}
    exec(compile(source, "<cell>", "exec"), namespace)  # no source for inspect: it still runs
    fails_with(
        check_attend_tile,
        triton.jit(namespace["planted_step"]),
        "Case \"float16 q, k, v (a GPU's dtype)",
        "your code raised AssertionError",  # Triton's own words differ from version to version
        "tl.dot multiplies two tiles of one dtype",
    )


def l09_flash_step_source() -> str:
    import inspect
    import textwrap

    step = textwrap.dedent(inspect.getsource(planted_step))
    return f"import triton.language as tl\nPLANTED = ''\n{step}"


def test_attend_tile_not_done_a_plain_function_and_no_triton(interpreter, capsys, monkeypatch):
    @triton.jit
    def skeleton(
        q, k, v, m, sum_exp, acc, q_pos, k_pos, S, qk_scale,
        IS_CAUSAL: tl.constexpr, MASKED: tl.constexpr,
    ):  # fmt: skip
        raise NotImplementedError("Exercise: write this part, then run the check below.")

    not_done(check_attend_tile, skeleton, capsys)
    fails_with(
        check_attend_tile, lambda *args: args, "is a function, not a Triton function", "@triton.jit"
    )
    monkeypatch.setattr(l09_flash, "triton_unavailable", lambda: "Triton is not installed: pip")
    check_attend_tile(attend_tile)
    assert capsys.readouterr().out == (
        "⏳ attend_tile cannot be checked on this machine: Triton is not installed: pip.\n"
    )


def test_a_check_on_a_cpu_without_the_interpreter_says_how_to_turn_it_on(capsys, monkeypatch):
    monkeypatch.setattr(l09_flash, "triton_unavailable", lambda: None)
    monkeypatch.setattr(l09_flash, "interpreting", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert check_flash_launch.passes(reference.flash_launch) is False
    check_flash_launch(reference.flash_launch)
    out = capsys.readouterr().out
    assert out.startswith("⏳ flash_launch cannot be checked on this machine: on a CPU Triton")
    assert "TRITON_INTERPRET" in out


# ---------------------------------------------------------------- flash_launch


def learner_launch(
    kernel, q, k, v, *, is_causal=False, scale=None, BLOCK_M=16, BLOCK_N=16, flaw=""
):
    """A correct launch written another way (a grid function of Triton's meta-parameters, a
    contiguous output, the strides by hand from each tensor), with the mistake ``flaw``."""
    B, H, L, D = q.shape
    S = q.shape[2] if flaw == "S = L" else k.shape[2]
    if scale is None:
        scale = 1 / math.sqrt(D)
    out = torch.empty(B, H, L, D, device=q.device, dtype=None if flaw == "dtype" else q.dtype)
    lse = torch.empty(B, H, L, device=q.device, dtype=q.dtype if flaw == "lse dtype" else None)
    log2e = 1 / math.log(2)
    qk_scale = {"no log2e": scale, "no scale": log2e}.get(flaw, scale * log2e)
    grid = {
        "floor": lambda meta: (L // meta["BLOCK_M"], B * H),
        "heads": lambda meta: (triton.cdiv(L, meta["BLOCK_M"]), H),
        "swapped": lambda meta: (B * H, triton.cdiv(L, meta["BLOCK_M"])),
    }.get(flaw, lambda meta: (triton.cdiv(L, meta["BLOCK_M"]), B * H))

    def strides(x):
        if flaw == "contiguous strides":
            return (x.shape[1] * x.shape[2] * x.shape[3], x.shape[2] * x.shape[3], x.shape[3], 1)
        return tuple(x.stride(i) for i in range(4))

    v_strides = strides(k) if flaw == "k's strides for v" else strides(v)
    out_strides = strides(q) if flaw == "q's strides for out" else strides(out)
    kernel[grid](
        q, k, v, out, lse, *strides(q), *strides(k), *v_strides, *out_strides,
        H, L, S, qk_scale, D=D, IS_CAUSAL=is_causal and flaw != "not causal",
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
    )  # fmt: skip
    return out, lse


def test_flash_launch_passes_the_courses_launch_and_another_style(interpreter, capsys):
    for launch in (launch_kernel, learner_launch):
        assert passes(check_flash_launch, launch, capsys).startswith("✅ flash_launch: all 5")


LAUNCH_MISTAKES = [
    ("floor", "your outputs contain NaN", "rounds the tiles of queries down"),
    ("heads", "your outputs contain NaN", "counts the heads of one sequence"),
    ("swapped", "launches programs with no queries", "the grid's two axes are swapped"),
    ("contiguous strides", "the strides passed for Q", "strides computed from the shape"),
    ("q's strides for out", "the strides passed for Out", "the output's strides are q's"),
    ("k's strides for v", "the strides passed for V", "v's strides are k's"),
    ("S = L", "S must be 29", "S is the number of keys"),
    ("no log2e", "differ from the reference", "qk_scale lacks log₂e"),
    ("no scale", "differ from the reference", "qk_scale lacks the scale"),
    ("not causal", "Case 'causal, ", "is_causal does not reach the kernel"),
    ("lse dtype", "must be a contiguous float32 tensor", "kept in float32 whatever q's dtype"),
    ("dtype", "are torch.float32, expected torch.float16", "with the default dtype"),
]


@pytest.mark.parametrize("flaw, what, cause", LAUNCH_MISTAKES, ids=[m[0] for m in LAUNCH_MISTAKES])
def test_flash_launch_names_each_classic_mistake(interpreter, flaw, what, cause):
    def flash_launch(kernel, q, k, v, **kwargs):
        return learner_launch(kernel, q, k, v, **kwargs, flaw=flaw)

    message = fails_with(check_flash_launch, flash_launch, what, "Likely cause: ", cause)
    assert len(message.splitlines()) <= 15


def test_flash_launch_not_done_and_no_pair(interpreter, capsys):
    def skeleton(kernel, q, k, v, **kwargs):
        raise NotImplementedError("Exercise: write this part, then run the check below.")

    not_done(check_flash_launch, skeleton, capsys)
    fails_with(
        check_flash_launch,
        lambda *args, **kwargs: launch_kernel(*args, **kwargs)[0],
        "the result should be a pair (the output, the log-sum-exp)",
    )


# ---------------------------------------------------------------- the registry


@needs_triton
def test_both_exercises_are_lesson_09s_and_their_references_pass():
    assert check_attend_tile.passes(reference.attend_tile)
    assert reference.attend_tile is COURSE_STEP and reference.flash_launch is launch_kernel


WITHOUT_TRITON = """
import sys
sys.modules["triton"] = None  # `import triton` fails, as where Triton is not installed
from mha_course.triton_attention import stand_in_for_triton, triton_unavailable
reason = stand_in_for_triton()  # what lesson 09 does there
import triton
import triton.language as tl


@triton.jit
def attend_tile(
    q, k, v, m, sum_exp, acc, q_pos, k_pos, S, qk_scale, IS_CAUSAL: tl.constexpr, MASKED: tl.constexpr
):
    return m, sum_exp, acc


from mha_course.checks import check_attend_tile, check_flash_launch

check_attend_tile(attend_tile)
check_flash_launch(lambda kernel, q, k, v, **kwargs: None)
print(reason == stand_in_for_triton() == triton_unavailable(), triton.cdiv(37, 16))
"""


def test_without_triton_the_lessons_cells_run_and_each_check_says_why():
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_TRITON], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    reason = "Triton is not installed"
    assert done.stdout.splitlines() == [
        f"⏳ attend_tile cannot be checked on this machine: {reason}: pip install 'triton>=3.1'.",
        f"⏳ flash_launch cannot be checked on this machine: {reason}: pip install 'triton>=3.1'.",
        "True 3",
    ]


def test_an_install_that_cannot_run_kernels_is_not_blamed_on_the_answer(
    interpreter, capsys, monkeypatch
):
    from mha_course import triton_launch

    def broken(self, grid, *args, **kwargs):  # what Triton 3.1's interpreter does with NumPy 2.4
        with triton_launch.running(torch.zeros(1), interpret=True):
            raise ValueError("only 0-dimensional arrays can be converted to Python scalars")

    monkeypatch.setattr(triton_launch.FlashKernel, "launch", broken)
    check_attend_tile(attend_tile)
    assert capsys.readouterr().out.startswith(
        "⏳ attend_tile cannot be checked on this machine: the interpreter of Triton"
    )
