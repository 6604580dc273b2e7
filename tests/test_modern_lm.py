"""Lesson 08's language model: DecoderLM with RoPE, ALiBi, grouped-query attention and sliding
windows, against Hugging Face's Llama attention (RoPE and GQA), BLOOM's ALiBi slopes and masks
written out with loops; the KV cache with every option; torch.compile; clear errors."""

import copy
import math
from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from module_helpers import bloom_alibi_slopes, llama_attention, llama_rotary
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaAttention

from mha_course import (
    DecoderLM,
    EncoderLayer,
    MultiHeadAttention,
    RotaryEmbedding,
    generate,
    masks,
)
from mha_course import lm as lm_module
from mha_course.lm import DecoderBlock
from mha_course.modern import (
    GroupedQueryAttention,
    decoder_mask,
    kv_cache_bytes,
    sliding_window_attention,
)

f64 = torch.float64
V, E, H = 23, 32, 4
quick = settings(max_examples=15, deadline=None)


def small_lm(seed=0, **kwargs):
    torch.manual_seed(seed)
    config = dict(vocab_size=V, d_model=E, nhead=H, num_layers=2, dim_feedforward=48, max_len=40)
    lm = DecoderLM(**{**config, **kwargs}).to(f64).eval()
    with torch.no_grad():  # every parameter random, biases included, so nothing hides
        g = torch.Generator().manual_seed(seed)
        for p in lm.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g, dtype=f64))
    return lm


def allowed_by_loop(T, window):
    """Bool (T, T): query i may attend to key j, written as the definition."""
    return torch.tensor(
        [[j <= i and (window is None or i - j < window) for j in range(T)] for i in range(T)]
    )


def hugging_face_attention(attn: GroupedQueryAttention, x, *, rope, window, alibi):
    """The same layer through transformers' LlamaAttention (its projections, rotary embedding,
    key/value-head sharing and eager attention), given our weights; the window and ALiBi go in
    its additive mask, as in Mistral and BLOOM."""
    B, T, _ = x.shape
    config = LlamaConfig(
        hidden_size=E,
        num_attention_heads=H,
        num_key_value_heads=attn.num_kv_heads,
        attention_bias=True,
        rope_theta=10000.0,
    )
    config._attn_implementation = "eager"
    theirs = LlamaAttention(config, layer_idx=0).to(f64).eval()
    D = E // H
    q_w, k_w, v_w = attn.in_proj_weight.split((H * D, attn.num_kv_heads * D, attn.num_kv_heads * D))
    q_b, k_b, v_b = attn.in_proj_bias.split((H * D, attn.num_kv_heads * D, attn.num_kv_heads * D))
    with torch.no_grad():
        for proj, w, b in (
            (theirs.q_proj, q_w, q_b),
            (theirs.k_proj, k_w, k_b),
            (theirs.v_proj, v_w, v_b),
        ):
            proj.weight.copy_(w)
            proj.bias.copy_(b)
        theirs.o_proj.weight.copy_(attn.out_proj.weight)
        theirs.o_proj.bias.copy_(attn.out_proj.bias)
    position_ids = torch.arange(T)[None].expand(B, T)
    if rope:
        cos, sin = llama_rotary(config, x, position_ids)
    else:  # the identity rotation
        cos, sin = torch.ones(B, T, D, dtype=f64), torch.zeros(B, T, D, dtype=f64)
    mask = torch.zeros(1, 1, T, T, dtype=f64).masked_fill(~allowed_by_loop(T, window), -math.inf)
    if alibi:  # BLOOM adds m_h · j; under the softmax of a row, the same as -m_h · (i - j)
        slopes = bloom_alibi_slopes(H).to(f64)
        mask = mask + slopes[None, :, None, None] * torch.arange(T, dtype=f64)
    return llama_attention(theirs, x, cos.to(f64), sin.to(f64), mask)


def reference_logits(lm: DecoderLM, ids):
    """The model written out: embeddings, pre-LN blocks with Hugging Face's attention, head."""
    T = ids.size(1)
    x = lm.token_embedding(ids)
    if lm.position_embedding is not None:
        x = x + lm.position_embedding(torch.arange(T))
    ln = torch.nn.functional.layer_norm
    for block in lm.blocks:
        h = ln(x, (E,), block.norm1.weight, block.norm1.bias, block.norm1.eps)
        x = x + hugging_face_attention(
            block.self_attn,
            h,
            rope=lm.positions == "rope",
            window=lm.window,
            alibi=lm.positions == "alibi",
        )
        h = ln(x, (E,), block.norm2.weight, block.norm2.bias, block.norm2.eps)
        x = x + block.linear2(torch.nn.functional.gelu(block.linear1(h)))
    return lm.head(lm.norm(x))


