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
  the correctness gate, its measurement; :func:`gate` (the gate alone), :func:`refusal` (why SDPA refused a forced kernel);
* :mod:`.device_profile`: the device: what it supports, its memory, its measured rates
  (:func:`describe_device`);
* :mod:`.plan`: the predictions that fit a sweep to the device's memory and a time budget;
* :mod:`.sweep`: :func:`run_sweep` (``budget_s=`` to fit a time budget), :func:`quick_sweep`,
  :func:`standard_sweep`;
* :mod:`.report`: :func:`to_table`, :func:`summary`, :func:`skipped` (what was not measured,
  and why), :func:`ratio`, :func:`growth_exponent`, :func:`to_csv`/:func:`to_json`, :func:`load`;
* :mod:`.plot`: :func:`plot_sweep`, :func:`line_styles`;
* :mod:`.roofline`: what bounds a step of generation (lesson 07): :func:`memory_bandwidth`,
  :func:`count_kernels`;
* :mod:`.cli`: ``python -m mha_course.bench`` (``--quick`` for a small sweep, ``--help``).
"""

from . import device_profile, implementations, measure, plot, records, report, roofline, sweep
from .case import Verdict, gate, refusal
from .cli import main
from .device_profile import *  # noqa: F403  (a module's __all__ lists what it exports)
from .implementations import *  # noqa: F403
from .measure import *  # noqa: F403
from .plot import *  # noqa: F403
from .records import *  # noqa: F403
from .report import *  # noqa: F403
from .roofline import *  # noqa: F403
from .sweep import *  # noqa: F403

# Every public name of the modules above (the case and the plan are the sweep's own parts).
__all__ = [
    *records.__all__,
    *implementations.__all__,
    *device_profile.__all__,
    *sweep.__all__,
    *measure.__all__,
    *report.__all__,
    *plot.__all__,
    "gate",
    "Verdict",
    "refusal",
    *roofline.__all__,
    "main",
]
