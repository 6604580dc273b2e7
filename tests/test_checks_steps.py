"""The small, one-step exercises as a whole: registered in lesson order, each with a checker that
passes its reference and leaves the learner's random stream alone."""

import pytest
import torch

from mha_course import checks, reference
from mha_course.exercises import EXERCISES, by_name

STEPS = [
    ("pairwise_dot", "00", checks.check_pairwise_dot),
    ("weighted_average", "00", checks.check_weighted_average),
    ("attention_scores", "01", checks.check_attention_scores),
    ("padding_mask", "01", checks.check_padding_mask),
    ("causal_mask", "01", checks.check_causal_mask),
    ("split_heads", "02", checks.check_split_heads),
    ("merge_heads", "02", checks.check_merge_heads),
    ("post_ln_sublayer", "03", checks.check_post_ln_sublayer),
    ("pre_ln_sublayer", "03", checks.check_pre_ln_sublayer),
    ("FeedForward", "04", checks.check_feed_forward),
    ("EncoderStack", "04", checks.check_encoder_stack),
    ("attention_flops", "06", checks.check_attention_flops),
    ("scores_memory", "06", checks.check_scores_memory),
]


@pytest.mark.parametrize("name, lesson, check", STEPS, ids=[s[0] for s in STEPS])
def test_each_step_is_registered_with_its_checker_and_reference(name, lesson, check):
    exercise = by_name(name)
    assert (exercise.lesson, exercise.check, exercise.reference) == (
        lesson,
        check,
        getattr(reference, name),
    )
    assert check.exercise == name  # the name the learner writes, in every message
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    assert check.passes(exercise.reference)
    torch.testing.assert_close(torch.rand(3), expected)


def test_the_registry_stays_in_lesson_order():
    lessons = [e.lesson for e in EXERCISES]
    assert lessons == sorted(lessons)
    assert len({e.name for e in EXERCISES}) == len(EXERCISES)