OPTIONS = [
    dict(positions="rope"),
    dict(positions="rope", num_kv_heads=2),
    dict(positions="rope", num_kv_heads=1),
    dict(positions="alibi"),
    dict(positions="alibi", num_kv_heads=2, window=3),
    dict(positions="learned", num_kv_heads=2),
    dict(positions="rope", window=4),
    dict(positions="learned", window=1),
]
IDS = [", ".join(f"{k}={v}" for k, v in o.items()) for o in OPTIONS]


@pytest.mark.parametrize("options", OPTIONS, ids=IDS)
def test_the_model_equals_hugging_faces_attention_written_out(options):
    lm = small_lm(**options)
    ids = torch.randint(0, V, (2, 11), generator=torch.Generator().manual_seed(1))
    # transformers computes the rotation's cos and sin and the softmax in float32
    torch.testing.assert_close(lm(ids), reference_logits(lm, ids), atol=1e-5, rtol=1e-5)


@quick
@given(
    st.sampled_from(OPTIONS),
    st.integers(1, 2),
    st.integers(1, 6),
    st.lists(st.integers(1, 3), min_size=1, max_size=4),
    st.integers(0, 99),
)
def test_the_cache_gives_the_same_logits_with_every_option(options, B, prompt, chunks, seed):
    """A prompt, then chunks through the cache == the whole sequence at once: positions (RoPE,
    ALiBi) continue where the cache stopped, and the window slides over cached keys."""
    lm = small_lm(seed % 5, **options)
    T = prompt + sum(chunks)
    ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))
    full = lm(ids)
    cache, pieces, start = lm.new_cache(B), [], 0
    for n in [prompt, *chunks]:
        pieces.append(lm(ids[:, start : start + n], cache=cache))
        start += n
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("options", [OPTIONS[2], OPTIONS[4]], ids=[IDS[2], IDS[4]])
def test_generate_gives_the_same_tokens_with_and_without_the_cache(options):
    lm = small_lm(3, **options).float()
    prompt = torch.randint(0, V, (2, 5), generator=torch.Generator().manual_seed(0))
    runs = [
        generate(
            lm, prompt, 20, temperature=0.9, use_cache=c, generator=torch.Generator().manual_seed(2)
        )
        for c in (True, False)
    ]
    assert torch.equal(*runs)


LONG = 2100  # tokens: past 2048, float16 no longer holds every position or distance exactly
HALF_TOLERANCE = {torch.float16: 0.008, torch.bfloat16: 0.06}  # on logits up to about 4
LONG_OPTIONS = [
    dict(positions="learned"),
    dict(positions="rope", num_kv_heads=2),
    dict(positions="rope", window=300),
    dict(positions="alibi", num_kv_heads=1),
    dict(positions="alibi", num_kv_heads=2, window=64),
]


@pytest.mark.parametrize(
    "options", LONG_OPTIONS, ids=lambda o: ", ".join(f"{k}={v}" for k, v in o.items())
)
def test_decoding_far_from_the_start_in_half_precision(options):
    """A prompt of 2092 tokens, then one token at a time through the cache, by the model cast to
    float16 and to bfloat16 (on the CPU): the logits of the float64 model run without a cache,
    to half precision."""
    lm = small_lm(6, d_model=128, dim_feedforward=64, max_len=LONG, **options)  # head_dim 32
    ids = torch.randint(0, V, (1, LONG), generator=torch.Generator().manual_seed(6))
    prompt = LONG - 8
    with torch.no_grad():
        expected = lm(ids)[:, prompt:]
        for dtype, tolerance in HALF_TOLERANCE.items():
            half = copy.deepcopy(lm).to(dtype)
            cache = half.new_cache(1)
            half(ids[:, :prompt], cache=cache)
            steps = torch.cat(
                [half(ids[:, t : t + 1], cache=cache) for t in range(prompt, LONG)], 1
            )
            assert steps.dtype == dtype
            torch.testing.assert_close(steps.to(f64), expected, atol=tolerance, rtol=0)


