"""The Transformer encoder layer and the encoder stack, built from the course's own parts.

One layer is two sub-layers, each wrapped in a residual connection and a LayerNorm. In the lesson's
steps (post-LN, as the original paper and BERT):

    Step 2: Z   = LayerNorm(X' + MultiHead(X'))      X' = the embeddings + positions (Step 1)
    Step 3: out = LayerNorm(FFN(Z) + Z)              FFN(Z) = linear2(activation(linear1(Z)))

Pre-LN (GPT-2 and most modern models) normalises each sub-layer's *input* instead and leaves the
residual path untouched: X + MultiHead(LayerNorm(X)), then Z + FFN(LayerNorm(Z)).

``EncoderLayer`` and ``Encoder`` are drop-ins for ``torch.nn.TransformerEncoderLayer`` and
``torch.nn.TransformerEncoder``: same arguments, attribute names and state dicts, same masks
(True = masked **out**, as torch.nn.MultiheadAttention), plus ``need_weights=True`` to see every
head's attention weights.

Each layer's work is split at the door, in two public steps: :meth:`EncoderLayer.prepare` checks
the input and the masks and converts the masks once (:mod:`mha_course.masks`);
:meth:`EncoderLayer.forward_prepared` and the attention under it (its ``attend``) check nothing. So
a stack of six layers prepares once, with its first layer, and converts its padding mask once,
not six times. :class:`LayerStack` is the stack, the same for the encoder and the decoder.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from . import masks
from ._validate import (
    require_divisible,
    require_floating,
    require_positive_int,
    require_probability,
    shape_str,
)
from .layernorm import LayerNorm
from .multihead import MultiHeadAttention, batch_and_length

__all__ = ["EncoderLayer", "Encoder", "LayerStack"]

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"relu": F.relu, "gelu": F.gelu}


def _activation(activation) -> Callable[[torch.Tensor], torch.Tensor]:
    """ "relu" / "gelu" -> the function; a callable (F.silu, nn.GELU("tanh"), ...) is used as is."""
    if isinstance(activation, str):
        if activation not in ACTIVATIONS:
            known = ", ".join(repr(name) for name in ACTIVATIONS)
            raise ValueError(
                f"unknown activation {activation!r}; use one of {known}, or pass a callable"
            )
        return ACTIVATIONS[activation]
    if not callable(activation):
        raise TypeError(f"activation must be a str or a callable, got {type(activation).__name__}")
    return activation


def require_layer_sizes(d_model, dim_feedforward, dropout, nhead=None) -> None:
    """A layer's sizes are positive ints, d_model a multiple of nhead; dropout a probability."""
    require_positive_int("d_model", d_model)
    if nhead is not None:
        require_positive_int("nhead", nhead)
    require_positive_int("dim_feedforward", dim_feedforward)
    require_probability("dropout", dropout)
    if nhead is not None:
        require_divisible("d_model", d_model, "nhead", nhead)


def feed_forward_layers(
    d_model: int, dim_feedforward: int, dropout: float, bias: bool, factory: dict
) -> tuple[nn.Linear, nn.Dropout, nn.Linear]:
    """The feed-forward network's layers, torch's ``linear1``, ``dropout``, ``linear2``:
    d_model -> dim_feedforward -> d_model, applied to each token."""
    return (
        nn.Linear(d_model, dim_feedforward, bias=bias, **factory),
        nn.Dropout(dropout),
        nn.Linear(dim_feedforward, d_model, bias=bias, **factory),
    )


