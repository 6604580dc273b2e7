"""The lesson-06 checker of attention's cost model accepts every correct style and names the
classic mistakes, those of its steps (the FLOPs of the two matmuls, the bytes of one scores
tensor) included."""

import math

import pytest
import torch

from mha_course import reference
from mha_course.checks import check_attention_cost
from mha_course.exercises import EXERCISES

from checker_helpers import fails_with, not_done, passes, skeleton

# ---------------------------------------------------------------- attention_cost


def cost_in_steps(B, H, L, S, D, dtype):
    """The lesson's answer, written as a learner would."""
    size = dtype.itemsize
    flops = 2 * (2 * B * H * L * S * D)  # two matmuls
    score_bytes = B * H * L * S * size
    fused_bytes = (B * H * L * D + 2 * B * H * S * D + B * H * L * D) * size  # q, k, v, out
    unfused_bytes = fused_bytes + 4 * score_bytes  # scores and weights, written and read back
    return {
        "flops": flops,
        "score_bytes": score_bytes,
        "unfused_bytes": unfused_bytes,
        "fused_bytes": fused_bytes,
    }


def cost_from_meta_tensors(B, H, L, S, D, dtype):
    """Sizes from tensors that hold no data: another correct style."""

    def nbytes(*shape):
        return torch.empty(*shape, dtype=dtype, device="meta").nbytes

    q_or_out, k_or_v, scores = nbytes(B, H, L, D), nbytes(B, H, S, D), nbytes(B, H, L, S)
    fused = 2 * q_or_out + 2 * k_or_v
    return dict(
        flops=2 * math.prod((B, H, L, S, D)) * 2,
        score_bytes=scores,
        fused_bytes=fused,
        unfused_bytes=fused + 2 * scores + 2 * scores,
        arithmetic_intensity=0,  # an extra entry is fine
    )


@pytest.mark.parametrize(
    "candidate", [reference.attention_cost, cost_in_steps, cost_from_meta_tensors]
)
def test_attention_cost_accepts_correct_answers(candidate, capsys):
    passes(check_attention_cost, candidate, capsys)


def with_entry(key, count):
    """The right answer with one entry computed the wrong way, as a learner might."""

    def attention_cost(B, H, L, S, D, dtype):
        return cost_in_steps(B, H, L, S, D, dtype) | {key: count(B, H, L, S, D, dtype)}

    return attention_cost


def traffic(B, H, L, S, D, dtype, *, q=1, k=1, v=1, out=1, kv_length=None, score_passes=0):
    """Bytes moved, counting each tensor the given number of times."""
    kv_length = S if kv_length is None else kv_length
    numbers = B * H * ((q + out) * L * D + (k + v) * kv_length * D + score_passes * L * S)
    return numbers * dtype.itemsize


