"""Helpers shared by the tests that compare the package's layers with PyTorch's."""

import torch
from torch import nn


def randomise_(module: nn.Module, generator: torch.Generator) -> nn.Module:
    """Every parameter random (norms and zero-initialised biases included), so nothing hides."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=generator, dtype=p.dtype))
    return module


def assert_same_grads(ours: nn.Module, theirs: nn.Module) -> None:
    theirs_params = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad, theirs_params[name].grad, msg=f"gradient of {name}")


def bloom_alibi_slopes(num_heads: int) -> torch.Tensor:
    """BLOOM's ALiBi slopes, (num_heads,) float32, from transformers' public ``build_alibi_tensor``
    (present from transformers 4.x to 5.x; its private ``_get_alibi_slopes`` is not): the bias of
    the second token of a sequence of two is 1 x the slope."""
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    bias = build_alibi_tensor(torch.ones(1, 2), num_heads, torch.float32)  # (1 * H, 1, 2)
    return bias[:, 0, 1]


# transformers' Llama, the reference for RoPE and grouped-query attention, changed its API between
# the oldest version the course is tested with (4.40) and today's (5.x): these two calls work on both.


def llama_rotary(config, x: torch.Tensor, position_ids: torch.Tensor):
    """(cos, sin) of transformers' ``LlamaRotaryEmbedding`` for ``position_ids`` (B, T)."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    try:
        rotary = LlamaRotaryEmbedding(config=config)  # transformers >= 4.45
    except TypeError:  # older: built from the head size and the base
        head_dim = config.hidden_size // config.num_attention_heads
        rotary = LlamaRotaryEmbedding(head_dim, base=config.rope_theta)
    return rotary(x, position_ids)


def llama_attention(theirs: nn.Module, x: torch.Tensor, cos, sin, mask) -> torch.Tensor:
    """The output of transformers' ``LlamaAttention`` for x (B, T, E) with the rotation (cos, sin)
    and the additive mask (1, H or 1, T, T)."""
    import inspect

    if "position_embeddings" in inspect.signature(theirs.forward).parameters:  # >= 4.45
        return theirs(x, position_embeddings=(cos, sin), attention_mask=mask)[0]

    class Given(nn.Module):  # older versions rotate inside the layer: hand it the rotation
        def forward(self, *args, **kwargs):
            return cos, sin

    theirs.rotary_emb = Given()
    position_ids = torch.arange(x.size(1))[None].expand(x.size(0), -1)
    return theirs(x, attention_mask=mask, position_ids=position_ids)[0]
