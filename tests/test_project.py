"""The README tells the truth: its quick start is what CI runs, environment.yml installs the same
thing, and its badges and links point where the notebooks do."""

import re
import subprocess
from pathlib import Path

import pytest

from tools import authoring

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
PYPROJECT = (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def quick_start_block() -> list[str]:
    section = README.split("## Quick start", 1)[1]
    block = section.split("```", 2)[1]
    return [line for line in block.splitlines()[1:] if line.strip()]


def test_quick_start_comes_first_with_install_test_and_launch():
    assert README.index("## Quick start") < README.index("## What the course contains")
    lines = quick_start_block()
    assert "python install.py" in lines  # the right torch for the machine: tests/test_install.py
    assert "pytest" in lines
    assert any(line.startswith("jupyter lab") for line in lines)


def test_ci_runs_exactly_the_quick_start_minus_the_launch():
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    awk = re.search(r"awk '(.*?)' README.md", script, re.S).group(1)
    extracted = subprocess.run(
        ["awk", awk, "README.md"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    run = [
        line
        for line in extracted.stdout.splitlines()
        if line.strip() and not line.startswith("jupyter lab")
    ]
    assert run == [line for line in quick_start_block() if not line.startswith("jupyter lab")]


def test_environment_yml_python_satisfies_the_package():
    minimum = re.search(r'requires-python = ">=([\d.]+)"', PYPROJECT).group(1)
    python = re.search(
        r"- python=([\d.]+)", (ROOT / "environment.yml").read_text(encoding="utf-8")
    ).group(1)
    assert tuple(map(int, python.split("."))) >= tuple(map(int, minimum.split(".")))


def test_dev_extra_holds_what_the_tests_and_notebooks_import():
    dev = PYPROJECT.split("dev = [", 1)[1].split("]", 1)[0]
    for needed in (
        "pytest",
        "nbval",
        "hypothesis",
        "transformers",
        "sentence-transformers",
        "jupyterlab",
        "ruff",
    ):
        assert f'"{needed}>=' in dev


@pytest.mark.parametrize("path", authoring.solution_paths(), ids=lambda p: p.name)
def test_readme_has_each_lessons_colab_badge(path):
    assert authoring.colab_url(f"notebooks/{path.name}") in README
    assert f"](notebooks/{path.name})" in README


def test_readme_binder_badge_and_local_links_resolve():
    assert authoring.binder_url() in README
    for target in re.findall(r"\]\(([^)\s]+)\)", README):
        if not target.startswith(("http://", "https://", "#")):
            assert (ROOT / target).exists(), f"README links to a missing {target}"
