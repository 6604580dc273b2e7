"""The model: all-MiniLM-L6-v2 as the BERT embedding block followed by the course's encoder.

MiniLM is a 6-layer BERT: token embeddings, then six post-LN encoder layers (hidden E = 384,
H = 12 heads of D = 32, a GELU feed-forward of 1536) -- exactly the layer of lessons 01-04. So
:class:`MiniLM` is :class:`BertEmbeddings` (word + position + token-type embeddings, then
LayerNorm) followed by :class:`mha_course.Encoder` of six :class:`mha_course.EncoderLayer`\\ s.
:func:`load_minilm` builds it from the model's files and copies the checkpoint in with the weight
map. Sentence embeddings are the mean of the last hidden states over the real tokens,
L2-normalised (what sentence-transformers computes for this model).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .._validate import require_positive_int, require_tensor, shape_str
from ..encoder import Encoder, EncoderLayer
from ..layernorm import LayerNorm
from ..utils import get_device
from .files import load_checkpoint, model_directory
from .weights import copy_weights, weight_map

__all__ = [
    "MiniLMConfig",
    "BertEmbeddings",
    "MiniLMOutput",
    "MiniLM",
    "mean_pool",
    "embed_sentences",
    "load_minilm",
]


# ---------------------------------------------------------------- configuration


@dataclass(frozen=True)
class MiniLMConfig:
    """The numbers in the checkpoint's config.json (defaults: all-MiniLM-L6-v2's)."""

    vocab_size: int = 30522
    hidden_size: int = 384  # E
    num_hidden_layers: int = 6
    num_attention_heads: int = 12  # H
    intermediate_size: int = 1536
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_act: str = "gelu"
    pad_token_id: int = 0
    max_seq_length: int = 256  # sentence-transformers' truncation for sentence embeddings

    @classmethod
    def from_directory(cls, path: str | Path) -> MiniLMConfig:
        """Read a model directory's config.json (and sentence_bert_config.json, if there)."""
        path = Path(path)
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        if (
            config.get("hidden_act", "gelu") != "gelu"
            or config.get("position_embedding_type", "absolute") != "absolute"
        ):
            raise ValueError(
                f"{path / 'config.json'} is not a BERT with GELU and absolute positions"
            )
        fields = {name: config[name] for name in cls.__dataclass_fields__ if name in config}
        sentence = path / "sentence_bert_config.json"
        if sentence.is_file():
            fields["max_seq_length"] = json.loads(sentence.read_text(encoding="utf-8"))[
                "max_seq_length"
            ]
        return cls(**fields)


# ---------------------------------------------------------------- the model