def test_the_cache_holds_the_key_value_heads_only():
    for kv in (4, 2, 1):
        lm = small_lm(num_kv_heads=kv, positions="rope")
        cache = lm.new_cache(3)
        assert cache.buffer.shape == (2, 2, 3, kv, 40, E // H)
        assert cache.nbytes == 3 * kv_cache_bytes(2, kv, E // H, 40, bytes_per_number=8)


def test_defaults_keep_lesson_07s_model_and_state_dict():
    lesson_07 = small_lm()
    assert lesson_07.positions == "learned" and lesson_07.position_embedding is not None
    assert type(lesson_07.blocks[0].self_attn).__name__ == "MultiHeadAttention"
    rope = small_lm(positions="rope")
    assert rope.position_embedding is None
    ours, theirs = rope.state_dict(), lesson_07.state_dict()
    assert set(theirs) - set(ours) == {"position_embedding.weight"}
    assert all(ours[k].shape == theirs[k].shape for k in ours)  # the same attention parameters


def test_the_receptive_field_grows_by_window_minus_one_per_layer():
    """The gradient of the last logits reaches (window - 1) · layers tokens back, no further."""
    for layers in (1, 2, 3):
        lm = small_lm(num_layers=layers, positions="rope", window=3, max_len=16)
        seen = {}

        def keep(module, inputs, output, seen=seen):
            output.retain_grad()
            seen["x"] = output

        lm.token_embedding.register_forward_hook(keep)
        lm(torch.randint(0, V, (1, 16)))[0, -1].sum().backward()
        reached = (seen["x"].grad[0].abs().sum(-1) > 0).nonzero().flatten().tolist()
        assert reached == list(range(15 - 2 * layers, 16))


def test_torch_compile_fullgraph_traces_the_model_with_lesson_08s_options():
    lm = small_lm(positions="rope", num_kv_heads=2, window=3).float()
    ids = torch.randint(0, V, (2, 7))
    torch.compiler.reset()
    compiled = torch.compile(lm, fullgraph=True, backend="eager")
    with torch.no_grad():
        torch.testing.assert_close(compiled(ids), lm(ids))
        cache = lm.new_cache(2)
        steps = [compiled(ids[:, :6], cache=cache), compiled(ids[:, 6:], cache=cache)]
        torch.testing.assert_close(torch.cat(steps, dim=1), lm(ids), atol=1e-5, rtol=1e-5)


def test_bad_arguments_get_clear_errors():
    with pytest.raises(
        ValueError, match=r"num_heads \(4\) must be a multiple of num_kv_heads \(3\)"
    ):
        small_lm(num_kv_heads=3)
    with pytest.raises(
        ValueError,
        match=r"positions must be one of 'learned', 'none', 'rope', 'alibi', got 'sinusoidal'",
    ):
        small_lm(positions="sinusoidal")
    with pytest.raises(ValueError, match=r"window must be >= 1 .* got 0"):
        small_lm(window=0)
    with pytest.raises(TypeError, match=r"window must be an int or None"):
        small_lm(window=2.5)
    with pytest.raises(ValueError, match=r"head_dim must be even for RoPE .* got 5"):
        DecoderLM(V, 20, 4, 1, 8, 8, positions="rope")  # head_dim 5
    lm = small_lm(positions="rope", max_len=10)
    cache = lm.new_cache(1)
    lm(torch.randint(0, V, (1, 8)), cache=cache)
    with pytest.raises(ValueError, match=r"positions 8\.\.10 are beyond max_len = 10"):
        lm(torch.randint(0, V, (1, 3)), cache=cache)


def test_grouped_query_attention_weights_are_per_query_head():
    attn = GroupedQueryAttention(E, H, 2).to(f64)
    x = torch.randn(2, 6, E, dtype=f64)
    mask = masks.causal_over_cache(6, 6, f64)
    rope = RotaryEmbedding(E // H).rotation(torch.arange(6), f64)
    out, weights = attn.attend(x, x, x, mask, rope=rope, need_weights=True)
    fast, none = attn.attend(x, x, x, mask, rope=rope, need_weights=False)
    assert weights.shape == (2, H, 6, 6) and none is None
    torch.testing.assert_close(out, fast)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, H, 6, dtype=f64))
    assert (weights.triu(1) == 0).all()


# ---------------------------------------------------------------- the attention protocol


def test_a_block_is_built_with_its_attention_and_is_the_pre_ln_encoder_layer():
    """DecoderBlock(attention, ...) has the state dict of EncoderLayer(norm_first=True) and,
    given the causal mask, its output."""
    layer = EncoderLayer(E, H, 48, dropout=0.0, activation="gelu", norm_first=True).to(f64)
    block = DecoderBlock(MultiHeadAttention(E, H, dtype=f64), E, 48, dtype=f64)
    assert block.state_dict().keys() == layer.state_dict().keys()
    block.load_state_dict(layer.state_dict())
    x = torch.randn(2, 7, E, dtype=f64)
    causal = masks.causal_over_cache(7, 7, f64)
    torch.testing.assert_close(block(x, causal), layer(x, is_causal=True))


def test_mha_and_gqa_with_as_many_heads_answer_the_protocol_alike():
    """The same weights, the same call attend(x, x, x, mask, rope=..., need_weights=True)."""
    gqa = GroupedQueryAttention(E, H).to(f64)
    mha = MultiHeadAttention(E, H, dtype=f64)
    mha.load_state_dict(gqa.state_dict())
    x = torch.randn(2, 6, E, dtype=f64)
    mask = decoder_mask(6, 6, f64, window=3)
    rope = RotaryEmbedding(E // H).rotation(torch.arange(6), f64)
    for ours, theirs in zip(
        gqa.attend(x, x, x, mask, rope=rope, need_weights=True),
        mha.attend(x, x, x, mask, rope=rope, need_weights=True),
    ):
        torch.testing.assert_close(ours, theirs)
    with pytest.raises(ValueError, match=r"GroupedQueryAttention is self-attention"):
        gqa.attend(x, x.clone(), x, mask)


@pytest.mark.parametrize("options", [OPTIONS[4], OPTIONS[6]], ids=[IDS[4], IDS[6]])
def test_positions_mask_and_rotation_are_made_once_per_forward(options, monkeypatch):
    """However many blocks, a forward builds its tokens' mask and rotation once."""
    lm = small_lm(num_layers=3, **options)
    made = Counter()

    def counted(name, function):
        def wrapper(*args, **kwargs):
            made[name] += 1
            return function(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(lm_module, "decoder_mask", counted("mask", lm_module.decoder_mask))
    monkeypatch.setattr(RotaryEmbedding, "rotation", counted("rotation", RotaryEmbedding.rotation))
    ids = torch.randint(0, V, (2, 9))
    lm(ids)
    cache = lm.new_cache(2)
    lm(ids[:, :5], cache=cache), lm(ids[:, 5:], cache=cache)
    assert made["mask"] == 3 and made["rotation"] == (3 if lm.rotary is not None else 0)


# ---------------------------------------------------------------- sliding windows in blocks


@quick
@given(st.integers(1, 20), st.integers(1, 8), st.one_of(st.none(), st.integers(1, 7)))
def test_sliding_window_attention_in_blocks_equals_the_masked_softmax(L, window, block):
    g = torch.Generator().manual_seed(L * 100 + window)
    q, k, v = (torch.randn(2, L, 5, generator=g, dtype=f64) for _ in range(3))
    scores = q @ k.mT / math.sqrt(5)
    expected = scores.masked_fill(~allowed_by_loop(L, window), -math.inf).softmax(-1) @ v
    torch.testing.assert_close(sliding_window_attention(q, k, v, window, block), expected)


def test_sliding_window_attention_bad_arguments():
    q = torch.randn(4, 8)
    with pytest.raises(ValueError, match=r"window must be >= 1 .* got 0"):
        sliding_window_attention(q, q, q, 0)
    with pytest.raises(ValueError, match=r"self-attention"):
        sliding_window_attention(q, torch.randn(5, 8), torch.randn(5, 8), 2)


# ---------------------------------------------------------------- on a GPU


@pytest.mark.gpu
@pytest.mark.parametrize("options", [OPTIONS[1], OPTIONS[4]], ids=[IDS[1], IDS[4]])
def test_on_the_gpu_no_host_sync_and_torch_compile(gpu, options):
    """Every lesson-08 option in a forward and a cached step without a host sync, and compiled
    with the default backend (inductor on CUDA; the eager backend when checking on the CPU)."""
    from test_gpu import no_host_sync

    torch.manual_seed(0)
    lm = DecoderLM(V, E, H, 2, 48, 40, **options).to(gpu).eval()
    ids = torch.randint(0, V, (2, 9), device=gpu)
    torch.compiler.reset()
    compiled = torch.compile(
        lm, fullgraph=True, backend="inductor" if gpu.type == "cuda" else "eager"
    )
    with torch.no_grad():
        expected = lm(ids)
        compiled(ids)  # compiles
        cache = lm.new_cache(2)
        lm(ids[:, :8], cache=cache)  # warm-up of the cached path
        cache = lm.new_cache(2)
        with no_host_sync(gpu):
            got = compiled(ids)
            steps = [lm(ids[:, :8], cache=cache), lm(ids[:, 8:], cache=cache)]
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(torch.cat(steps, dim=1), expected, atol=1e-4, rtol=1e-4)
