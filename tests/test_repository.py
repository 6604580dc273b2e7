"""One place for where the course lives: pyproject.toml's repository URL and ref. `set-repo`
re-points every copy (badges, Colab set-up cells, README, INSTRUCTORS.md) and leaves none behind;
the badges name the release tag v<mha_course.__version__>."""

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import mha_course
from tools import authoring

ROOT = Path(__file__).resolve().parent.parent
OWNER_NAME = authoring.repository_url().removeprefix("https://github.com/")


def tracked_text_files(root: Path) -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()
    files = []
    for name in listed:
        path = root / name
        if path.is_file() and path.suffix not in (".png", ".svg", ".jpg", ".safetensors"):
            files.append(path)
    return files


def test_the_badges_name_the_release_tag_of_this_version():
    assert authoring.course_ref() == f"v{mha_course.__version__}" == authoring.release_tag()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    refs = set(re.findall(r"colab\.research\.google\.com/github/[^/]+/[^/]+/blob/([^/]+)/", readme))
    refs |= set(re.findall(r"mybinder\.org/v2/gh/[^/]+/[^/]+/([^?/)]+)", readme))
    assert refs == {f"v{mha_course.__version__}"}


def test_the_repository_is_named_only_where_set_repo_rewrites_it():
    """Every file that names the repository is one set-repo rewrites (its URL is stamped into the
    notebooks; the README's and INSTRUCTORS.md's links are re-pointed)."""
    rewritten = {"pyproject.toml", *authoring.POINTED_FILES}
    for path in tracked_text_files(ROOT):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith("notebooks/") and path.suffix == ".ipynb":
            continue  # stamped: tests/test_authoring.py checks badges and set-up cells
        if OWNER_NAME in path.read_text(encoding="utf-8", errors="replace"):
            assert relative in rewritten, f"{relative} names {OWNER_NAME}: set-repo would miss it"


def authoring_of(root: Path):
    """The authoring tool of the copy at ``root`` (its ROOT is the copy; the course package it
    imports is this one, the same code)."""
    spec = importlib.util.spec_from_file_location("fork_authoring", root / "tools" / "authoring.py")
    module = importlib.util.module_from_spec(spec)
    path = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = path
    return module


@pytest.fixture(scope="module")
def fork(tmp_path_factory):
    """A copy of the course's files, pointed at a fork with set-repo: (its root, its authoring)."""
    copy = tmp_path_factory.mktemp("fork")
    for path in tracked_text_files(ROOT):
        target = copy / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    shutil.copytree(ROOT / "images", copy / "images")  # the pictures the notebooks carry
    tool = authoring_of(copy)
    tool.set_repo("someone/course-fork@spring-2027")
    return copy, tool


def test_set_repo_leaves_no_copy_of_the_old_repository_or_ref(fork):
    fork, _ = fork
    old_ref = authoring.course_ref()
    for path in tracked_text_files(ROOT):
        text = (fork / path.relative_to(ROOT)).read_text(encoding="utf-8", errors="replace")
        assert OWNER_NAME not in text, f"{path.name} still names {OWNER_NAME}"
        for url in re.findall(r"https://[^\s)\"']+", text):
            if "someone/course-fork" in url:
                assert old_ref not in url, f"{path.name}: {url}"


def test_set_repo_points_badges_set_up_cells_and_links_at_the_fork(fork):
    fork, tool = fork
    pyproject = (fork / "pyproject.toml").read_text(encoding="utf-8")
    assert 'Repository = "https://github.com/someone/course-fork"' in pyproject
    assert 'ref = "spring-2027"' in pyproject
    readme = (fork / "README.md").read_text(encoding="utf-8")
    colab = "https://colab.research.google.com/github/someone/course-fork/blob/spring-2027/"
    assert f"{colab}notebooks/00_setup.ipynb" in readme
    assert "https://mybinder.org/v2/gh/someone/course-fork/spring-2027?urlpath=" in readme
    instructors = (fork / "INSTRUCTORS.md").read_text(encoding="utf-8")
    assert "mybinder.org/v2/gh/someone/course-fork/spring-2027" in instructors
    for path in sorted((fork / "notebooks").rglob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        relative = path.relative_to(fork).as_posix()
        assert nb.cells[0].source.startswith(
            f"[![Open In Colab]({authoring.COLAB_BADGE})]({colab}{relative})"
        )
        setup = next(c for c in nb.cells if c.cell_type == "code")
        assert "git+https://github.com/someone/course-fork@spring-2027" in setup.source
        assert setup.outputs, "set-repo keeps the outputs"
    assert tool.stale_notebooks() == []


def test_set_repo_rejects_what_is_not_owner_slash_name():
    for spec in ("mha-course", "a/b/c", "https://github.com/a/b", "a/b@"):
        with pytest.raises(ValueError, match="OWNER/NAME"):
            authoring.set_repo(spec)