class BertEmbeddings(nn.Module):
    """x = LayerNorm(word(id) + position(p) + token_type(t)): BERT's input to the first layer.

    BERT learns its position embeddings (one vector per position, up to 512) instead of the
    sinusoidal encoding of lesson 03, and adds a token-type vector (sentence A or B; always A here).
    """

    def __init__(self, config: MiniLMConfig):
        super().__init__()
        E = config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, E, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, E)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, E)
        self.norm = LayerNorm(E, eps=config.layer_norm_eps)

    def forward(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        positions = torch.arange(input_ids.size(1), device=input_ids.device)  # (L,)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )  # (B, L, E)
        return self.norm(x)


@dataclass
class MiniLMOutput:
    """What the model returns: the last layer's hidden states (B, L, E) and, when asked for, the
    attention weights of every layer, one (B, H, L, L) tensor each (else None)."""

    last_hidden_state: torch.Tensor
    attentions: tuple[torch.Tensor, ...] | None = None


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of the hidden states (B, L, E) over the real tokens (attention_mask 1) -> (B, E)."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, L, 1)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)


@torch.no_grad()
def embed_sentences(model: MiniLM, sentences: Sequence[str]) -> torch.Tensor:
    """Sentence embeddings (N, E) in one batch, on the model's device: the mean of each sentence's
    real tokens' last hidden states, L2-normalised (lesson 05's exercise; ``MiniLM.encode`` does
    the same in batches, truncated at ``config.max_seq_length``, on the CPU)."""
    batch = model.tokenize(sentences)
    hidden = model(**batch).last_hidden_state  # (N, L, E)
    return F.normalize(mean_pool(hidden, batch["attention_mask"]), p=2, dim=-1)


class MiniLM(nn.Module):
    """A BERT encoder built from the course's parts: :class:`BertEmbeddings` + :class:`~mha_course.Encoder`.

    ``tokenizer`` is a ``tokenizers.Tokenizer`` (optional: the model itself only needs ids).
    """

    def __init__(self, config: MiniLMConfig = MiniLMConfig(), tokenizer=None):
        super().__init__()
        self.config = config
        self.tokenizer = tokenizer
        self.embeddings = BertEmbeddings(config)
        layer = EncoderLayer(
            config.hidden_size,
            config.num_attention_heads,
            dim_feedforward=config.intermediate_size,
            dropout=0.0,  # inference only; BERT's dropout matters only when fine-tuning
            activation="gelu",  # exact (erf) GELU, as BERT's "gelu"
            layer_norm_eps=config.layer_norm_eps,
            batch_first=True,
            norm_first=False,  # post-LN, as BERT
        )
        self.encoder = Encoder(layer, config.num_hidden_layers)

    @property
    def device(self) -> torch.device:
        return self.embeddings.word_embeddings.weight.device

    # ------------------------------------------------------------ text -> ids

    def encodings(self, sentences: Sequence[str], max_length: int | None = None) -> list:
        """The tokenizer's ``Encoding`` of each sentence (``.ids``, ``.tokens``, ``.word_ids``,
        ``.attention_mask``), padded to the longest and truncated at ``max_length`` tokens
        (default: the model's 512 positions)."""
        if self.tokenizer is None:
            raise ValueError("this model has no tokenizer; build it with load_minilm()")
        sentences = check_sentences(sentences)
        max_length = self.config.max_position_embeddings if max_length is None else max_length
        require_positive_int("max_length", max_length)
        if max_length > self.config.max_position_embeddings or max_length < 2:
            raise ValueError(
                f"max_length must be in [2, {self.config.max_position_embeddings}] "
                f"(room for [CLS] and [SEP], at most one position each), got {max_length}"
            )
        self.tokenizer.enable_truncation(max_length=max_length)
        return self.tokenizer.encode_batch(sentences)

    def tokenize(
        self, sentences: Sequence[str], max_length: int | None = None
    ) -> dict[str, torch.Tensor]:
        """``{"input_ids", "attention_mask"}``, both (B, L) int64 on the model's device, padded
        with [PAD] (id 0, mask 0) to the longest sentence of the batch."""
        return self.as_batch(self.encodings(sentences, max_length))

    def as_batch(self, encodings: list) -> dict[str, torch.Tensor]:
        """Tokenizer encodings (already padded to one length) -> ``{"input_ids", "attention_mask"}``."""
        ids = torch.tensor([e.ids for e in encodings], dtype=torch.long, device=self.device)
        mask = torch.tensor(
            [e.attention_mask for e in encodings], dtype=torch.long, device=self.device
        )
        return {"input_ids": ids, "attention_mask": mask}

    # ------------------------------------------------------------ ids -> hidden states

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool = False,
        token_type_ids: torch.Tensor | None = None,
    ) -> MiniLMOutput:
        """Hidden states of the last layer, and every layer's attention weights if asked.

        ``attention_mask`` (B, L) is 1 (or True) for real tokens and 0 for padding. It becomes the
        encoder's key padding mask (True = padding, PyTorch's convention), handed to the encoder
        once, so no token attends to padding. It goes in even when a batch has no padding: asking
        "is there any?" would make the CPU wait for a GPU, and an all-real mask costs little.
        Without ``output_attentions`` the layers never form the weights and run the fused
        ``scaled_dot_product_attention`` kernel.
        """
        self._check_ids(input_ids, token_type_ids)
        padding = self._padding_mask(attention_mask, input_ids)  # (B, L) or None
        x = self.embeddings(
            input_ids.to(self.device),
            None if token_type_ids is None else token_type_ids.to(self.device),
        )  # (B, L, E)
        if output_attentions:
            x, attentions = self.encoder(x, src_key_padding_mask=padding, need_weights=True)
            return MiniLMOutput(x, tuple(attentions))
        return MiniLMOutput(self.encoder(x, src_key_padding_mask=padding))

    def _check_ids(self, input_ids, token_type_ids) -> None:
        """input_ids: an integer (B, L) tensor of ids the vocabulary has; token_type_ids alike."""
        require_tensor("input_ids", input_ids)
        if input_ids.is_floating_point() or input_ids.dtype == torch.bool:
            raise ValueError(
                f"input_ids must be token ids (an integer tensor), got dtype {input_ids.dtype}"
            )
        if input_ids.dim() != 2:
            hint = "; for one sentence use input_ids.unsqueeze(0)" if input_ids.dim() == 1 else ""
            raise ValueError(
                f"input_ids must be 2-D (B, L), got shape {shape_str(input_ids.shape)}{hint}"
            )
        L, V = input_ids.size(1), self.config.vocab_size
        if not 1 <= L <= self.config.max_position_embeddings:
            raise ValueError(
                f"input_ids has length L = {L}; the model has positions for 1 to "
                f"{self.config.max_position_embeddings} tokens (tokenize() truncates)"
            )
        # A look at the values (on a GPU, a wait for the device, once per forward): an id out of
        # range would otherwise fail deep inside the embedding lookup, on a GPU as a device assert.
        if ((input_ids < 0) | (input_ids >= V)).any():
            raise ValueError(
                f"input_ids must be in [0, {V}), got values from "
                f"{int(input_ids.min())} to {int(input_ids.max())}"
            )
        if token_type_ids is not None:
            require_tensor("token_type_ids", token_type_ids)
            if token_type_ids.shape != input_ids.shape:
                raise ValueError(
                    f"token_type_ids has shape {shape_str(token_type_ids.shape)}, expected "
                    f"{shape_str(input_ids.shape)} (the shape of input_ids)"
                )

    def _padding_mask(self, attention_mask, input_ids) -> torch.Tensor | None:
        """The tokenizer's attention_mask (1 = real token) -> the key padding mask (True = padding)."""
        if attention_mask is None:
            return None
        require_tensor("attention_mask", attention_mask)
        if attention_mask.shape != input_ids.shape:
            raise ValueError(
                f"attention_mask has shape {shape_str(attention_mask.shape)}, expected "
                f"{shape_str(input_ids.shape)} (the shape of input_ids: 1 = real token, 0 = padding)"
            )
        return attention_mask.to(self.device) == 0  # (B, L)

    # ------------------------------------------------------------ text -> sentence embeddings

    @torch.no_grad()
    def encode(self, sentences: Sequence[str], batch_size: int = 32) -> torch.Tensor:
        """Sentence embeddings (N, E) on the CPU: mean of the last hidden states over the real
        tokens, L2-normalised, each sentence truncated at ``config.max_seq_length`` (256) tokens
        -- what ``SentenceTransformer("all-MiniLM-L6-v2").encode`` computes.

        Sentences are batched longest first, so each batch pads little.
        """
        sentences = check_sentences(sentences)
        require_positive_int("batch_size", batch_size)
        order = sorted(range(len(sentences)), key=lambda n: -len(sentences[n]))
        embeddings = torch.empty(len(sentences), self.config.hidden_size)
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            batch = self.tokenize(
                [sentences[n] for n in chunk], max_length=self.config.max_seq_length
            )
            hidden = self(**batch).last_hidden_state
            pooled = F.normalize(mean_pool(hidden, batch["attention_mask"]), p=2, dim=-1)
            embeddings[chunk] = pooled.float().cpu()
        return embeddings


