"""Compiled generation: generate(..., compile=True) decodes through a StaticKVCache with the step
under torch.compile(fullgraph=True), gives the eager tokens (greedy and sampled; learned, RoPE and
ALiBi positions; GQA, MQA, a window) and compiles once per model and shape, not once per token.

Most cases compile with a backend that counts the graphs dynamo hands it and runs them as traced
(what decides fullgraph, guards and recompilations is dynamo's tracing, the same for every
backend); one case compiles with the default backend (inductor, C++ on the CPU), the real thing.
"""

import pytest
import torch

from mha_course import DecoderLM, generate
from mha_course.cache import StaticKVCache

V = 23
PROMPT, NEW = 6, 20

SAMPLING = {
    "greedy": {"top_k": 1},
    "sampled": {"temperature": 0.9},
    "top-k sampled": {"temperature": 1.3, "top_k": 5},
}
# name -> (DecoderLM options, sampling)
CASES = {
    "learned, greedy": ({}, "greedy"),
    "learned, sampled": ({}, "sampled"),
    "RoPE, GQA, sampled": ({"positions": "rope", "num_kv_heads": 2}, "sampled"),
    "ALiBi, MQA, greedy": ({"positions": "alibi", "num_kv_heads": 1}, "greedy"),
    "RoPE, window, top-k": ({"positions": "rope", "window": 4}, "top-k sampled"),
    "learned, GQA, window, greedy": ({"num_kv_heads": 2, "window": 3}, "greedy"),
}


def small_lm(seed=0, **options):
    torch.manual_seed(seed)
    return DecoderLM(V, 32, 4, 2, 48, PROMPT + NEW, **options).eval()


class CountingBackend:
    """A torch.compile backend that counts the graphs it is given and runs them as traced."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, graph_module, example_inputs):
        self.graphs += 1
        return graph_module.forward


def run(lm, compile, sampling, seed=1, batch=2):
    prompt = torch.randint(0, V, (batch, PROMPT), generator=torch.Generator().manual_seed(0))
    generator = torch.Generator().manual_seed(seed)
    return generate(lm, prompt, NEW, generator=generator, compile=compile, **SAMPLING[sampling])


@pytest.mark.parametrize("case", CASES)
def test_compiled_generation_gives_the_eager_tokens_and_compiles_once(case):
    options, sampling = CASES[case]
    lm = small_lm(**options)
    torch.compiler.reset()
    backend = CountingBackend()
    compiled = run(lm, {"backend": backend}, sampling)
    assert torch.equal(compiled, run(lm, False, sampling))
    assert backend.graphs == 1  # NEW - 1 decode steps, one graph
    again = run(lm, {"backend": backend}, sampling, seed=2)  # same model and shapes
    assert backend.graphs == 1 and torch.equal(again, run(lm, False, sampling, seed=2))


def test_a_new_batch_size_compiles_once_more_then_no_more():
    lm = small_lm(positions="rope", num_kv_heads=2)
    torch.compiler.reset()
    backend = CountingBackend()
    for batch in (2, 3, 3, 2):
        got = run(lm, {"backend": backend}, "greedy", batch=batch)
        assert torch.equal(got, run(lm, False, "greedy", batch=batch))
    assert backend.graphs == 2


def test_the_default_compiler_gives_the_eager_tokens_and_compiles_once():
    """inductor (on the CPU, C++): greedy, then sampled with the same compiled step."""
    from torch._dynamo.utils import counters

    lm = small_lm(3, positions="alibi", num_kv_heads=2, window=5)
    torch.compiler.reset()
    counters.clear()
    for sampling in ("greedy", "sampled"):
        assert torch.equal(run(lm, True, sampling), run(lm, False, sampling))
    assert counters["stats"]["unique_graphs"] == 1


@pytest.mark.parametrize("options", [{}, {"positions": "rope", "num_kv_heads": 1, "window": 3}])
def test_the_static_cache_gives_the_logits_of_the_whole_sequence(options):
    """The prompt, then chunks, through a StaticKVCache == the whole sequence at once; the
    position is a tensor, and every forward sees max_len keys."""
    lm = small_lm(**options).double()
    ids = torch.randint(0, V, (2, 14), generator=torch.Generator().manual_seed(4))
    cache = lm.new_cache(2, static=True)
    assert isinstance(cache, StaticKVCache) and cache.position.dim() == 0
    with torch.no_grad():
        full = lm(ids)
        pieces = [lm(ids[:, a:b], cache=cache) for a, b in ((0, 5), (5, 6), (6, 7), (7, 14))]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full)
    assert cache.length == 14 and cache.key_length(1) == lm.max_len
    cache.reset()
    assert cache.length == 0


def test_compile_needs_the_cache_and_a_bool_or_options():
    lm = small_lm()
    prompt = torch.zeros(1, 2, dtype=torch.long)
    with pytest.raises(ValueError, match=r"static KV cache; it cannot run with use_cache=False"):
        generate(lm, prompt, 3, compile=True, use_cache=False)
    with pytest.raises(TypeError, match=r"compile must be a bool or a dict .* got str"):
        generate(lm, prompt, 3, compile="inductor")


@pytest.mark.gpu
def test_on_the_gpu_cuda_graphs_give_the_eager_tokens_without_a_host_sync(gpu):
    """On CUDA the step runs under mode="reduce-overhead" (CUDA graphs, replayed each token):
    the eager tokens in float32, greedy and sampled, one graph for both calls, and a replayed
    step makes no host sync. (With MHA_COURSE_GPU_TESTS_ON=cpu: the default mode, inductor.)"""
    from test_gpu import no_host_sync
    from torch._dynamo.utils import counters

    from mha_course import generation

    lm = small_lm(5, positions="rope", num_kv_heads=2, window=8).to(gpu)
    prompt = torch.randint(0, V, (2, PROMPT), generator=torch.Generator().manual_seed(0)).to(gpu)
    torch.compiler.reset()
    counters.clear()
    for sampling in ("greedy", "sampled"):
        runs = [
            generate(
                lm,
                prompt,
                NEW,
                generator=torch.Generator(gpu).manual_seed(7),
                compile=compile,
                **SAMPLING[sampling],
            )
            for compile in (True, False)
        ]
        assert torch.equal(*runs), sampling
    assert counters["stats"]["unique_graphs"] == 1
    step = generation._compiled_step(generation._compile_options(True, True, gpu))
    cache = generation._static_cache(lm, 2)
    next_id = prompt[:, :1]
    with torch.no_grad():
        lm(prompt, cache=cache)
        step(lm, next_id, cache)  # a replay of the captured step
        with no_host_sync(gpu):
            logits = step(lm, next_id, cache)
    assert logits.shape == (2, V)
