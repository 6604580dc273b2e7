"""ruff's lint and format hold over the package, the tests and the notebooks (pyproject.toml)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUFF = [sys.executable, "-m", "ruff"] if shutil.which("ruff") is None else ["ruff"]


@pytest.mark.parametrize(
    "command", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"]
)
def test_ruff(command):
    result = subprocess.run(RUFF + command, cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
