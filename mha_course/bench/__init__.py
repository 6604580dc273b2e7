"""An honest benchmark of multi-head attention: correctness first, then time, memory and FLOP/s.

For every implementation, sequence length, dtype and mode ("forward" or "forward+backward"), within
a time budget: a correctness gate against a float64 reference (a wrong implementation is never
timed), peak memory in an untimed call, then the median time and its interquartile range with
``torch.utils.benchmark``. What the device lacks, what would not fit in its memory and what the
budget cannot afford is recorded, with the reason, and not run. FLOPs are counted analytically
and compared with the machine's square-matmul rate, measured in the same run.

The package, one job per module:

* :mod:`.measure`: the one timer (:func:`time_call`, :func:`time_alternating`), peak memory, the
  matmul rate, the environment;
* :mod:`.implementations`: what lesson 06 compares (:func:`standard_implementations`);
* :mod:`.case`: one case (an implementation at a dtype, mode and length): its float64 reference,
  the correctness gate, its measurement;
* :mod:`.device_profile`: the device: what it supports, its memory, its measured rates
  (:func:`describe_device`);
* :mod:`.plan`: the predictions that fit a sweep to the device's memory and a time budget;
* :mod:`.sweep`: :func:`run_sweep` (``budget_s=`` to fit a time budget), :func:`quick_sweep`,
  :func:`standard_sweep`;
* :mod:`.report`: :func:`to_table`, :func:`summary`, :func:`skipped` (what was not measured,
  and why), :func:`ratio`, :func:`growth_exponent`, :func:`to_csv`/:func:`to_json`, :func:`load`;
* :mod:`.plot`: :func:`plot_sweep`, :func:`line_styles`;
* :mod:`.cli`: ``python -m mha_course.bench`` (``--quick`` for a small sweep, ``--help``).
"""

from .cli import main
from .device_profile import DeviceProfile, describe_device
from .implementations import Implementation, standard_implementations
from .measure import (
    Timing,
    environment,
    matmul_rate,
    memory_method,
    peak_memory,
    time_alternating,
    time_call,
)
from .plot import line_styles, plot_sweep
from .records import (
    BACKWARD,
    BASELINE,
    FORWARD,
    NOISY,
    TOLERANCE,
    TOO_BIG,
    TOO_SLOW,
    Environment,
    Result,
    Sweep,
    mha_flops,
)
from .report import (
    growth_exponent,
    load,
    ratio,
    skipped,
    skipped_report,
    summary,
    to_csv,
    to_json,
    to_table,
)
from .sweep import default_budget, default_dtypes, quick_sweep, run_sweep, standard_sweep

__all__ = [
    "FORWARD",
    "BACKWARD",
    "BASELINE",
    "TOLERANCE",
    "NOISY",
    "TOO_SLOW",
    "TOO_BIG",
    "Environment",
    "Result",
    "Sweep",
    "Implementation",
    "standard_implementations",
    "DeviceProfile",
    "describe_device",
    "run_sweep",
    "quick_sweep",
    "standard_sweep",
    "default_budget",
    "default_dtypes",
    "Timing",
    "time_call",
    "time_alternating",
    "peak_memory",
    "memory_method",
    "matmul_rate",
    "mha_flops",
    "environment",
    "to_table",
    "to_csv",
    "to_json",
    "load",
    "plot_sweep",
    "line_styles",
    "ratio",
    "growth_exponent",
    "summary",
    "skipped",
    "skipped_report",
    "main",
]
