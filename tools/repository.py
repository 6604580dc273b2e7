"""Where the course lives: its repository and the git ref its badges, Colab set-up cells and
exports name, read from pyproject.toml (one place). Shared by the authoring tools
(``tools/authoring.py``, ``tools/exports.py``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def repository_url() -> str:
    """The course's repository URL: defined once, in pyproject.toml's [project.urls]."""
    match = re.search(r'^Repository\s*=\s*"([^"]+)"', _pyproject(), re.MULTILINE)
    if match is None:
        raise RuntimeError("pyproject.toml has no [project.urls] Repository entry")
    return match.group(1)


def _pyproject() -> str:
    return (ROOT / "pyproject.toml").read_text(encoding="utf-8")


RELEASE = "release"
"""The ``ref`` setting that means the release tag, ``v`` + ``mha_course.__version__``."""


def release_tag() -> str:
    from mha_course import __version__

    return f"v{__version__}"


def course_ref() -> str:
    """The git ref the badges and the Colab set-up cell name: pyproject.toml's
    ``[tool.mha-course] ref``; ``"release"`` (the default) is :func:`release_tag`."""
    match = re.search(r'^ref\s*=\s*"([^"]+)"', _tool_table(), re.MULTILINE)
    ref = match.group(1) if match else RELEASE
    return release_tag() if ref == RELEASE else ref


def _tool_table() -> str:
    text = _pyproject()
    start = text.find("[tool.mha-course]")
    if start < 0:
        return ""
    end = text.find("\n[", start + 1)
    return text[start : None if end < 0 else end]


def _github_path() -> str:
    """``owner/name`` of the repository on GitHub."""
    return repository_url().removeprefix("https://github.com/").rstrip("/")


def colab_url(path_in_repo: str) -> str:
    return f"https://colab.research.google.com/github/{_github_path()}/blob/{course_ref()}/{path_in_repo}"


def binder_url() -> str:
    return f"https://mybinder.org/v2/gh/{_github_path()}/{course_ref()}?urlpath=lab/tree/notebooks"


COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
BINDER_BADGE = "https://mybinder.org/badge_logo.svg"
