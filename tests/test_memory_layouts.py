"""Every attention path on other memory layouts than the CPU's.

CUDA's fused SDPA kernels return a (B, H, L, D) output stored as (B, L, H, D); the CPU's return
it contiguous. Code that ``.view``s a kernel's output works on one and fails on the other. Here
every kernel the modules call (torch's SDPA, linear, bmm and baddbmm, and the course's
``kernel.attention`` and ``kernel.fused_attention``) is made to return its output with other
strides (the same values), and every module must give the same outputs and gradients as with
the kernels left alone: MultiHeadAttention, the encoder and decoder layers and stacks, grouped-query
attention and DecoderLM with each position scheme, GQA, MQA and a window, with and without the KV
cache (and with the static cache of compiled decoding), in training and eval mode.
"""

import functools
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_flatten, tree_map

from mha_course import (
    Decoder,
    DecoderLayer,
    DecoderLM,
    Encoder,
    EncoderLayer,
    LayerNorm,
    MultiHeadAttention,
    RotaryEmbedding,
    kernel,
    masks,
)
from mha_course.modern import GroupedQueryAttention

f64 = torch.float64
B, L, S, E, H = 3, 5, 7, 16, 4
V, MAX_LEN = 19, 24

LAYOUTS = {
    # (..., H, L, D) stored as (..., L, H, D): what CUDA's flash and efficient kernels return
    "heads inside": lambda t: t.transpose(-3, -2).contiguous().transpose(-3, -2),
    # each matrix stored column by column
    "column-major": lambda t: t.mT.contiguous().mT,
}

KERNELS = [
    (F, "scaled_dot_product_attention"),
    (F, "linear"),
    (torch, "bmm"),
    (torch, "baddbmm"),
    (kernel, "attention"),
    (kernel, "fused_attention"),
]


def relaid(function, layout, seen: Counter):
    """``function`` with its tensor outputs (3-D and more) stored in ``layout``; ``seen`` counts
    the outputs that came back non-contiguous."""

    def store(t):
        if not isinstance(t, torch.Tensor) or t.dim() < 3:
            return t
        t = layout(t)
        seen[function.__name__] += not t.is_contiguous()
        return t

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        return tree_map(store, function(*args, **kwargs))

    return wrapper


def rand(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=f64)


def randomised(module, seed=0):
    """Every parameter random, biases and norms included, so that nothing hides."""
    module = module.to(f64)
    with torch.no_grad():
        for i, p in enumerate(module.parameters()):
            p.copy_(0.3 * rand(*p.shape, seed=seed * 1000 + i))
    return module


def padding():
    return masks.padding_mask(torch.tensor([L, 2, 0]), L)  # the last sequence is all padding


def causal():
    return ~masks.causal_mask(L, L)  # True = masked out


# ------------------------------------------------------------------ the cases, as data
# Each case: (module, inputs, call). call(module, *inputs) -> a tensor or a tuple/list of them.


def mha(need_weights, cross=False, batch_first=True, **call):
    kdim = 12 if cross else None
    module = randomised(MultiHeadAttention(E, H, kdim=kdim, vdim=kdim, batch_first=batch_first))
    q = rand(B, L, E, seed=1)
    kv = rand(B, S, 12, seed=2) if cross else q
    if not batch_first:
        q, kv = q.transpose(0, 1), kv.transpose(0, 1)
    key_padding = None
    if not cross:
        key_padding = padding()
    inputs = (q,) if not cross else (q, kv)

    def run(m, q, kv=None):
        kv = q if kv is None else kv
        return m(
            q,
            kv,
            kv,
            key_padding_mask=key_padding,
            need_weights=need_weights,
            average_attn_weights=False,
            **call,
        )

    return module, inputs, run


def encoder_layer(need_weights, norm_first):
    module = randomised(EncoderLayer(E, H, 32, dropout=0.0, norm_first=norm_first))
    return (
        module,
        (rand(B, L, E, seed=3),),
        lambda m, x: (
            m(x, src_mask=causal(), src_key_padding_mask=padding(), need_weights=True)
            if need_weights
            else m(x, src_key_padding_mask=padding())
        ),
    )


def encoder(need_weights):
    layer = EncoderLayer(E, H, 32, dropout=0.0, norm_first=True)
    module = randomised(Encoder(layer, 2, norm=LayerNorm(E)))
    return (
        module,
        (rand(B, L, E, seed=4),),
        lambda m, x: m(x, src_key_padding_mask=padding(), need_weights=need_weights),
    )


def decoder_layer(need_weights, norm_first):
    module = randomised(DecoderLayer(E, H, 32, dropout=0.0, norm_first=norm_first))
    return (
        module,
        (rand(B, L, E, seed=5), rand(B, S, E, seed=6)),
        lambda m, tgt, memory: m(
            tgt,
            memory,
            tgt_is_causal=True,
            memory_key_padding_mask=masks.padding_mask(torch.tensor([S, 3, 1]), S),
            need_weights=need_weights,
        ),
    )


def decoder(need_weights):
    module = randomised(Decoder(DecoderLayer(E, H, 32, dropout=0.0), 2, norm=LayerNorm(E)))
    return (
        module,
        (rand(B, L, E, seed=7), rand(B, S, E, seed=8)),
        lambda m, tgt, memory: m(
            tgt, memory, tgt_mask=causal(), tgt_is_causal=True, need_weights=need_weights
        ),
    )


