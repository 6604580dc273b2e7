"""Device, seeding and environment helpers."""

import torch

from mha_course import get_device, seed_everything
from mha_course.utils import device_report, environment_report, machine


def test_device_prefers_what_it_is_told(monkeypatch):
    monkeypatch.setenv("MHA_COURSE_DEVICE", "cpu")
    assert get_device() == torch.device("cpu")
    monkeypatch.delenv("MHA_COURSE_DEVICE")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    if not torch.cuda.is_available() and torch.backends.mps.is_available():
        expected = "mps"
    assert get_device().type == expected


def test_seed_everything_repeats_the_same_numbers():
    seed_everything(3)
    a = torch.randn(4)
    seed_everything(3)
    assert torch.equal(a, torch.randn(4))


def test_environment_report_is_the_machine_in_three_lines():
    m = machine()
    python, torch_line, device = environment_report().splitlines()
    assert python == f"Python   {m.python_version} ({m.system} {m.arch})"
    assert torch_line.startswith(f"torch    {torch.__version__}")
    assert torch_line.endswith(f", CUDA {m.cuda_version}" if m.cuda_version else ", CPU build")
    assert device == f"device   {device_report()}"


def test_device_report_names_the_device():
    assert (
        device_report(torch.device("cpu"))
        == f"cpu: {torch.get_num_threads()} threads (no GPU found)"
    )
    m = machine("cpu")
    assert m.device == "cpu" and m.device_name and m.device_memory is None
    assert m.threads == torch.get_num_threads()