def check_sentences(sentences) -> list[str]:
    """``sentences`` as a list, or a clear error: a bare string, a non-string item, an empty list."""
    if isinstance(sentences, str):
        raise TypeError(
            f"sentences must be a list of strings; for one sentence pass [{sentences!r}]"
        )
    if not isinstance(sentences, Sequence) or not all(isinstance(s, str) for s in sentences):
        raise TypeError(
            f"sentences must be a list of strings, got {type(sentences).__name__}"
            + (
                ""
                if not isinstance(sentences, Sequence)
                else f" holding {sorted({type(s).__name__ for s in sentences})}"
            )
        )
    if len(sentences) == 0:
        raise ValueError("sentences is empty; pass at least one sentence")
    return list(sentences)


def load_minilm(device: str | torch.device | None = None, path: str | Path | None = None) -> MiniLM:
    """all-MiniLM-L6-v2 on the course's encoder, weights loaded, in eval mode.

    ``device`` defaults to :func:`mha_course.get_device` (CUDA, MPS or CPU). ``path`` is a model
    directory to use instead of the installed one (config.json, tokenizer.json, model.safetensors).
    """
    from tokenizers import Tokenizer

    directory = Path(path) if path is not None else model_directory()
    config = MiniLMConfig.from_directory(directory)
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tokenizer.enable_padding(
        pad_id=config.pad_token_id, pad_token="[PAD]"
    )  # to the longest of the batch
    model = MiniLM(config, tokenizer)
    weights = load_checkpoint(directory)
    copy_weights(model, weights, weight_map(config.num_hidden_layers))
    return model.to(get_device() if device is None else torch.device(device)).eval()
