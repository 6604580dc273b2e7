"""What bounds a decode step (mha_course.bench.roofline): a device's memory bandwidth, from a data
sheet or measured, and the operations a call launches."""

import pytest
import torch

from mha_course import DecoderLM, bench
from mha_course.bench import roofline


def test_a_copy_counts_each_byte_read_and_written(monkeypatch):
    monkeypatch.setattr(roofline, "time_call", lambda fn, **kw: bench.Timing(0.5, 0.0, 3))
    assert bench.copy_bandwidth("cpu", mib=4) == 2 * 4 * 2**20 / 0.5


def test_a_cpu_bandwidth_is_measured_and_says_so():
    found = bench.memory_bandwidth("cpu")
    assert found.bytes_per_s > 1e8  # any machine that runs the course copies faster than that
    assert "measured here" in found.source and "thread" in found.source


@pytest.mark.parametrize(
    "name, peak",
    [
        ("NVIDIA H200", 4.8e12),
        ("NVIDIA H100 PCIe", 2.0e12),  # not the SXM's 3.35 TB/s: the first match wins
        ("NVIDIA H100 80GB HBM3", 3.35e12),
        ("NVIDIA A100-SXM4-40GB", 1.555e12),
        ("Tesla T4", 320e9),
    ],
)
def test_a_known_gpu_gets_its_data_sheet_peak(monkeypatch, name, peak):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    found = bench.memory_bandwidth("cuda")
    assert found.bytes_per_s == peak and name in found.source and "data sheet" in found.source


def test_an_unknown_gpu_is_measured(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Some New GPU")
    monkeypatch.setattr(roofline, "copy_bandwidth", lambda device: 1e12)
    assert bench.memory_bandwidth("cuda") == bench.Bandwidth(1e12, "a 128 MiB copy measured here")


def test_count_kernels_counts_operations_not_views():
    x = torch.randn(4, 4)

    def step(x):
        y = (x + 1).view(16).view(4, 4).transpose(0, 1)  # one add; three views launch nothing
        return y @ x

    assert bench.count_kernels(step, x) == {"add": 1, "mm": 1}


def test_a_decode_step_of_the_course_model_is_dozens_of_operations_per_layer():
    model = DecoderLM(50, 32, 4, 3, 64, max_len=16).eval()
    cache = model.new_cache(1)
    with torch.no_grad():
        model(torch.zeros(1, 4, dtype=torch.long), cache=cache)
    ops = bench.count_kernels(model, torch.zeros(1, 1, dtype=torch.long), cache=cache)
    assert ops["addmm"] >= 3 * 3  # at least the projections and the feed-forward's two Linears
    assert sum(ops.values()) > 8 * 3 and "embedding" in ops
