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


# Triton (lesson 09) reads TRITON_INTERPRET when it is first imported (torch.compile imports it
# too): without a GPU its kernels can only run in its interpreter, so there the tests turn it on
# before anything imports Triton.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def private_work_dir(tmp_path_factory, monkeypatch):
    """No unit test reads or writes a learner's my_work/: answers go to a private folder (a
    test of the default folder removes the variable itself)."""
    monkeypatch.setenv("MHA_COURSE_WORK_DIR", str(tmp_path_factory.mktemp("my_work")))
