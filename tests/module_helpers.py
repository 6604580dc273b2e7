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
