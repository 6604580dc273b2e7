"""How fast does the course's DecoderLM generate: without the KV cache, with it, compiled, and
next to transformers' GPT-2 of the same shape?

    python benchmarks/bench_generate.py                      # small model, CPU, float32
    python benchmarks/bench_generate.py --compile            # + compiled decoding, both libraries
    python benchmarks/bench_generate.py --device cuda --dtype bfloat16 --size gpt2-small --compile
    python benchmarks/bench_generate.py --batch 8 --threads 1
    python benchmarks/bench_generate.py --quick              # a smoke run, not a measurement

Sizes: ``small`` (4 layers, d_model 128, 4 heads, vocabulary 96; 16-token prompt, 384 new tokens)
and ``gpt2-small`` (12 layers, d_model 768, 12 heads, vocabulary 50,257, feed-forward 3,072;
64-token prompt, 256 new tokens). Every generation is greedy, from the same random prompt, with
random weights in eval mode; max_len (the static caches' length) is prompt + new tokens.

Rows, timed in the same run in alternating rounds (``mha_course.bench.time_alternating``,
medians; ``--cpu-time`` for CPU time on a busy machine):

* ours, eager, no cache: ``generate(..., use_cache=False)``, each step runs the whole sequence;
* ours, eager, KV cache: ``generate(...)``;
* ours, compiled, static cache: ``generate(..., compile=True)`` (with ``--compile``);
* transformers' ``GPT2LMHeadModel`` (a ``GPT2Config`` of the same shape, random weights),
  ``generate(do_sample=False, cache_implementation="static")``: eager (``disable_compile=True``),
  and with ``--compile`` compiled as the installed transformers documents it (its automatic
  compilation of the decoding step with a static cache, ``CompileConfig``; on the CPU that needs
  its ``_compile_all_devices`` flag). Where the installed version cannot run a static cache, its
  default cache, and the row says so.

Our rows must give the same tokens (in float32; in half precision they may differ, and the
script says whether they do). The first call of a compiled row compiles; its time is printed as
"first call". Ratios are tokens/s against tokens/s: ours / transformers for the matching rows,
and each of ours against our eager cached row.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported

import torch

from mha_course import DecoderLM, generate
from mha_course.bench.scripts import Comparison, device_name, script_parser


@dataclass(frozen=True)
class Size:
    vocab_size: int
    d_model: int
    nhead: int
    num_layers: int
    dim_feedforward: int
    prompt: int
    new: int


SIZES = {
    "small": Size(96, 128, 4, 4, 512, prompt=16, new=384),
    "gpt2-small": Size(50257, 768, 12, 12, 3072, prompt=64, new=256),
}
QUICK_NEW = 24


def ours(size: Size, max_len: int, device, dtype) -> DecoderLM:
    torch.manual_seed(0)
    shape = (size.vocab_size, size.d_model, size.nhead, size.num_layers, size.dim_feedforward)
    return DecoderLM(*shape, max_len=max_len).to(device, dtype).eval()


def theirs(size: Size, max_len: int, device, dtype):
    """transformers' GPT-2 of the same shape, random weights, no end-of-text token to stop at."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=size.vocab_size,
        n_positions=max_len,
        n_embd=size.d_model,
        n_layer=size.num_layers,
        n_head=size.nhead,
        n_inner=size.dim_feedforward,
        bos_token_id=None,
        eos_token_id=None,
    )
    return GPT2LMHeadModel(config).to(device, dtype).eval()


def transformers_call(model, prompt, new: int, compiled: bool):
    """A call of transformers' generate with its static cache (compiled as it documents it, or
    eager), or, where that fails on the installed version, with its default cache. Returns what
    it runs, the call, and the seconds its first call took (a compiled one compiles then)."""
    from transformers import GenerationConfig

    base = dict(do_sample=False, max_new_tokens=new, min_new_tokens=new, pad_token_id=0)
    attempts = []
    if compiled:
        from transformers import CompileConfig

        compile_config = CompileConfig()  # mode="reduce-overhead"
        compile_config._compile_all_devices = prompt.device.type != "cuda"
        attempts.append(("static cache, compiled", {"compile_config": compile_config}))
    attempts.append(("static cache, eager", {"disable_compile": True}))
    attempts.append(("default cache, eager", {}))
    for label, extra in attempts:
        static = {"cache_implementation": "static"} if "static" in label else {}
        config = GenerationConfig(**base, **static, **extra)

        def call(config=config):
            with torch.no_grad():
                return model.generate(prompt, generation_config=config)

        try:
            seconds = first_call_seconds(call)
        except Exception as error:  # what this version cannot do, in its own words
            print(f"transformers, {label}: not run ({type(error).__name__}: {error})")
            continue
        return label, call, seconds
    raise SystemExit("transformers' generate did not run")


