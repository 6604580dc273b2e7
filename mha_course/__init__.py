"""mha_course: multi-head attention built by hand, proven equal to PyTorch's own modules.

The public pieces, in the order the lessons build them:

* :func:`scaled_dot_product_attention` (lesson 01)
* :class:`MultiHeadAttention` (lesson 02)
* :class:`LayerNorm`, :class:`PositionalEncoding` (lesson 03)
* :class:`EncoderLayer`, :class:`Encoder` (lesson 04)
* :mod:`mha_course.pretrained` (lesson 05), :mod:`mha_course.bench` (lesson 06)
* :class:`DecoderLayer`, :class:`Decoder`, :class:`DecoderLM`, :func:`generate` (lesson 07)
* :class:`RotaryEmbedding`, :func:`alibi_bias`, ``masks.sliding_window_mask``, grouped-query
  attention (``scaled_dot_product_attention(..., enable_gqa=True)``), ``DecoderLM(...,
  positions="rope" | "alibi", num_kv_heads=..., window=...)``, :mod:`mha_course.modern` and
  :mod:`mha_course.flex` (lesson 08)
* :func:`mha_course.triton_attention.flash_attention`, FlashAttention's forward pass in Triton with
  a PyTorch backward, and :mod:`mha_course.triton_launch`, its launch (lesson 09; Linux, with
  Triton: importing the package never imports Triton, and the other lessons do without it)
* :mod:`mha_course.checks`: the exercise checkers
"""

from .alibi import alibi_bias, alibi_slopes
from .attention import scaled_dot_product_attention
from .cache import KVCache
from .decoder import Decoder, DecoderLayer
from .encoder import Encoder, EncoderLayer
from .generation import generate, sample_next
from .layernorm import LayerNorm
from .lm import DecoderLM
from .multihead import MultiHeadAttention
from .positional import PositionalEncoding, positional_encoding
from .rope import RotaryEmbedding
from .utils import get_device, seed_everything

__version__ = "0.1.0"

__all__ = [
    "scaled_dot_product_attention",
    "MultiHeadAttention",
    "LayerNorm",
    "PositionalEncoding",
    "positional_encoding",
    "EncoderLayer",
    "Encoder",
    "DecoderLayer",
    "Decoder",
    "DecoderLM",
    "KVCache",
    "generate",
    "sample_next",
    "RotaryEmbedding",
    "alibi_bias",
    "alibi_slopes",
    "get_device",
    "seed_everything",
    "__version__",
]
