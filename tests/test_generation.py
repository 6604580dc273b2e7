"""DecoderLM, the KV cache and generate(): cached == uncached, and clear errors."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_course import DecoderLM, KVCache, generate, masks, sample_next

quick = settings(max_examples=20, deadline=None)


def small_lm(seed=0, dtype=torch.float32, **kwargs):
    torch.manual_seed(seed)
    config = {
        "vocab_size": 23,
        "d_model": 16,
        "nhead": 4,
        "num_layers": 2,
        "dim_feedforward": 32,
        "max_len": 48,
        **kwargs,
    }
    return DecoderLM(**config).to(dtype).eval()


def test_the_model_is_causal_and_logits_have_the_right_shape():
    lm = small_lm(dtype=torch.float64)
    ids = torch.randint(0, 23, (3, 10))
    logits = lm(ids)
    assert logits.shape == (3, 10, 23)
    changed = ids.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % 23
    torch.testing.assert_close(lm(changed)[:, :6], logits[:, :6])  # no peeking ahead
    assert not torch.allclose(lm(changed)[:, 6:], logits[:, 6:])


def test_tied_and_untied_heads():
    tied, untied = small_lm(), small_lm(tie_weights=False)
    assert tied.head.weight is tied.token_embedding.weight
    assert untied.head.weight is not untied.token_embedding.weight
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(untied) - count(tied) == 23 * 16


def reference_logits(lm, ids):
    """The model written out with plain torch, no cache, for a check independent of the blocks'
    fast paths: embeddings, then each pre-LN block with an explicit causal softmax."""
    T = ids.size(1)
    x = lm.token_embedding(ids) + lm.position_embedding(torch.arange(T))
    allowed = torch.ones(T, T, dtype=torch.bool).tril()
    for block in lm.blocks:
        attn = block.self_attn
        h = torch.nn.functional.layer_norm(
            x, (x.size(-1),), block.norm1.weight, block.norm1.bias, block.norm1.eps
        )
        q, k, v = torch.nn.functional.linear(h, attn.in_proj_weight, attn.in_proj_bias).chunk(3, -1)
        q, k, v = (t.view(*t.shape[:2], attn.num_heads, -1).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / q.size(-1) ** 0.5
        heads = scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ v
        x = x + attn.out_proj(heads.transpose(1, 2).reshape(x.shape))
        h = torch.nn.functional.layer_norm(
            x, (x.size(-1),), block.norm2.weight, block.norm2.bias, block.norm2.eps
        )
        x = x + block.linear2(torch.nn.functional.gelu(block.linear1(h)))
    return lm.head(lm.norm(x))


def test_the_model_equals_the_written_out_decoder():
    lm = small_lm(dtype=torch.float64)
    ids = torch.randint(0, 23, (2, 12))
    torch.testing.assert_close(lm(ids), reference_logits(lm, ids))


@quick
@given(
    st.integers(1, 3),
    st.integers(1, 8),
    st.lists(st.integers(1, 4), min_size=1, max_size=5),
    st.integers(0, 999),
)
def test_feeding_through_the_cache_gives_the_same_logits(B, prompt, chunks, seed):
    """A prompt, then chunks of 1..4 tokens through the cache == the whole sequence at once."""
    lm = small_lm(seed % 7, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    T = prompt + sum(chunks)
    ids = torch.randint(0, 23, (B, T), generator=g)
    full = lm(ids)
    cache = lm.new_cache(B)
    pieces, start = [], 0
    for n in [prompt, *chunks]:
        pieces.append(lm(ids[:, start : start + n], cache=cache))
        start += n
    assert cache.length == T
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize(
    "sampling", [{"top_k": 1}, {"temperature": 0.8}, {"temperature": 1.5, "top_k": 5}]
)
def test_generate_gives_the_same_tokens_with_and_without_the_cache(sampling):
    lm = small_lm(3)
    prompt = torch.randint(0, 23, (2, 6), generator=torch.Generator().manual_seed(0))
    with_cache = generate(
        lm, prompt, 40, use_cache=True, generator=torch.Generator().manual_seed(1), **sampling
    )
    without = generate(
        lm, prompt, 40, use_cache=False, generator=torch.Generator().manual_seed(1), **sampling
    )
    assert with_cache.shape == (2, 46)
    assert torch.equal(with_cache[:, :6], prompt)
    assert torch.equal(with_cache, without)
    # and the logits along the way agree to 1e-5 in float32
    full = lm(with_cache[:, :-1])
    cache = lm.new_cache(2)
    steps = [lm(with_cache[:, :6], cache=cache)]
    steps += [lm(with_cache[:, t : t + 1], cache=cache) for t in range(6, 45)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_generate_greedy_is_the_argmax_and_restores_the_mode():
    lm = small_lm(4).train()
    prompt = torch.randint(0, 23, (1, 3))
    out = generate(lm, prompt, 5, top_k=1)
    assert lm.training  # put back as it was
    lm.eval()
    for t in range(3, 8):
        assert out[0, t] == lm(out[:, :t])[0, -1].argmax()


def test_sample_next_keeps_exactly_k_and_applies_temperature_before_the_softmax():
    logits = torch.tensor([[3.0, 2.0, 2.0, 2.0, -1.0]])  # ties at the 2nd place
    g = torch.Generator().manual_seed(0)
    draws = torch.cat([sample_next(logits, top_k=2, generator=g) for _ in range(400)])
    assert set(draws.flatten().tolist()) <= {0, 1, 2, 3} and len(set(draws.flatten().tolist())) == 2
    # temperature 0.5 doubles the logits' gaps: P(token 0) = e^6 / (e^6 + 3 e^4 + e^-2)
    g = torch.Generator().manual_seed(0)
    draws = torch.cat([sample_next(logits, temperature=0.5, generator=g) for _ in range(4000)])
    expected = torch.softmax(logits / 0.5, -1)[0, 0].item()
    assert abs((draws == 0).float().mean().item() - expected) < 0.03
    assert torch.equal(sample_next(logits, top_k=1), torch.tensor([[0]]))


def test_cache_memory_and_positions():
    lm = small_lm()
    cache = lm.new_cache(2)
    assert isinstance(cache, KVCache)
    assert cache.nbytes == 2 * 2 * 2 * 4 * 48 * 4 * 4  # k|v · layers · B · H · max_len · D · bytes
    lm(torch.randint(0, 23, (2, 5)), cache=cache)
    assert cache.length == 5
    # a new token at position 5: the same logits as the full sequence's 6th row
    ids = torch.randint(0, 23, (2, 6))
    cache = lm.new_cache(2)
    lm(ids[:, :5], cache=cache)
    torch.testing.assert_close(
        lm(ids[:, 5:], cache=cache)[:, 0], lm(ids)[:, 5], atol=1e-5, rtol=1e-5
    )


def test_causal_over_cache_is_bottom_right_aligned():
    m = masks.causal_over_cache(2, 5, torch.float32)
    allowed = m.bias == 0
    assert allowed.tolist() == [[True, True, True, True, False], [True, True, True, True, True]]
    assert masks.causal_over_cache(1, 5, torch.float32) is masks.NO_MASK
    assert masks.causal_over_cache(4, 4, torch.float32).causal


def test_bad_inputs_get_clear_errors():
    lm = small_lm()
    prompt = torch.randint(0, 23, (2, 4))
    with pytest.raises(
        ValueError, match=r"the prompt has 50 tokens, longer than the model's max_len = 48"
    ):
        generate(lm, torch.zeros(1, 50, dtype=torch.long), 1)
    with pytest.raises(
        ValueError,
        match=r"prompt's 4 tokens \+ max_new_tokens = 45 make 49, more than .* max_len = 48 positions; ask for at most 44",
    ):
        generate(lm, prompt, 45)
    with pytest.raises(
        ValueError, match=r"non-empty prompt of shape \(B, T\) with T >= 1, got shape \(2, 0\)"
    ):
        generate(lm, torch.zeros(2, 0, dtype=torch.long), 3)
    with pytest.raises(ValueError, match=r"top_k must be a positive int, got 0"):
        generate(lm, prompt, 3, top_k=0)
    with pytest.raises(ValueError, match=r"top_k = 24 is larger than the vocabulary \(23 tokens\)"):
        generate(lm, prompt, 3, top_k=24)
    with pytest.raises(
        ValueError, match=r"temperature must be > 0, got -1.0; for greedy decoding use top_k=1"
    ):
        generate(lm, prompt, 3, temperature=-1.0)
    with pytest.raises(ValueError, match=r"token ids in \[0, 23\), got values from 0 to 30"):
        generate(lm, torch.tensor([[0, 30]]), 3)
    cache = lm.new_cache(2)
    with pytest.raises(
        ValueError, match=r"cache was made for batch size 2, got input of batch size 3"
    ):
        lm(torch.randint(0, 23, (3, 4)), cache=cache)
    lm(torch.randint(0, 23, (2, 46)), cache=cache)
    with pytest.raises(ValueError, match=r"holds 46 tokens and room for 48: 3 more do not fit"):
        lm(torch.randint(0, 23, (2, 3)), cache=cache)
    with pytest.raises(ValueError, match=r"ids must be 2-D \(B, T\), got shape \(4\).*unsqueeze"):
        lm(torch.randint(0, 23, (4,)))
    with pytest.raises(ValueError, match=r"integer token ids"):
        lm(torch.rand(2, 4))


def test_torch_compile_fullgraph_traces_the_language_model():
    lm = small_lm()
    ids = torch.randint(0, 23, (2, 7))
    torch.compiler.reset()
    compiled = torch.compile(lm, fullgraph=True, backend="eager")
    with torch.no_grad():
        torch.testing.assert_close(compiled(ids), lm(ids))


def test_positions_none_has_no_position_embedding_and_still_caches():
    lm = small_lm(5, dtype=torch.float64, positions="none")
    assert lm.position_embedding is None
    ids = torch.randint(0, 23, (2, 9))
    cache = lm.new_cache(2)
    pieces = [lm(ids[:, :5], cache=cache), lm(ids[:, 5:], cache=cache)]
    torch.testing.assert_close(torch.cat(pieces, 1), lm(ids))
    with pytest.raises(
        ValueError, match=r"positions must be one of 'learned', 'none', .*got 'sinusoidal'"
    ):
        small_lm(positions="sinusoidal")


CAPACITY_OPTIONS = [  # every way the model attends, each with a cache of max_len = 12
    {},
    {"positions": "none"},
    {"positions": "rope", "num_kv_heads": 2},
    {"positions": "alibi", "num_kv_heads": 1},
    {"positions": "alibi", "window": 3},
]
FILLS = [[12], [11, 1], [5, 4, 3], [1] * 12]  # pieces that fill the cache exactly


@pytest.mark.parametrize("pieces", FILLS, ids=lambda p: "+".join(map(str, p)))
@pytest.mark.parametrize("options", CAPACITY_OPTIONS, ids=lambda o: str(o or "learned"))
def test_a_cache_holds_exactly_max_len_tokens_and_refuses_one_more(options, pieces):
    lm = small_lm(6, dtype=torch.float64, max_len=12, **options)
    ids = torch.randint(0, 23, (2, 12), generator=torch.Generator().manual_seed(6))
    full = lm(ids)  # without a cache, max_len tokens fit too
    cache, logits, start = lm.new_cache(2), [], 0
    for n in pieces:
        logits.append(lm(ids[:, start : start + n], cache=cache))
        start += n
    assert cache.length == 12
    torch.testing.assert_close(torch.cat(logits, dim=1), full)
    with pytest.raises(ValueError, match=r"holds 12 tokens and room for 12: 1 more do not fit"):
        lm(ids[:, :1], cache=cache)
    assert cache.length == 12  # a refused forward leaves the cache as it was
    with pytest.raises(ValueError, match=r"ids has 13 tokens .* more than max_len = 12"):
        lm(torch.cat([ids, ids[:, :1]], dim=1))


@pytest.mark.parametrize("length", [0, 1, 4, 5])
def test_kv_cache_room_up_to_max_len_exactly(length):
    """require_room: new tokens that bring the cache to max_len exactly fit, one more does not."""
    cache = KVCache(2, 3, 2, 4, max_len=5)
    cache.advance(length)
    cache.require_room(3, 5 - length)
    with pytest.raises(ValueError, match=rf"holds {length} tokens and room for 5: {6 - length} "):
        cache.require_room(3, 6 - length)


@pytest.mark.parametrize("prompt", [1, 5, 47])
@pytest.mark.parametrize("options", CAPACITY_OPTIONS[::2], ids=lambda o: str(o or "learned"))
def test_generate_up_to_max_len_exactly(options, prompt):
    """generate to max_len = 48 tokens in all: the same tokens with and without the cache; one
    token more is refused before anything runs."""
    lm = small_lm(7, **options)
    ids = torch.randint(0, 23, (2, prompt), generator=torch.Generator().manual_seed(7))
    runs = [
        generate(lm, ids, 48 - prompt, use_cache=c, generator=torch.Generator().manual_seed(8))
        for c in (True, False)
    ]
    assert runs[0].shape == (2, 48) and torch.equal(*runs)
    with pytest.raises(ValueError, match=rf"ask for at most {48 - prompt} new tokens"):
        generate(lm, ids, 49 - prompt)
