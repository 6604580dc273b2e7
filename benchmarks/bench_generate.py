"""How much faster is generation with the KV cache than without it?

    python benchmarks/bench_generate.py             # 4 layers, d_model 128, 16-token prompt, 384 new tokens
    python benchmarks/bench_generate.py --threads 1
    python benchmarks/bench_generate.py --quick     # a smoke run, not a measurement

The same ``mha_course.DecoderLM`` (random weights, eval mode, float32) generates greedily from
the same prompt twice, with ``use_cache=True`` and ``use_cache=False``, timed in alternating
rounds (``mha_course.bench.time_alternating``, medians). The two must give identical tokens.
Without the cache each new token runs the whole sequence again (the work grows with the length
squared over a generation); with it, each step runs one token against the cached keys and
values. The ratio is cached / uncached time (below 1 = the cache is faster; the course's target
is at most 1/3 at this size on a 2-core laptop CPU).
"""

from __future__ import annotations

import torch

from mha_course import DecoderLM, generate
from mha_course.bench.scripts import Comparison, script_parser

SIZE = {"vocab_size": 96, "d_model": 128, "nhead": 4, "num_layers": 4, "dim_feedforward": 512}
PROMPT, NEW = 16, 384
QUICK_PROMPT, QUICK_NEW = 8, 24


def main() -> None:
    parser = script_parser(__doc__, quick_help=f"{QUICK_NEW} new tokens, 1 round: a smoke run")
    args = parser.parse_args()
    prompt_len, new = (QUICK_PROMPT, QUICK_NEW) if args.quick else (PROMPT, NEW)
    comparison = Comparison.from_args(args, min_run_time=0.1)
    torch.manual_seed(0)
    model = DecoderLM(**SIZE, max_len=prompt_len + new).eval()
    prompt = torch.randint(0, SIZE["vocab_size"], (1, prompt_len))

    def run(use_cache: bool) -> torch.Tensor:
        return generate(model, prompt, new, top_k=1, use_cache=use_cache)

    same = torch.equal(run(True), run(False))
    print(comparison.describe("float32", "CPU", f"{prompt_len}-token prompt, {new} new tokens; "))
    print(f"model: {SIZE}, {sum(p.numel() for p in model.parameters()):,} parameters")
    uncached, cached = comparison.medians(lambda: run(False), lambda: run(True))
    print(f"{'without the cache':20} {uncached * 1e3:9.1f} ms  ({new / uncached:7.0f} tokens/s)")
    print(f"{'with the cache':20} {cached * 1e3:9.1f} ms  ({new / cached:7.0f} tokens/s)")
    print(f"ratio cached / uncached: {cached / uncached:.3f}  (speed-up {uncached / cached:.1f}x)")
    print(f"same tokens with and without the cache: {same}")
    if not same:
        raise SystemExit("the cached and uncached generations differ")


if __name__ == "__main__":
    main()
