"""Lesson 05's first exercise, ``load_layer``: a layer of a real pretrained checkpoint
(all-MiniLM-L6-v2) copied into an encoder layer. The reference: :func:`pretrained.load_layer`."""

from __future__ import annotations

import functools
import re
from collections import UserDict

import torch
from torch import nn

from .. import pretrained, reference
from .._validate import shape_str
from ..encoder import EncoderLayer
from ._core import exercise
from ._failure import ExerciseFailure
from ._table import Case, call_diagnosed

_QKV = re.compile("[qkv]_proj")  # what an answer for lesson 04's layout asks the layer for
LAYERS = (0, 3, 5)  # the checkpoint's layers read: not only 0, so that always reading 0 shows
EVIDENCE = (
    "the checkpoint's names and shapes, next to your layer's, say where each tensor goes: a shape "
    "only one parameter has settles it; else read the name as a path through BERT's layer."
)
_MIXED = {  # modules whose tensors can be mixed up -> why
    "attention.output.LayerNorm output.LayerNorm": "the two LayerNorms are swapped: norm1 closes "
    "the attention sublayer (Step 2), norm2 the feed-forward (Step 3). Which of the checkpoint's "
    "LayerNorms sits among the attention's modules?",
    "intermediate.dense output.dense attention.output.dense": "the Linears are mixed up: their "
    "shapes tell the feed-forward's first Linear (E to 1536) from its second (1536 to E); W^O is "
    "the Linear among the attention's modules.",
    "attention.self.query attention.self.key attention.self.value": "Q, K and V are mixed up: the "
    "checkpoint names each of the three projections.",
}
_PACKED = (
    "Q, K and V are stacked in the wrong order: in_proj holds the query's rows first (0 to "
    "E − 1), then the key's, then the value's."
)


@functools.lru_cache(maxsize=1)
def _checkpoint() -> dict[str, torch.Tensor]:
    return pretrained.load_checkpoint()  # every tensor differs: whichever landed can be named


class Checkpoint(UserDict):
    """The checkpoint as the learner's code sees it: every read a fresh copy, theirs to spoil."""

    def __getitem__(self, key: str) -> torch.Tensor:
        return super().__getitem__(key).clone()


def blank_layer(packed: bool = True) -> nn.Module:
    """A layer shaped like MiniLM's, all NaN (an unfilled one shows): packed, or lesson 04's."""
    c = pretrained.MiniLMConfig()
    sizes = c.hidden_size, c.num_attention_heads, c.intermediate_size
    layer = EncoderLayer(*sizes, dropout=0.0) if packed else reference.EncoderLayer(*sizes)
    for p in layer.parameters():
        nn.init.constant_(p, float("nan"))
    return layer


def _holds(t: torch.Tensor, weights: dict) -> str:
    """The checkpoint tensor that ``t`` equals ("... transposed" if so), or ""."""
    t = t.detach().cpu()
    if t.dtype != torch.float32:  # the checkpoint's dtype
        return ""
    for key, w in weights.items():
        if w.shape == t.shape and torch.equal(w, t):
            return key
        if w.dim() == 2 and w.T.shape == t.shape and torch.equal(w.T, t):
            return f"{key} transposed"
    return ""


def _part(key: str) -> str:
    """ "encoder.layer.3.output.LayerNorm.weight" -> "output.LayerNorm.weight"."""
    return key.split(".", 3)[3].removesuffix(" transposed")


def _explain(expected: str, found: str, i: int, packed: bool) -> str:
    """The likely cause, from the checkpoint tensor that belongs there and the one that is."""
    if not found:
        return "its values match no checkpoint tensor, transposed or not: tensors go in unchanged."
    if not found.startswith("encoder.layer."):
        return f"{found} belongs to no encoder layer: {EVIDENCE}"
    layer = int(found.split(".")[2])
    if layer != i and _part(found) == _part(expected):
        return f"this is layer {layer}'s tensor, but you were asked for layer {i}: the names come from i."
    if found.endswith("transposed"):
        return "a weight is transposed; nn.Linear's layout is the checkpoint's: no weight needs it."
    modules = {_part(expected).rsplit(".", 1)[0], _part(found).rsplit(".", 1)[0]}
    if len(modules) == 1:
        return "a weight and a bias are mixed up: each weight goes into a weight, each bias into a bias."
    for names, why in _MIXED.items():
        if modules <= set(names.split()):
            return _PACKED if packed and "attention.self.key" in names else why
    return f"{_part(found)} does not go there: {EVIDENCE}"


