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


def pytest_collection_modifyitems(config, items):
    """The browser tests take minutes and need chromium: they run only when asked for by marker
    (`pytest -m browser`), never in a plain `pytest` run."""
    if config.option.markexpr:
        return
    browser = [item for item in items if item.get_closest_marker("browser")]
    if browser:
        config.hook.pytest_deselected(items=browser)
        items[:] = [item for item in items if not item.get_closest_marker("browser")]
