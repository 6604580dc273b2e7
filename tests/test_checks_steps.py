"""These exercises as a whole (the small steps, and lesson 04's model and training step): each is
registered in lesson order, with a checker that passes its reference and leaves the learner's
random stream alone."""

import pytest
import torch

from mha_course import checks, reference
from mha_course.exercises import EXERCISES, by_name

STEPS = [
    ("soft_lookup", "00", checks.check_soft_lookup),
    ("attention_scores", "01", checks.check_attention_scores),
    ("may_attend_mask", "01", checks.check_may_attend_mask),
    ("load_torch_weights", "02", checks.check_load_torch_weights),
    ("job_scores", "02", checks.check_job_scores),
    ("EncoderModel", "04", checks.check_encoder_model),
    ("train_step", "04", checks.check_train_step),
    ("attention_cost", "06", checks.check_attention_cost),
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


# Steps that are no longer exercises of their own (they are parts of soft_lookup and
# may_attend_mask now): their checkers and references stay, as the public contract says.
UNREGISTERED = [
    ("pairwise_dot", checks.check_pairwise_dot),
    ("weighted_average", checks.check_weighted_average),
    ("padding_mask", checks.check_padding_mask),
    ("causal_mask", checks.check_causal_mask),
]


@pytest.mark.parametrize("name, check", UNREGISTERED, ids=[s[0] for s in UNREGISTERED])
def test_a_step_that_left_its_lesson_keeps_its_checker_and_reference(name, check):
    with pytest.raises(ValueError, match="no exercise named"):
        by_name(name)
    assert check.exercise == name
    assert check.passes(getattr(reference, name))


def test_the_registry_stays_in_lesson_order():
    lessons = [e.lesson for e in EXERCISES]
    assert lessons == sorted(lessons)
    assert len({e.name for e in EXERCISES}) == len(EXERCISES)