def _mismatch(case: str, name: str, got, sources: list[str], weights, i: int, packed: bool):
    """Why parameter ``name`` is not the checkpoint's ``sources`` (stacked), or None if it is."""
    expected, got = torch.cat([weights[s] for s in sources]), got.detach().cpu()
    if got.shape == expected.shape and torch.equal(got, expected):
        return None
    lines = [f"Case {case!r}: {name} is not what the checkpoint says."]
    if torch.isnan(got).all():
        cause = f"{name} was never filled (it still holds the checker's NaN): each of the layer's parameters gets one checkpoint tensor."
    elif got.shape != expected.shape:
        found, shapes = _holds(got, weights), (shape_str(got.shape), shape_str(expected.shape))
        lines.append("  {} has shape {}, expected {}.".format(name, *shapes))
        lines += [f"  it holds {found}."] if found else []
        cause = _explain(sources[0], found, i, packed)
    elif len(sources) == 1:
        found = _holds(got, weights)
        lines += [f"  expected {sources[0]}", f"  yours    {found or 'no checkpoint tensor'}"]
        cause = _explain(sources[0], found, i, packed)
    else:  # the packed in_proj: what each third holds
        E, cause = got.size(0) // 3, None
        for k, (source, third) in enumerate(zip(sources, got.split(E))):
            found, rows = _holds(third, weights), f"rows {k * E}–{(k + 1) * E - 1}"
            yours = found or "no checkpoint tensor"
            lines.append(f"  {rows} expected {_part(source)}, yours {yours}")
            cause = cause or (None if found == source else _explain(source, found, i, packed))
    return "\n".join([*lines, f"Likely cause: {cause}"])


def _crash_cause(error: BaseException, case: Case) -> str | None:
    text, i = str(error), case.args[2]
    if isinstance(error, KeyError):
        return (
            f'{text} is not a name in the checkpoint. Layer {i}\'s names are "encoder.layer.{i}." '
            "followed by attention.self.query.weight, output.LayerNorm.bias, ... (its keys)."
        )
    if "in-place operation" in text or "requires grad" in text:
        return "autograd must not record the copy into a parameter: it goes in torch.no_grad()."
    if "cannot assign" in text and "parameter" in text:
        return "only an nn.Parameter can replace a parameter: copy into it, in torch.no_grad()."
    if isinstance(error, RuntimeError) and ("size" in text or "shape" in text):
        return f"a shape mismatch while copying, which no transpose fixes: {EVIDENCE}"
    return None


def _load(candidate, case: str, layer, i: int):
    checkpoint = Checkpoint(_checkpoint())
    return call_diagnosed(candidate, Case(case, (layer, checkpoint, i)), (), _crash_cause)


@exercise(
    "load_layer",
    "05",
    reference=pretrained.load_layer,
    todo="Replace `raise NotImplementedError` with the copies from the checkpoint into the layer.",
    points=2,
)
def check_load_layer(candidate) -> int:
    """Check ``candidate(layer, weights, i)``: fills ``layer`` (packed, or with q_proj, k_proj,
    v_proj if the answer asks for them) with layer ``i``; names the first wrong parameter."""
    packed, weights = True, _checkpoint()
    for i in LAYERS:
        case, layer = f"layer {i}", blank_layer(packed)
        try:
            result = _load(candidate, case, layer, i)
        except ExerciseFailure as failure:
            error = failure.__cause__  # asking for q_proj: lesson 04's layout
            if not (packed and isinstance(error, AttributeError) and _QKV.search(str(error))):
                raise
            packed, layer = False, blank_layer(False)
            result = _load(candidate, case, layer, i)
        new = isinstance(result, nn.Module) and result is not layer  # not the one it was given
        note = "\nNote: your function returned a new module; fill the one given." if new else ""
        params, sources = dict(layer.named_parameters()), {}
        for row in pretrained.layer_weight_map(i, packed=packed):
            sources.setdefault(row.parameter, []).append(row.checkpoint)
        for name, rows in sources.items():
            if name not in params:
                raise ExerciseFailure(
                    f"Case {case!r}: the layer has no parameter {name} any more; its parameters "
                    "are to be filled, not deleted or renamed."
                )
            if problem := _mismatch(case, name, params[name], rows, weights, i, packed):
                raise ExerciseFailure(problem + note)
    return len(LAYERS)
