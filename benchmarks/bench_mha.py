"""How fast is mha_course.MultiHeadAttention next to torch.nn.MultiheadAttention?

    python benchmarks/bench_mha.py              # B=8, E=512, H=8, L = 128 and 512, float32
    python benchmarks/bench_mha.py --threads 1  # fix the thread count (default: torch's)
    python benchmarks/bench_mha.py --quick      # a few seconds: a smoke run, not a measurement
    python benchmarks/bench_mha.py --threads 1 --cpu-time  # on a busy machine: CPU time, not wall time

Both modules hold the same weights (ours is ``MultiHeadAttention.from_torch(theirs)``, checked to
give the same output) and are timed in the same run, in alternating rounds, so a machine that
slows down mid-run slows both. In eval mode without autograd torch runs its fused C++ kernel
(torch._native_multi_head_attention); ours is Python around torch's public ops.
Each cell is the median over rounds of the median time per call, both from
``mha_course.bench.time_alternating`` (the course's one timer, on torch.utils.benchmark); the
ratio is ours / torch (below 1 = ours is faster; the target is <= 1.05).
"""

from __future__ import annotations

import argparse
import functools

import torch

from mha_course import MultiHeadAttention
from mha_course.bench import time_alternating


def inference(m, x):
    with torch.no_grad():
        m(x, x, x, need_weights=False)


def training_step(m, x):
    m(x, x, x, need_weights=False)[0].sum().backward()


def forward_with_weights(m, x):
    with torch.no_grad():
        m(x, x, x, need_weights=True)


# name -> (train or eval mode, the call timed on a module m and an input x (B, L, E))
CASES = {
    "inference (eval, no_grad, need_weights=False)": (False, inference),
    "training step (forward + backward, need_weights=False)": (True, training_step),
    "forward with weights (eval, no_grad, need_weights=True)": (False, forward_with_weights),
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--threads", type=int, default=torch.get_num_threads(), help="torch threads"
    )
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per case")
    parser.add_argument("--quick", action="store_true", help="small sizes, 1 round: a smoke run")
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time the process's CPU time (with --threads 1: robust to other programs)",
    )
    args = parser.parse_args()
    B, E, H = (2, 64, 4) if args.quick else (8, 512, 8)
    lengths = (16,) if args.quick else (128, 512)
    rounds, min_run_time = (1, 0.05) if args.quick else (args.rounds, 0.5)

    clock = "CPU time" if args.cpu_time else "wall time"
    print(
        f"torch {torch.__version__}, {args.threads} thread(s), float32, CPU, {clock}; "
        f"B={B}, E={E}, H={H}; median of {rounds} alternating round(s)\n"
    )
    print(f"{'case':58} {'L':>4} {'torch ms':>9} {'ours ms':>9} {'ratio':>6}")
    torch.manual_seed(0)
    for L in lengths:
        theirs = torch.nn.MultiheadAttention(E, H, batch_first=True)
        ours = MultiHeadAttention.from_torch(theirs)
        x = torch.randn(B, L, E)
        with torch.no_grad():
            torch.testing.assert_close(ours(x, x, x)[0], theirs(x, x, x)[0], atol=1e-4, rtol=1e-4)
        for case, (train, call) in CASES.items():
            modules = {"torch": theirs.train(train), "ours": ours.train(train)}
            timings = time_alternating(
                {name: functools.partial(call, m, x) for name, m in modules.items()},
                rounds=rounds,
                threads=args.threads,
                min_run_time=min_run_time,
                clock="cpu" if args.cpu_time else "wall",
            )
            t_torch, t_ours = timings["torch"].median, timings["ours"].median
            print(
                f"{case:58} {L:>4} {t_torch * 1e3:>9.2f} {t_ours * 1e3:>9.2f} {t_ours / t_torch:>6.3f}"
            )


if __name__ == "__main__":
    main()
