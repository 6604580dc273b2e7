"""How fast is lesson 09's Triton kernel next to SDPA's flash kernel, lesson 06's blocks and the
attention written out?

    python benchmarks/bench_flash.py --device cuda                    # float16, L = 512 .. 8192
    python benchmarks/bench_flash.py --device cuda --dtype bfloat16
    python benchmarks/bench_flash.py --device cuda --quick            # a smoke run
    python benchmarks/bench_flash.py                                  # CPU: proves the script runs

The forward pass of self-attention, q, k, v (B, H, L, D) with D = 64 and H = 32 (E = 2048), and
B · L = 16,384 tokens (B = 32 at L = 512, 2 at L = 8192), causal and not, four ways, timed in the
same run in alternating rounds (``mha_course.bench``'s timer on torch.utils.benchmark, medians):

* SDPA flash: ``torch.nn.functional.scaled_dot_product_attention`` with its flash kernel forced
  (``sdpa_kernel(SDPBackend.FLASH_ATTENTION)``), the baseline;
* Triton: ``mha_course.triton_attention.flash_attention``, lesson 09's kernel (its tile sizes are
  autotuned at its first call for each length: ``TRITON_PRINT_AUTOTUNING=1`` prints the choice);
* blocks: ``mha_course.reference.attention_in_blocks``, lesson 06's online softmax over blocks of
  256 keys, in PyTorch;
* written out: ``mha_course.scaled_dot_product_attention``, softmax(q kᵀ / √D) v with the
  (B, H, L, L) weights in memory.

Each cell is TFLOP/s: 4 · B · H · L² · D floating-point operations (two matmuls), half that when
causal (the convention of FlashAttention's benchmarks), over the median time; "× flash" is the
speed next to SDPA flash's (above 1 = faster). Before timing, every output is checked against
SDPA's. The course's target: Triton ≥ 0.7 × flash at L = 4096, bfloat16, causal, on an H100.

On a CPU the Triton kernel runs in Triton's interpreter, one program at a time in NumPy, at tiny
sizes: those numbers prove that the script works, nothing about the kernel's speed.
"""

from __future__ import annotations

import functools
import math
import os

import torch
import torch.nn.functional as F

from mha_course import reference, scaled_dot_product_attention
from mha_course.bench.scripts import Comparison, script_parser

D, H, TOKENS = 64, 32, 16_384
LENGTHS = [512, 1024, 2048, 4096, 8192]
QUICK_LENGTHS = [512, 2048]
CPU_SIZE = {"B": 1, "H": 2, "lengths": [32, 64]}  # the interpreter: tiny
BLOCK_SIZE = 256  # lesson 06's blocks of keys
TOLERANCE = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 3e-2}


def sdpa_flash(q, k, v, is_causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)


def triton_flash(q, k, v, is_causal):
    from mha_course.triton_attention import flash_attention

    return flash_attention(q, k, v, is_causal=is_causal)


def blocks(q, k, v, is_causal):
    return reference.attention_in_blocks(q, k, v, BLOCK_SIZE, is_causal=is_causal)


def written_out(q, k, v, is_causal):
    return scaled_dot_product_attention(q, k, v, is_causal=is_causal)[0]


IMPLEMENTATIONS = {
    "SDPA flash": sdpa_flash,
    "Triton": triton_flash,
    "blocks": blocks,
    "written out": written_out,
}
BASELINE = "SDPA flash"


def runnable(name, call, q, k, v, is_causal, expected) -> bool:
    """Whether ``call`` gives SDPA's answer here (False, with a line, where it runs out of
    memory); a wrong answer stops the script."""
    try:
        with torch.no_grad():
            got = call(q, k, v, is_causal)
    except torch.OutOfMemoryError:
        print(f"  {name}: out of memory at this size, left out")
        return False
    tolerance = TOLERANCE[q.dtype]
    error = (got.float() - expected.float()).abs().max().item()
    if not error <= tolerance:
        raise SystemExit(f"{name} differs from SDPA by {error:.2e} (> {tolerance}): not timed")
    return True


def row(comparison, B, heads, L, is_causal, device, dtype) -> str:
    """One line of the table: each implementation's TFLOP/s, then its speed next to flash's."""
    q, k, v = (torch.randn(B, heads, L, D, device=device, dtype=dtype) for _ in range(3))
    with torch.no_grad():
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    calls = {
        name: functools.partial(call, q, k, v, is_causal)
        for name, call in IMPLEMENTATIONS.items()
        if runnable(name, call, q, k, v, is_causal, expected)
    }
    with torch.no_grad():
        seconds = comparison.timings(calls)
    work = 4 * B * heads * L * L * D / (2 if is_causal else 1)
    rate = {name: work / seconds.get(name, math.nan) / 1e12 for name in IMPLEMENTATIONS}
    cells = "".join(f"{rate[name]:>12.3g}" for name in IMPLEMENTATIONS)
    ratios = "".join(f"{rate[name] / rate[BASELINE]:>12.2f}" for name in list(IMPLEMENTATIONS)[1:])
    return f"{str(is_causal):>6} {B:>3} {L:>5} {cells}   {ratios}"


def main() -> None:
    parser = script_parser(__doc__, quick_help=f"L = {QUICK_LENGTHS}, 1 round: a smoke run")
    parser.add_argument("--device", default="cpu", help="cuda, or cpu (the interpreter, tiny)")
    parser.add_argument(
        "--dtype", default=None, help="float16 (default on cuda), bfloat16, float32"
    )
    args = parser.parse_args()
    device = torch.device(args.device)
    on_cpu = device.type == "cpu"
    if on_cpu:  # before anything imports Triton, which reads it then
        os.environ["TRITON_INTERPRET"] = "1"
        args.rounds = min(args.rounds, 2)
    dtype = getattr(torch, args.dtype or ("float32" if on_cpu else "float16"))
    comparison = Comparison.from_args(args, min_run_time=0.05 if on_cpu else 0.2)
    lengths = CPU_SIZE["lengths"] if on_cpu else (QUICK_LENGTHS if args.quick else LENGTHS)
    B_of = (lambda L: CPU_SIZE["B"]) if on_cpu else (lambda L: max(1, TOKENS // L))
    heads = CPU_SIZE["H"] if on_cpu else H

    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(comparison.describe(str(dtype).removeprefix("torch."), where, f"H = {heads}, D = {D}; "))
    if on_cpu:
        print(
            "CPU: the Triton kernel runs in Triton's interpreter, at tiny sizes. These numbers "
            "prove that the script runs; they say nothing about the kernel's speed.\n"
        )
    names = list(IMPLEMENTATIONS)
    print(f"{'':16} {'TFLOP/s':^{12 * len(names)}}   {'× flash':^{12 * (len(names) - 1)}}")
    print(
        f"{'causal':>6} {'B':>3} {'L':>5} "
        + "".join(f"{name:>12}" for name in names)
        + "   "
        + "".join(f"{name:>12}" for name in names[1:])
    )
    torch.manual_seed(0)
    for is_causal in (False, True):
        for L in lengths:
            print(row(comparison, B_of(L), heads, L, is_causal, device, dtype), flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
