"""Fixtures shared by the unit tests."""

import os

import pytest
import torch


@pytest.fixture
def gpu() -> torch.device:
    """The CUDA device for the tests marked ``gpu``; they are skipped, with the reason, without one.

    ``MHA_COURSE_GPU_TESTS_ON=cpu`` runs them on the CPU instead: a way to check the tests
    themselves on a machine without a GPU (the CUDA-only assertions inside them are then skipped).
    """
    if torch.cuda.is_available():
        return torch.device("cuda")
    if os.environ.get("MHA_COURSE_GPU_TESTS_ON") == "cpu":
        return torch.device("cpu")
    pytest.skip("no CUDA device here (torch.cuda.is_available() is False); run on a GPU machine")