def grouped(need_weights, kv_heads):
    module = randomised(GroupedQueryAttention(E, H, kv_heads))
    mask = masks.causal_over_cache(L, L, f64)
    rope = RotaryEmbedding(E // H).rotation(torch.arange(L), f64)
    return (
        module,
        (rand(B, L, E, seed=9),),
        lambda m, x: m.attend(x, x, x, mask, rope=rope, need_weights=need_weights),
    )


def language_model(**options):
    module = randomised(DecoderLM(V, E, H, 2, 32, MAX_LEN, **options))
    ids = torch.randint(0, V, (B, 11), generator=torch.Generator().manual_seed(10))
    return module, (), lambda m: m(ids)


def language_model_cached(static=False, **options):
    """The prompt, then one token, then three, through the KV cache, or the static cache of
    compiled decoding (inference only)."""
    module = randomised(DecoderLM(V, E, H, 2, 32, MAX_LEN, **options))
    ids = torch.randint(0, V, (B, 9), generator=torch.Generator().manual_seed(11))

    def run(m):
        cache = m.new_cache(B, static=static)
        with torch.no_grad():
            return [m(ids[:, a:b], cache=cache) for a, b in ((0, 5), (5, 6), (6, 9))]

    return module, (), run


LM_OPTIONS = {
    "learned": {},
    "rope": {"positions": "rope"},
    "alibi": {"positions": "alibi"},
    "GQA rope": {"positions": "rope", "num_kv_heads": 2},
    "MQA": {"num_kv_heads": 1},
    "window": {"window": 3},
    "GQA alibi window": {"positions": "alibi", "num_kv_heads": 2, "window": 3},
}

CASES = {
    "MHA self need_weights": functools.partial(mha, True),
    "MHA self fused": functools.partial(mha, False),
    "MHA self is_causal": functools.partial(mha, False, is_causal=True, attn_mask=causal()),
    "MHA cross need_weights": functools.partial(mha, True, cross=True),
    "MHA cross fused": functools.partial(mha, False, cross=True),
    "MHA seq first need_weights": functools.partial(mha, True, batch_first=False),
    "MHA seq first fused": functools.partial(mha, False, batch_first=False),
    "EncoderLayer post-LN need_weights": functools.partial(encoder_layer, True, False),
    "EncoderLayer pre-LN fused": functools.partial(encoder_layer, False, True),
    "Encoder need_weights": functools.partial(encoder, True),
    "Encoder fused": functools.partial(encoder, False),
    "DecoderLayer post-LN need_weights": functools.partial(decoder_layer, True, False),
    "DecoderLayer pre-LN fused": functools.partial(decoder_layer, False, True),
    "Decoder need_weights": functools.partial(decoder, True),
    "Decoder fused": functools.partial(decoder, False),
    "GQA need_weights": functools.partial(grouped, True, 2),
    "GQA fused": functools.partial(grouped, False, 2),
    "MQA need_weights": functools.partial(grouped, True, 1),
    "MQA fused": functools.partial(grouped, False, 1),
    **{
        f"DecoderLM {name}": functools.partial(language_model, **o)
        for name, o in LM_OPTIONS.items()
    },
    **{
        f"DecoderLM {name} cached": functools.partial(language_model_cached, **o)
        for name, o in LM_OPTIONS.items()
    },
    **{
        f"DecoderLM {name} static cache": functools.partial(language_model_cached, True, **o)
        for name, o in LM_OPTIONS.items()
    },
}


MODES = {  # name -> (train mode, autograd)
    "train": (True, True),
    "eval": (False, True),
    "inference": (False, False),  # no autograd: the kernel's in-place softmax
}


def outputs_and_gradients(module, inputs, call, mode):
    """The call's outputs and, with autograd, the gradients of a random projection of them with
    respect to the parameters and the inputs."""
    train, autograd = MODES[mode]
    module.train(train)
    inputs = [x.detach().clone().requires_grad_(autograd) for x in inputs]
    for p in module.parameters():
        p.grad = None
    with torch.set_grad_enabled(autograd):
        outputs = call(module, *inputs)
    outputs = [t for t in tree_flatten(outputs)[0] if isinstance(t, torch.Tensor)]
    if not any(t.requires_grad for t in outputs):
        return outputs, []
    loss = sum((t * rand(*t.shape, seed=i)).sum() for i, t in enumerate(outputs))
    loss.backward()
    grads = [p.grad for p in module.parameters()] + [x.grad for x in inputs]
    return outputs, grads


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", CASES)
def test_every_attention_path_gives_the_same_answer_on_other_memory_layouts(
    case, layout, mode, monkeypatch
):
    module, inputs, call = CASES[case]()
    expected, expected_grads = outputs_and_gradients(module, inputs, call, mode)
    seen = Counter()
    with monkeypatch.context() as patch:
        for owner, name in KERNELS:
            patch.setattr(owner, name, relaid(getattr(owner, name), LAYOUTS[layout], seen))
        got, grads = outputs_and_gradients(module, inputs, call, mode)
    assert sum(seen.values()) > 0, f"no kernel returned a non-contiguous output ({layout})"
    assert len(got) == len(expected) and len(grads) == len(expected_grads)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)
    for a, b in zip(grads, expected_grads):
        torch.testing.assert_close(a, b)