def first_call_seconds(call) -> float:
    """Seconds of a first call (a compiled row compiles in it), synchronised."""
    start = time.perf_counter()
    call()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> None:
    parser = script_parser(__doc__, quick_help=f"{QUICK_NEW} new tokens, 1 round: a smoke run")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--size", default="small", choices=tuple(SIZES))
    parser.add_argument("--compile", action="store_true", help="also the compiled rows")
    parser.add_argument("--batch", type=int, default=1, help="sequences generated at once")
    args = parser.parse_args()
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    if device.type == "cuda":  # float32 means float32: no TensorFloat-32 matmuls
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(args.threads)
    size = SIZES[args.size]
    new = QUICK_NEW if args.quick else size.new
    max_len = size.prompt + new
    comparison = Comparison.from_args(args, min_run_time=0.5)

    model = ours(size, max_len, device, dtype)
    reference = theirs(size, max_len, device, dtype)
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, size.vocab_size, (args.batch, size.prompt), generator=g).to(device)

    calls = {
        "ours, eager, no cache": lambda: generate(model, prompt, new, top_k=1, use_cache=False),
        "ours, eager, KV cache": lambda: generate(model, prompt, new, top_k=1),
    }
    if args.compile:
        calls["ours, compiled, static cache"] = lambda: generate(
            model, prompt, new, top_k=1, compile=True
        )
    first = {name: first_call_seconds(call) for name, call in calls.items() if "compiled" in name}
    tokens = {name: call() for name, call in calls.items()}
    same = all(torch.equal(t, tokens["ours, eager, KV cache"]) for t in tokens.values())
    label, their_call, seconds = transformers_call(reference, prompt, new, compiled=args.compile)
    calls[f"transformers GPT-2, {label}"] = their_call
    if "compiled" in label:
        first[f"transformers GPT-2, {label}"] = seconds
        label, eager_call, _ = transformers_call(reference, prompt, new, compiled=False)
        calls[f"transformers GPT-2, {label}"] = eager_call  # their eager row, for the ratio

    parameters = sum(p.numel() for p in model.parameters())
    print(
        comparison.describe(
            args.dtype,
            device_name(device),
            f"{args.size} ({parameters / 1e6:.1f}M parameters), batch {args.batch}, "
            f"{size.prompt}-token prompt, {new} new tokens, greedy; ",
        )
    )
    for name, seconds in first.items():
        print(f"first call (compiles) of {name}: {seconds:.1f} s")
    seconds = comparison.timings(calls)
    rate = {name: args.batch * new / s for name, s in seconds.items()}
    print(f"\n{'row':52} {'ms':>10} {'tokens/s':>10}")
    for name in calls:
        print(f"{name:52} {seconds[name] * 1e3:10.1f} {rate[name]:10.0f}")
    print()
    cached = rate["ours, eager, KV cache"]
    for name in calls:
        if name.startswith("ours") and name != "ours, eager, KV cache":
            print(f"{name} / ours, eager, KV cache: {rate[name] / cached:.2f}x")
    for ours_name, kind in (
        ("ours, eager, KV cache", "eager"),
        ("ours, compiled, static cache", "compiled"),
    ):
        peer = [n for n in calls if n.startswith("transformers") and n.endswith(kind)]
        if ours_name in calls and peer:
            print(f"{ours_name} / {peer[0]}: {rate[ours_name] / rate[peer[0]]:.2f}x")
    print(f"\nthe same tokens in all our rows: {same}")
    if not same and dtype == torch.float32:
        raise SystemExit("our rows gave different tokens in float32")


if __name__ == "__main__":
    main()
