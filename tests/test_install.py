"""install.py, the README's install step: the right torch for the machine, and a plain word when
PyTorch's CPU index cannot be reached. (CI runs it for real in the quick start.)"""

import re
from pathlib import Path

import pytest

import install

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
TORCH = f"torch=={install.TORCH_VERSION}"
COURSE = ["-e", f"{ROOT}[dev]"]


def test_a_linux_laptop_without_a_gpu_gets_the_cpu_build_from_pytorchs_index():
    commands, notes = install.plan(None, "Linux", gpu=False, cpu_index_problem=None)
    assert commands == [[TORCH, "--index-url", install.CPU_INDEX], COURSE]
    assert "CPU build" in notes[0]


def test_without_pytorchs_index_it_says_so_and_what_that_costs():
    commands, notes = install.plan(None, "Linux", gpu=False, cpu_index_problem="Name not resolved")
    assert commands == [[TORCH], COURSE]
    assert "cannot be reached (Name not resolved)" in notes[0]
    assert "CUDA build" in notes[0] and "--index-url " + install.CPU_INDEX in notes[0]


@pytest.mark.parametrize("system, gpu", [("Linux", True), ("Darwin", False), ("Windows", False)])
def test_where_pypis_torch_is_the_right_build_it_comes_from_pypi(system, gpu):
    commands, _ = install.plan(None, system, gpu=gpu, cpu_index_problem=None)
    assert commands == [[TORCH], COURSE]


def test_a_recent_enough_torch_is_kept_and_an_old_one_replaced():
    commands, notes = install.plan(("2.11.0+cu130", True), "Linux", False, None)
    assert commands == [COURSE] and "keeping" in notes[0] and "CUDA" in notes[0]
    old = ".".join(map(str, (install.MIN_TORCH[0], install.MIN_TORCH[1] - 1, 0)))
    commands, _ = install.plan((old, False), "Linux", False, None)
    assert commands[0][0] == TORCH


def test_an_unreachable_index_is_reported_not_raised():
    problem = install.reachable("http://127.0.0.1:9/whl/cpu/torch/", timeout=5)
    assert problem  # nothing listens on the discard port


def test_the_installer_agrees_with_pyproject_environment_and_the_docs():
    bound = re.search(r'"torch>=([0-9.]+)"', PYPROJECT).group(1)
    assert tuple(map(int, bound.split("."))) == install.MIN_TORCH
    environment = (ROOT / "environment.yml").read_text(encoding="utf-8")
    assert f"- {TORCH}\n" in environment and f"--extra-index-url {install.CPU_INDEX}" in environment
    assert f"- -e .[{install.EXTRAS}]" in environment
    from mha_course import doctor

    assert doctor.MIN_TORCH == install.MIN_TORCH
    for doc in ("README.md", "INSTRUCTORS.md"):
        text = (ROOT / doc).read_text(encoding="utf-8")
        assert "python install.py" in text
        oldest = ".".join(map(str, install.MIN_TORCH))
        for version in re.findall(r"torch[= ]=?=?(\d+\.\d+\.\d+)", text):
            assert version in (install.TORCH_VERSION, oldest, "2.11.0"), f"{doc}: torch {version}"


def test_dry_run_says_what_it_would_run_and_runs_nothing(monkeypatch, capsys):
    monkeypatch.setattr(install, "installed_torch", lambda: None)
    monkeypatch.setattr(install, "has_nvidia_gpu", lambda: False)
    monkeypatch.setattr(install.platform, "system", lambda: "Linux")
    monkeypatch.setattr(install, "reachable", lambda url: "Name or service not known")
    ran = []
    monkeypatch.setattr(install, "pip_install", ran.append)
    assert install.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "cannot be reached (Name or service not known)" in out
    assert f"would run: pip install {TORCH}\n" in out and "would run: pip install -e" in out
    assert ran == []