WRONG_COSTS = [
    # (key, wrong count, phrase of the likely cause)
    ("flops", lambda B, H, L, S, D, dt: 2 * B * H * L * S * D, "you counted half"),
    ("flops", lambda B, H, L, S, D, dt: B * H * L * S * D, "a multiply-add is 2 FLOPs"),
    ("flops", lambda B, H, L, S, D, dt: 4 * B * L * S * D, "the heads are missing"),
    ("flops", lambda B, H, L, S, D, dt: 4 * B * H * L * L * D, "you used L·L"),
    ("flops", lambda B, H, L, S, D, dt: 4 * B * H * S * S * D, "you used S·S"),
    ("flops", lambda B, H, L, S, D, dt: 4 * B * H * L * S * D + 5 * B * H * L * S, "the softmax"),
    ("flops", lambda B, H, L, S, D, dt: 3 * B * H * L * S * D, "each matmul is 2·B·H·L·S·D"),
    ("score_bytes", lambda B, H, L, S, D, dt: B * H * L * S * dt.itemsize * 8, "you counted bits"),
    ("score_bytes", lambda B, H, L, S, D, dt: B * H * L * S * 4, "4 bytes per number"),
    ("score_bytes", lambda B, H, L, S, D, dt: B * H * L * S, "numbers, not bytes"),
    ("score_bytes", lambda B, H, L, S, D, dt: B * L * S * dt.itemsize, "the heads are missing"),
    ("score_bytes", lambda B, H, L, S, D, dt: B * H * L * L * dt.itemsize, "you used L·L"),
    ("score_bytes", lambda B, H, L, S, D, dt: B * H * S * S * dt.itemsize, "you used S·S"),
    ("fused_bytes", lambda *a: traffic(*a, out=0), "but not what it writes"),
    ("fused_bytes", lambda *a: traffic(*a, kv_length=a[2]), "k and v hold S keys"),
    ("fused_bytes", lambda *a: traffic(*a) // a[-1].itemsize, "numbers, not bytes"),
    ("fused_bytes", lambda *a: traffic(*a, score_passes=1), "Its tiles of scores"),
    ("fused_bytes", lambda *a: traffic(*a, score_passes=4), "that is the unfused version"),
    ("fused_bytes", lambda B, H, *a: traffic(B, 1, *a), "the heads are missing"),
    ("unfused_bytes", lambda *a: traffic(*a, q=0, k=0, v=0, out=0, score_passes=4), "only"),
    ("unfused_bytes", lambda *a: traffic(*a, score_passes=2), "written by one operation"),
    ("unfused_bytes", lambda *a: traffic(*a, score_passes=1), "you counted one pass"),
    ("unfused_bytes", lambda *a: traffic(*a, score_passes=3), "there are four"),
    ("unfused_bytes", lambda *a: traffic(*a, score_passes=6), "the scale as an operation"),
    ("unfused_bytes", lambda *a: traffic(*a), "your unfused count is the fused one"),
    ("unfused_bytes", lambda *a: traffic(*a, score_passes=4) // a[-1].itemsize, "not bytes"),
    ("unfused_bytes", lambda *a: traffic(*a, kv_length=a[2], score_passes=4), "k and v hold S"),
]


@pytest.mark.parametrize(
    "key, count, phrase", WRONG_COSTS, ids=[f"{key}: {phrase}" for key, _, phrase in WRONG_COSTS]
)
def test_attention_cost_names_each_mistake(key, count, phrase):
    message = fails_with(check_attention_cost, with_entry(key, count), "Likely cause", phrase)
    assert f'"{key}"' in message.split("\n")[0]  # the entry that is wrong, on the first line


def test_every_diagnosed_cost_mistake_has_a_test():
    tested = {(key, phrase) for key, _, phrase in WRONG_COSTS}
    for mistake in check_attention_cost.table.mistakes:
        key = mistake.name.split(":")[0]
        assert any(k == key and p in mistake.explanation for k, p in tested), mistake.name


def test_the_first_cost_case_tells_every_mistake_apart():
    table = check_attention_cost.table
    first = next(iter(table.cases()))
    expected = reference.attention_cost(*first.args)
    for key in expected:
        wrong = [m.run(*first.args) for m in table.mistakes]
        counts = [w[key] for w in wrong if w[key] != expected[key]]
        assert counts and len(set(counts)) == len(counts), key
        assert all(w == expected | {key: w[key]} for w in wrong if w[key] != expected[key]), key


def test_attention_cost_shows_both_numbers():
    message = fails_with(check_attention_cost, with_entry("flops", lambda *a: 4620))
    assert "expected 9,240" in message and "got      4,620 (0.5 × the reference)" in message


def test_attention_cost_wrong_types_and_keys(capsys):
    fails_with(
        check_attention_cost,
        lambda *a: tuple(reference.attention_cost(*a).values()),
        "should be a dict with the keys",
        "got tuple",
    )
    fails_with(
        check_attention_cost,
        lambda *a: {k: v for k, v in reference.attention_cost(*a).items() if k != "fused_bytes"},
        "your dict has no 'fused_bytes'",
    )
    fails_with(
        check_attention_cost,
        with_entry("score_bytes", lambda B, H, L, S, D, dt: B * H * L * S * dt.itemsize / 1),
        'the bytes ("score_bytes") should be an int, got the float',
        "(the number is right)",
    )
    fails_with(
        check_attention_cost,
        with_entry("flops", lambda B, H, L, S, D, dt: torch.tensor(4 * B * H * L * S * D)),
        "should be a Python int, got a tensor",
    )
    fails_with(
        check_attention_cost,
        with_entry("flops", lambda *a: str(reference.attention_cost(*a)["flops"])),
        "should be an int, got str",
    )
    fails_with(
        check_attention_cost,
        with_entry("score_bytes", lambda B, H, L, S, D, dt: B * H * L * S * dt.size),
        "AttributeError",
        "dtype.itemsize",
    )
    not_done(check_attention_cost, skeleton, capsys)


def test_attention_cost_is_the_lessons_exercise_and_its_steps_are_not():
    names = {e.name for e in EXERCISES}
    assert "attention_cost" in names
    assert not names & {"attention_flops", "scores_memory"}


def test_attention_cost_matches_the_docstring_example():
    assert reference.attention_cost(1, 1, 4, 4, 2, torch.float32) == {
        "flops": 128,
        "score_bytes": 64,
        "unfused_bytes": 384,
        "fused_bytes": 128,
    }
