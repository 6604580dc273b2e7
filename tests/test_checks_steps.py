"""The registry: every exercise is declared once, in lesson order, by its checker module, with a
checker that passes its reference and leaves the learner's random stream alone, and a
reference that ``mha_course.reference`` hands out by the exercise's name."""

import pytest
import torch

from mha_course import checks, reference
from mha_course.exercises import EXERCISES


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.name)
def test_each_exercise_passes_its_reference_and_keeps_the_random_stream(exercise):
    assert exercise.check.exercise == exercise.name  # the name the learner writes, everywhere
    assert getattr(checks, exercise.check.__name__) is exercise.check
    assert getattr(reference, exercise.name) is exercise.reference
    assert exercise.points >= 1
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    assert exercise.check.passes(exercise.reference)
    torch.testing.assert_close(torch.rand(3), expected)


def test_the_registry_stays_in_lesson_order():
    lessons = [e.lesson for e in EXERCISES]
    assert lessons == sorted(lessons)
    assert len({e.name for e in EXERCISES}) == len(EXERCISES)
