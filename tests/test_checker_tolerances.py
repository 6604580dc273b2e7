"""Every checker's tolerance is pinned: the reference nudged just inside it passes, nudged just
outside it fails. A tolerance loosened (or tightened) by mistake fails this test.

The nudge adds ``k · (atol + rtol · |x|)`` to every float number the answer returns (tensors and
floats, in tuples, lists and dicts; detached, so that gradients are the reference's), with each
checker's tolerance written down here: k = 0.4 must pass, k = 3 must fail. An exercise whose answer returns no float tensor, or whose answer is
not Python (a Triton kernel), is listed below with the test that pins its tolerance instead.
"""

import inspect

import pytest
import torch

from mha_course.checks import REGISTRY, ExerciseFailure
from mha_course.checks._table import run

ELSEWHERE = {  # exercise: where its tolerance is pinned instead, or why there is none
    "may_attend_mask": "a bool mask: compared exactly",
    "attention_cost": "ints: compared exactly",
    "scaled_dot_product_attention": "tests/test_checks_attention.py (two tables, by signature)",
    "MultiHeadAttention": "tests/test_checks_multihead.py (two tables, by signature)",
    "load_torch_weights": "copied weights: compared exactly",
    "load_layer": "copied weights: compared exactly",
    "head_ablation": "tests/test_checks_ablation.py",
    "CharLM": "tests/test_checks_decoder.py",
    "sample_next": "token ids: compared exactly",
    "CachedAttention": "tests/test_checks_kv_cache.py::test_cached_attention_tolerance_is_pinned",
    "StaticCachedAttention": "tests/test_checks_kv_cache.py::test_cached_attention_tolerance_is_pinned",
    "decode_roofline": "tests/test_checks_fast_decoding.py (held in microseconds)",
    "attend_tile": "a Triton kernel: tests/test_checks_flash.py",
    "flash_launch": "a Triton launch: tests/test_checks_flash.py",
}


def nudged(reference, amount):
    """``reference`` with ``amount(x)`` added to every float tensor it returns."""

    def nudge(result):
        if isinstance(result, torch.Tensor) and result.is_floating_point():
            return result + amount(result.detach()).detach()
        if isinstance(result, float):
            return result + float(amount(torch.tensor(abs(result), dtype=torch.float64)))
        if isinstance(result, (tuple, list)):
            return type(result)(nudge(r) for r in result)
        if isinstance(result, dict):
            return {key: nudge(value) for key, value in result.items()}
        return result

    if inspect.isclass(reference):
        return type(
            reference.__name__,
            (reference,),
            {"forward": lambda self, *a, **k: nudge(super(type(self), self).forward(*a, **k))},
        )
    return lambda *args, **kwargs: nudge(reference(*args, **kwargs))


TOLERANCE = {  # exercise: (atol, rtol), as its checker holds every output to them
    "softmax": (1e-5, 1e-4),
    "soft_lookup": (1e-5, 1e-4),
    "attention_scores": (1e-5, 1e-4),
    "SelfAttention": (1e-5, 1e-4),
    "job_scores": (1e-5, 1e-4),
    "LayerNorm": (1e-4, 1e-4),
    "ResidualBlock": (1e-5, 1e-4),
    "gradient_norms": (1e-6, 1e-4),
    "positional_encoding": (1e-4, 1e-4),
    "EncoderLayer": (1e-4, 1e-3),
    "EncoderModel": (1e-5, 1e-4),
    "train_step": (1e-5, 1e-4),
    "embed_sentences": (1e-5, 1e-4),
    "attention_in_blocks": (1e-6, 1e-6),
    "DecoderBlock": (1e-4, 1e-3),
    "DecoderLayer": (1e-4, 1e-3),
    "rotary": (1e-5, 1e-4),
    "rope_attention": (1e-5, 1e-4),
    "alibi_bias": (1e-5, 1e-4),
    "grouped_query_attention": (1e-5, 1e-4),
    "sliding_window_attention": (1e-6, 1e-6),
}
PINNED = [e for e in REGISTRY if e.name in TOLERANCE]


def test_every_exercise_is_pinned_here_or_elsewhere():
    assert sorted(e.name for e in REGISTRY) == sorted([*TOLERANCE, *ELSEWHERE])
    assert all(e.check.table is not None for e in PINNED)


@pytest.mark.parametrize("exercise", PINNED, ids=lambda e: e.name)
def test_the_tolerance_is_pinned(exercise):
    table = exercise.check.table
    atol, rtol = TOLERANCE[exercise.name]
    inside = nudged(exercise.reference, lambda x: 0.4 * (atol + rtol * x.abs()))
    outside = nudged(exercise.reference, lambda x: 3.0 * (atol + rtol * x.abs()))
    with torch.random.fork_rng(devices=[]):
        assert run(inside, table, exercise.name) >= 1
        with pytest.raises(ExerciseFailure, match="differ from the reference"):
            run(outside, table, exercise.name)
