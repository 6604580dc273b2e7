"""Test-session set-up shared by the unit tests and the notebook runs (nbval)."""

import os

import matplotlib

matplotlib.use("Agg")
# Build matplotlib's font cache now: on a fresh machine the first import prints a notice on
# stderr, which nbval would compare against the notebook's saved (clean) output.
import matplotlib.font_manager  # noqa: E402,F401
from hypothesis import settings  # noqa: E402

# Reproducible property tests: the same examples on every run, no time limit per example.
settings.register_profile("course", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("course")

# Notebooks run offline: never reach for a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