class EncoderLayer(nn.Module):
    """Self-attention, then a position-wise feed-forward network, each with a residual and a norm.

    Same arguments as ``torch.nn.TransformerEncoderLayer`` except that ``batch_first`` defaults to
    True here: input (B, L, d_model), or (L, B, d_model) with ``batch_first=False``, or unbatched
    (L, d_model). Masks follow torch.nn.MultiheadAttention: ``src_mask`` (L, L) or (B·nhead, L, L),
    ``src_key_padding_mask`` (B, L); bool True = masked out, float = added to the scores.
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable[[torch.Tensor], torch.Tensor] = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = True,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        require_layer_sizes(d_model, dim_feedforward, dropout, nhead)
        factory = {"device": device, "dtype": dtype}
        self.self_attn = MultiHeadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **factory
        )
        self.linear1, self.dropout, self.linear2 = feed_forward_layers(
            d_model, dim_feedforward, dropout, bias, factory
        )

        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.activation = _activation(activation)
        self.d_model, self.batch_first = d_model, batch_first

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer) -> EncoderLayer:
        """A copy of a ``torch.nn.TransformerEncoderLayer``: same configuration, weights and mode."""
        if not isinstance(layer, nn.TransformerEncoderLayer):
            raise TypeError(
                f"layer must be a torch.nn.TransformerEncoderLayer, got {type(layer).__name__}"
            )
        ours = cls(**settings_from_torch(layer))
        ours.norm2.eps = layer.norm2.eps
        ours.load_state_dict(layer.state_dict())
        return ours.train(layer.training)

    def forward(
        self,
        src: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        src_key_padding_mask: torch.Tensor | None = None,
        is_causal: bool = False,
        *,
        need_weights: bool = False,
    ):
        """The layer's output, same shape as ``src``; with ``need_weights=True`` also the
        attention weights of every head, (B, nhead, L, L)."""
        x, mask = self.prepare(src, src_mask, src_key_padding_mask, is_causal)
        x, weights = self.forward_prepared(x, mask, need_weights=need_weights)
        if src.dim() == 2:  # one sequence: drop its batch of one again
            x, weights = unbatch(x, self.batch_first), None if weights is None else weights[0]
        return (x, weights) if need_weights else x

    def forward_prepared(
        self, x: torch.Tensor, mask: masks.AttentionMask, *, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The layer without its checks: x batched in the layer's layout and a canonical mask,
        as :meth:`prepare` returns them; back ``(output, weights (B, nhead, L, L) or None)``."""
        if self.norm_first:
            # pre-LN: normalise each sub-layer's input, keep the residual path clean
            attended, weights = self._sa_block(self.norm1(x), mask, need_weights)
            x = x + attended
            x = x + self._ff_block(self.norm2(x))
        else:  # post-LN, the lesson's Steps 2 and 3
            attended, weights = self._sa_block(x, mask, need_weights)
            z = self.norm1(x + attended)  # Step 2: Z = LayerNorm(X' + MultiHead(X'))
            x = self.norm2(z + self._ff_block(z))  # Step 3: LayerNorm(FFN(Z) + Z)
        return x, weights

    def _sa_block(self, x, mask: masks.AttentionMask, need_weights: bool):
        """Self-attention: queries, keys and values all come from x."""
        out, weights = self.self_attn.attend(x, x, x, mask, need_weights=need_weights)
        return self.dropout1(out), weights

    def _ff_block(self, x: torch.Tensor) -> torch.Tensor:
        """The position-wise feed-forward network: the same two Linears on every token."""
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    # ------------------------------------------------------------------ the boundary

    def prepare(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        """Check the input and the masks (as :meth:`forward` takes them); return src as a batch
        (one sequence gets a batch of one) and the masks in their canonical form, which every
        layer of a stack reads."""
        self._check_input(src)
        batched = src.dim() == 3
        x = src if batched else src.unsqueeze(0 if self.batch_first else 1)
        B, L = batch_and_length(x, self.batch_first)
        scores = (B, self.self_attn.num_heads, L, L)  # the shape of the attention scores
        masks.require_torch_masks(
            src_mask,
            src_key_padding_mask,
            scores,
            src.dtype,
            batched,
            names=("src_mask", "src_key_padding_mask"),
            heads="nhead",
            lengths=("L", "L"),
        )
        mask = masks.from_masked_out(
            src_mask, src_key_padding_mask, scores, src.dtype, is_causal, src.device
        )
        return x, mask

    def _check_input(self, src: torch.Tensor) -> None:
        check_sequence("src", src, self.d_model, self.batch_first, self.linear1.weight.dtype)


def unbatch(x: torch.Tensor, batch_first: bool) -> torch.Tensor:
    """A batch of one sequence -> the sequence, (L, d_model)."""
    return x.squeeze(0 if batch_first else 1)


def check_sequence(name: str, x, d_model: int, batch_first: bool, dtype: torch.dtype) -> None:
    """A layer's input: floating, 3-D (batched in the layer's layout) or 2-D (one sequence),
    ``d_model`` features, the layer's parameters' dtype."""
    require_floating(name, x)
    if x.dim() not in (2, 3):
        layout = "(B, L, d_model)" if batch_first else "(L, B, d_model)"
        raise ValueError(
            f"{name} must be 3-D {layout} or 2-D (L, d_model), got shape {shape_str(x.shape)}"
        )
    if x.size(-1) != d_model:
        raise ValueError(
            f"{name} has {x.size(-1)} features in its last dim (shape {shape_str(x.shape)}), "
            f"expected d_model = {d_model}"
        )
    if x.dtype != dtype:
        raise ValueError(
            f"{name} has dtype {x.dtype} but the layer's parameters are {dtype}; convert the "
            f"input or the layer (e.g. layer.to({x.dtype}))"
        )


def settings_from_torch(layer: nn.Module) -> dict:
    """The constructor arguments of a ``torch.nn.TransformerEncoderLayer`` or
    ``TransformerDecoderLayer`` (its first LayerNorm's eps for all of them), for the course's twin."""
    attn, weight = layer.self_attn, layer.linear1.weight
    activation = layer.activation
    if isinstance(activation, nn.Module):
        activation = copy.deepcopy(activation)
    return dict(
        d_model=attn.embed_dim,
        nhead=attn.num_heads,
        dim_feedforward=layer.linear1.out_features,
        dropout=layer.dropout.p,
        activation=activation,
        layer_norm_eps=layer.norm1.eps,
        batch_first=attn.batch_first,
        norm_first=layer.norm_first,
        bias=layer.linear1.bias is not None,
        device=weight.device,
        dtype=weight.dtype,
    )


def copy_norm(norm: nn.Module | None) -> nn.Module | None:
    """A stack's final norm, copied: a torch.nn.LayerNorm becomes the package's own LayerNorm
    (same parameters, eps and flags), anything else a deep copy."""
    if isinstance(norm, nn.LayerNorm):
        weight = norm.weight
        return LayerNorm(
            norm.normalized_shape,
            eps=norm.eps,
            elementwise_affine=norm.elementwise_affine,
            bias=norm.bias is not None,
            device=getattr(weight, "device", None),
            dtype=getattr(weight, "dtype", None),
        )
    return None if norm is None else copy.deepcopy(norm)


class LayerStack(nn.Module):
    """``num_layers`` copies of a layer (each with its own weights), then an optional final
    ``norm`` (pre-LN stacks need one): what :class:`Encoder` and
    :class:`~mha_course.Decoder` share. A subclass names torch's stack it mirrors and its layer."""

    TORCH: type[nn.Module]  # torch.nn.TransformerEncoder or TransformerDecoder
    LAYER: type[nn.Module]  # the course's layer, with its from_torch
    ARGUMENT: str  # what from_torch calls its argument in an error

    def __init__(self, layer: nn.Module, num_layers: int, norm: nn.Module | None = None) -> None:
        super().__init__()
        require_positive_int("num_layers", num_layers)
        self.layers = nn.ModuleList(copy.deepcopy(layer) for _ in range(num_layers))
        self.num_layers = num_layers
        self.norm = norm

    @classmethod
    def from_torch(cls, stack: nn.Module):
        """A copy of torch's stack (its layers and final norm) with its weights and mode."""
        if not isinstance(stack, cls.TORCH):
            raise TypeError(
                f"{cls.ARGUMENT} must be a torch.nn.{cls.TORCH.__name__}, got {type(stack).__name__}"
            )
        norm = copy_norm(stack.norm)
        ours = cls(cls.LAYER.from_torch(stack.layers[0]), stack.num_layers, norm=norm)
        ours.load_state_dict(stack.state_dict())
        return ours.train(stack.training)

    def _final(self, x: torch.Tensor, batched: bool) -> torch.Tensor:
        """The last layer's output after the final norm, unbatched again for one sequence."""
        if self.norm is not None:
            x = self.norm(x)
        return x if batched else unbatch(x, self.layers[0].batch_first)


class Encoder(LayerStack):
    """A stack of ``num_layers`` copies of ``encoder_layer`` (each with its own weights), then an
    optional final ``norm`` (pre-LN stacks need one). Mirrors ``torch.nn.TransformerEncoder``.

    Unlike torch's (which, in eval mode with a padding mask, packs the batch into a nested tensor
    and returns zeros at the padded positions), every position is computed; only the real tokens'
    outputs mean anything, and they do not depend on the padding.
    """

    TORCH, LAYER, ARGUMENT = nn.TransformerEncoder, EncoderLayer, "encoder"

    def __init__(
        self, encoder_layer: nn.Module, num_layers: int, norm: nn.Module | None = None
    ) -> None:
        super().__init__(encoder_layer, num_layers, norm)

    def forward(
        self,
        src: torch.Tensor,
        mask: torch.Tensor | None = None,
        src_key_padding_mask: torch.Tensor | None = None,
        is_causal: bool | None = None,
        *,
        need_weights: bool = False,
    ):
        """The last layer's output (after ``norm``); with ``need_weights=True`` also a list of
        every layer's attention weights, each (B, nhead, L, L).

        The input and the masks are checked, and the masks converted, once, here: every layer
        then reads the same canonical mask. ``is_causal=True`` says that ``mask`` is the causal
        mask (or, without ``mask``, asks for it), as in :class:`EncoderLayer`; torch's ``None``
        (find out by comparing ``mask`` with the causal mask) counts as False here: the flag is
        only a hint, the result is the same, and the comparison would read the mask's values."""
        x, canonical = self.layers[0].prepare(src, mask, src_key_padding_mask, bool(is_causal))
        all_weights = []
        for layer in self.layers:
            x, weights = layer.forward_prepared(x, canonical, need_weights=need_weights)
            all_weights.append(weights)
        x = self._final(x, batched=src.dim() == 3)
        if src.dim() == 2:  # one sequence: drop its batch of one again
            all_weights = [None if w is None else w[0] for w in all_weights]
        return (x, all_weights) if need_weights else x
