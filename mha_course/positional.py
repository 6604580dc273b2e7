"""Sinusoidal positional encoding (Vaswani et al., 2017, section 3.5): Step 1, X' = PE(X) + X.

Attention by itself is blind to order: permute the tokens and its output is permuted the same way.
Adding a different vector to each position gives the model something to tell positions apart:

    PE(pos, 2i)     = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i + 1) = cos(pos / 10000^(2i / d_model))

Columns 2i and 2i + 1 share one frequency; the frequencies fall geometrically from 1 (columns 0
and 1) to about 1/10000 (the last columns). Positions count from 0, so row 0 is [0, 1, 0, 1, ...].
"""

from __future__ import annotations

import torch
from torch import nn

from ._validate import require_floating, require_positive_int, require_probability, shape_str

__all__ = ["positional_encoding", "PositionalEncoding"]


def positional_encoding(max_len: int, d_model: int, *, dtype=None, device=None) -> torch.Tensor:
    """The (max_len, d_model) table of sinusoidal encodings: sin on even columns, cos on odd ones.

    An odd ``d_model`` works too: the last column is then a sine (column d_model - 1 is even)
    whose cosine partner would be column d_model, which does not exist, so it is simply left out.
    Computed in float64 and then cast to ``dtype`` (default: torch's default float dtype).
    """
    require_positive_int("max_len", max_len)
    require_positive_int("d_model", d_model)
    position = torch.arange(max_len, dtype=torch.float64, device=device).unsqueeze(
        1
    )  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64, device=device)  # the even columns 2i
    angle = position / 10000 ** (two_i / d_model)  # (max_len, ceil(d_model / 2))
    pe = torch.empty(max_len, d_model, dtype=torch.float64, device=device)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])  # one cos fewer when d_model is odd
    return pe.to(dtype or torch.get_default_dtype())


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal encoding to a batch of embeddings, then applies dropout (as the paper).

    Input (B, L, d_model) with ``batch_first=True`` (the package's default), (L, B, d_model)
    otherwise, or an unbatched (L, d_model). The table is a buffer (it moves with ``.to(device)``)
    that is not saved in the state dict: it is a fixed function of the position, not learned.
    """

    def __init__(
        self, d_model: int, dropout: float = 0.1, max_len: int = 5000, batch_first: bool = True
    ):
        super().__init__()
        require_positive_int("d_model", d_model)
        require_positive_int("max_len", max_len)
        require_probability("dropout", dropout)
        self.d_model, self.max_len, self.batch_first = d_model, max_len, batch_first
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", positional_encoding(max_len, d_model), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """X' = PE(X) + X, then dropout."""
        self._check_input(x)
        seq_dim = 1 if (self.batch_first and x.dim() == 3) else 0
        pe = self.pe[: x.size(seq_dim)].to(x.dtype)  # (L, d_model)
        if seq_dim == 0 and x.dim() == 3:
            pe = pe.unsqueeze(1)  # (L, 1, d_model): the same row for every sequence in the batch
        return self.dropout(x + pe)

    def _check_input(self, x: torch.Tensor) -> None:
        require_floating("x", x)
        if x.dim() not in (2, 3):
            layout = "(B, L, d_model)" if self.batch_first else "(L, B, d_model)"
            raise ValueError(
                f"x must be 3-D {layout} or 2-D (L, d_model), got shape {shape_str(x.shape)}"
            )
        if x.size(-1) != self.d_model:
            raise ValueError(
                f"x has {x.size(-1)} features in its last dim (shape {shape_str(x.shape)}), "
                f"expected d_model = {self.d_model}"
            )
        length = x.size(1 if (self.batch_first and x.dim() == 3) else 0)
        if length > self.max_len:
            raise ValueError(
                f"x has sequence length {length} (shape {shape_str(x.shape)}), longer than "
                f"max_len = {self.max_len}; build PositionalEncoding with a larger max_len"
            )

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}, batch_first={self.batch_first}"
