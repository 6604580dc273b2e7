"""How fast are mha_course.MultiHeadAttention and EncoderLayer next to torch's own modules?

    python benchmarks/bench_mha.py              # B=8, E=512, H=8, L = 128 and 512, float32, CPU
    python benchmarks/bench_mha.py --threads 1  # fix the thread count (default: torch's)
    python benchmarks/bench_mha.py --quick      # a few seconds: a smoke run, not a measurement
    python benchmarks/bench_mha.py --threads 1 --cpu-time  # on a busy machine: CPU time, not wall time
    python benchmarks/bench_mha.py --device cuda --dtype bfloat16 --matrix gpu  # the GPU matrix

Both modules hold the same weights (ours is ``from_torch(theirs)``, checked to give the same
output) and are timed in the same run, in alternating rounds, so a machine that slows down
mid-run slows both. In eval mode without autograd torch runs its fused C++ kernel
(torch._native_multi_head_attention); ours is Python around torch's public ops.
Each cell is the median over rounds of the median time per call, both from
``mha_course.bench.time_alternating`` (the course's one timer, on torch.utils.benchmark, which
synchronises CUDA around every timed block); the ratio is ours / torch (below 1 = ours is faster;
the target is <= 1.05).

``--matrix gpu`` times the sizes a GPU is judged on: MultiHeadAttention at (B, L, E, H) =
(32, 128, 256, 8), (8, 512, 512, 8), (4, 2048, 1024, 16) for inference, a training step and the
per-head weights, and EncoderLayer at (8, 512, 512, 8) for inference and a training step.
"""

from __future__ import annotations

import functools

import torch

from mha_course import EncoderLayer, MultiHeadAttention
from mha_course.bench.scripts import Comparison, script_parser


def inference(m, x, pad):
    with torch.no_grad():
        m(x, x, x, key_padding_mask=pad, need_weights=False)


def training_step(m, x, pad):
    m(x, x, x, key_padding_mask=pad, need_weights=False)[0].float().sum().backward()


def forward_with_weights(m, x, pad):
    with torch.no_grad():
        m(x, x, x, key_padding_mask=pad, need_weights=True, average_attn_weights=False)


def layer_inference(m, x, pad):
    with torch.no_grad():
        m(x, src_key_padding_mask=pad)


def layer_training_step(m, x, pad):
    m(x, src_key_padding_mask=pad).float().sum().backward()


# name -> (module kind, train mode, with a key padding mask, the call timed on (m, x, pad))
CPU_CASES = {
    "inference (eval, no_grad, need_weights=False)": ("mha", False, False, inference),
    "training step (forward + backward, need_weights=False)": ("mha", True, False, training_step),
    "forward with per-head weights (eval, no_grad)": ("mha", False, False, forward_with_weights),
    "inference, key padding mask": ("mha", False, True, inference),
    "forward with weights, key padding mask": ("mha", False, True, forward_with_weights),
}
GPU_CASES = {
    "MHA inference": ("mha", False, False, inference),
    "MHA training step": ("mha", True, False, training_step),
    "MHA with per-head weights": ("mha", False, False, forward_with_weights),
    "EncoderLayer inference": ("layer", False, False, layer_inference),
    "EncoderLayer training step": ("layer", True, False, layer_training_step),
}
# (B, L, E, H) and the cases timed at that size
CPU_SIZES = [((8, 128, 512, 8), CPU_CASES), ((8, 512, 512, 8), CPU_CASES)]
GPU_MHA_CASES = {name: case for name, case in GPU_CASES.items() if case[0] == "mha"}
GPU_SIZES = [
    ((32, 128, 256, 8), GPU_MHA_CASES),
    ((8, 512, 512, 8), GPU_CASES),
    ((4, 2048, 1024, 16), GPU_MHA_CASES),
]
QUICK_SIZES = [((2, 16, 64, 4), CPU_CASES)]


def modules(kind: str, E: int, H: int, device, dtype):
    """torch's module and ours, the same weights, on ``device`` in ``dtype``."""
    if kind == "mha":
        theirs = torch.nn.MultiheadAttention(E, H, batch_first=True)
        ours = MultiHeadAttention.from_torch(theirs)
    else:
        theirs = torch.nn.TransformerEncoderLayer(E, H, 4 * E, dropout=0.0, batch_first=True)
        ours = EncoderLayer.from_torch(theirs)
    return theirs.to(device, dtype), ours.to(device, dtype)


def check_same_output(kind, theirs, ours, x, pad) -> None:
    theirs.eval(), ours.eval()
    with torch.no_grad():
        if kind == "mha":
            got, expected = (
                ours(x, x, x, key_padding_mask=pad)[0],
                theirs(x, x, x, key_padding_mask=pad)[0],
            )
        else:
            got, expected = ours(x, src_key_padding_mask=pad), theirs(x, src_key_padding_mask=pad)
    real = slice(None) if pad is None else ~pad
    tolerance = 1e-4 if x.dtype == torch.float32 else 5e-2
    torch.testing.assert_close(got[real], expected[real], atol=tolerance, rtol=tolerance)


def main() -> None:
    parser = script_parser(__doc__, quick_help="small sizes, 1 round: a smoke run")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", default="float32", help="float32, float16 or bfloat16")
    parser.add_argument("--matrix", choices=("cpu", "gpu"), default="cpu", help="which sizes")
    args = parser.parse_args()
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    if device.type == "cuda":  # float32 means float32: no TensorFloat-32 matmuls
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    sizes = QUICK_SIZES if args.quick else (GPU_SIZES if args.matrix == "gpu" else CPU_SIZES)
    comparison = Comparison.from_args(args, min_run_time=0.5)

    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(comparison.describe(args.dtype, where))
    print(
        f"{'case':54} {'B':>3} {'L':>5} {'E':>5} {'H':>3} {'torch ms':>9} {'ours ms':>9} {'ratio':>6}"
    )
    torch.manual_seed(0)
    for (B, L, E, H), cases in sizes:
        x = torch.randn(B, L, E, device=device, dtype=dtype)
        lengths = L - torch.arange(B, device=device) * L // (2 * B)  # L, ..., just over L/2
        padding = torch.arange(L, device=device) >= lengths[:, None]  # (B, L), True = padding
        built = {}
        for case, (kind, train, padded, call) in cases.items():
            if kind not in built:
                built[kind] = modules(kind, E, H, device, dtype)
                check_same_output(kind, *built[kind], x, padding)
            theirs, ours = built[kind]
            pad = padding if padded else None
            t_torch, t_ours = comparison.medians(
                functools.partial(call, theirs.train(train), x, pad),
                functools.partial(call, ours.train(train), x, pad),
            )
            print(
                f"{case:54} {B:>3} {L:>5} {E:>5} {H:>3} {t_torch * 1e3:>9.3f} {t_ours * 1e3:>9.3f} "
                f"{t_ours / t_torch:>6.3f}"
            )


if __name__ == "__main__":
    main()
