"""Checker for lesson 05: the weight-loading map, written as ``load_layer(layer, weights, i)``.

The learner copies layer ``i`` of a BERT checkpoint into one of their encoder layers (the skeleton
is in lesson 05's exercise cell), in either layout: separate ``self_attn.q_proj``/``k_proj``/``v_proj``
(the lesson-04 exercise's layer) or Q, K, V packed into ``self_attn.in_proj_weight``
(``mha_course.EncoderLayer``, ``torch.nn.TransformerEncoderLayer``). The checker first offers a
packed layer and switches to the separate layout when the learner's code asks for ``q_proj``. It hands over a checkpoint of random tensors
with the real names and shapes (every tensor different, so whichever tensor landed in a parameter
can be named), then compares every parameter with the reference, in the map's order, and says
which tensor the learner put there instead: Q/K/V stacked in the wrong order, the two norms
swapped, the feed-forward's Linears swapped, a weight transposed, another layer's tensors, a
parameter left unfilled.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import torch
from torch import nn

from .. import reference
from ..layernorm import LayerNorm
from ..pretrained import MiniLMConfig, layer_weight_map
from ._core import call_candidate, checker
from ._failure import ExerciseFailure

__all__ = ["check_load_layer", "check_weight_map"]

CONFIG = MiniLMConfig()
CASES = (0, 3, 5)  # layer indices; not only 0, so reading layer 0 every time is caught

THE_MAP = """the map, for layer i (keys start with f"encoder.layer.{i}."):
    attention.self.query / key / value  -> self_attn.in_proj_weight / in_proj_bias, stacked Q, K, V
    attention.output.dense              -> self_attn.out_proj
    attention.output.LayerNorm          -> norm1
    intermediate.dense                  -> linear1
    output.dense                        -> linear2
    output.LayerNorm                    -> norm2"""

TRANSPOSED = (
    "a weight is transposed. nn.Linear stores its weight as (out_features, in_features), and "
    "so does the checkpoint: copy it as it is, without .T."
)
QKV_ORDER = (
    "Q, K and V are stacked in the wrong order: in_proj holds query in rows [0:E], key in "
    "[E:2E], value in [2E:3E] -- torch.cat([query, key, value])."
)
QKV_SWAPPED = (
    "Q, K and V are mixed up: attention.self.query goes into self_attn.q_proj, key into k_proj, "
    "value into v_proj."
)
NORMS_SWAPPED = (
    "the two LayerNorms are swapped: attention.output.LayerNorm is norm1 (Step 2, after the "
    "attention) and output.LayerNorm is norm2 (Step 3, after the feed-forward)."
)
DENSE_SWAPPED = (
    "the Linears are mixed up: intermediate.dense is the feed-forward's first Linear "
    "(E -> 1536) = linear1; output.dense its second (1536 -> E) = linear2; "
    "attention.output.dense is the attention's output projection W^O = self_attn.out_proj."
)
WEIGHT_BIAS = "a weight and a bias are mixed up: .weight goes into .weight, .bias into .bias."


@functools.lru_cache(maxsize=1)
def fake_checkpoint(config: MiniLMConfig = CONFIG, seed: int = 5) -> dict[str, torch.Tensor]:
    """Random tensors with the checkpoint's names and shapes for every layer (made once; callers
    hand out clones)."""
    g = torch.Generator().manual_seed(seed)
    E, F = config.hidden_size, config.intermediate_size
    shapes = {
        "attention.self.query": (E, E),
        "attention.self.key": (E, E),
        "attention.self.value": (E, E),
        "attention.output.dense": (E, E),
        "attention.output.LayerNorm": None,
        "intermediate.dense": (F, E),
        "output.dense": (E, F),
        "output.LayerNorm": None,
    }
    weights = {}
    for i in range(config.num_hidden_layers):
        for name, shape in shapes.items():
            prefix = f"encoder.layer.{i}.{name}"
            weights[f"{prefix}.weight"] = torch.randn(shape or (E,), generator=g)
            weights[f"{prefix}.bias"] = torch.randn(shape[0] if shape else E, generator=g)
    return weights


class _Handout(Mapping):
    """The checkpoint as the learner sees it: every read is a fresh copy, so their code cannot
    spoil the checker's tensors (and only the tensors they read get copied)."""

    def __init__(self, weights: dict[str, torch.Tensor]):
        self._weights = weights

    def __getitem__(self, key: str) -> torch.Tensor:
        return self._weights[key].clone()

    def __iter__(self):
        return iter(self._weights)

    def __len__(self) -> int:
        return len(self._weights)


def blank_layer(packed: bool = True, config: MiniLMConfig = CONFIG) -> nn.Module:
    """A layer shaped like MiniLM's, every parameter NaN (so an unfilled one shows).

    ``packed``: ``mha_course.EncoderLayer`` (Q, K, V in one in_proj); else the parameters of the
    lesson-04 exercise's layer (q_proj, k_proj, v_proj, out_proj, linear1, linear2, norm1, norm2),
    all this checker needs to look at.
    """
    from ..encoder import EncoderLayer

    E, F = config.hidden_size, config.intermediate_size
    if packed:
        layer = EncoderLayer(
            E,
            config.num_attention_heads,
            F,
            dropout=0.0,
            activation="gelu",
            layer_norm_eps=config.layer_norm_eps,
        )
    else:
        layer = nn.Module()
        layer.self_attn = nn.Module()
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            setattr(layer.self_attn, name, nn.Linear(E, E))
        layer.linear1, layer.linear2 = nn.Linear(E, F), nn.Linear(F, E)
        layer.norm1, layer.norm2 = (
            LayerNorm(E, eps=config.layer_norm_eps),
            LayerNorm(E, eps=config.layer_norm_eps),
        )
    with torch.no_grad():
        for p in layer.parameters():
            p.fill_(float("nan"))
    return layer


# ---------------------------------------------------------------- naming what a tensor holds


def _holds(t: torch.Tensor, weights: dict[str, torch.Tensor]) -> tuple[str, bool] | None:
    """(checkpoint key, transposed?) of the tensor that ``t`` equals, if any."""
    t = t.detach().cpu()
    if t.dtype != torch.float32:
        return None
    for key, w in weights.items():
        if w.shape == t.shape and torch.equal(w, t):
            return key, False
        if w.dim() == 2 and w.T.shape == t.shape and torch.equal(w.T, t):
            return key, True
    return None


def _part(key: str) -> str:
    """ "encoder.layer.3.output.LayerNorm.weight" -> "output.LayerNorm.weight"."""
    return key.split(".", 3)[3]


def _layer_of(key: str) -> int:
    return int(key.split(".")[2])


def _explain(expected: str, found: tuple[str, bool] | None, i: int, packed: bool) -> str:
    """The likely cause, from the checkpoint tensor that should be there and the one that is."""
    if found is None:
        return (
            "its values match no tensor of the checkpoint (nor a transposed one): copy the "
            "checkpoint tensors as they are, without arithmetic.\n" + THE_MAP
        )
    key, transposed = found
    if _layer_of(key) != i and _part(key) == _part(expected):
        return (
            f"this is layer {_layer_of(key)}'s tensor, but you were asked for layer {i}: build the "
            f'keys from i, e.g. f"encoder.layer.{{i}}.{_part(expected)}".'
        )
    if transposed:
        return TRANSPOSED
    want, got = _part(expected).rsplit(".", 1), _part(key).rsplit(".", 1)
    if want[0] == got[0]:
        return WEIGHT_BIAS
    if {want[0], got[0]} == {"attention.output.LayerNorm", "output.LayerNorm"}:
        return NORMS_SWAPPED
    if {want[0], got[0]} <= {"intermediate.dense", "output.dense", "attention.output.dense"}:
        return DENSE_SWAPPED
    if {want[0], got[0]} <= {"attention.self.query", "attention.self.key", "attention.self.value"}:
        return QKV_ORDER if packed else QKV_SWAPPED
    return f"{_part(key)} does not go there.\n" + THE_MAP


def _mismatch(
    case: str, name: str, got: torch.Tensor, rows: list, weights: dict, i: int, packed: bool
) -> str | None:
    """Why parameter ``name`` is wrong (None when it is right). ``rows`` are its map rows: one for
    a plain copy, three (q, k, v) for the packed in_proj."""
    expected = torch.cat([weights[row.checkpoint] for row in rows])
    if got.shape == expected.shape and torch.equal(got.detach().cpu(), expected):
        return None
    header = f"Case {case!r}: {name} is not what the checkpoint says."
    if torch.isnan(got).all():
        sources = " + ".join(row.checkpoint for row in rows)
        return f"{header}\nLikely cause: {name} was never filled (it still holds the checker's NaN): copy {sources} into it."
    if got.shape != expected.shape:
        found = _holds(got, weights)
        shapes = f"  {name} has shape {tuple(got.shape)}, expected {tuple(expected.shape)}."
        where = (
            "" if found is None else f"\n  it holds {found[0]}{' transposed' if found[1] else ''}."
        )
        cause = (
            _explain(rows[0].checkpoint, found, i, packed)
            if found
            else "compare the shapes with the map.\n" + THE_MAP
        )
        return f"{header}\n{shapes}{where}\nLikely cause: {cause}"
    if len(rows) == 1:
        found = _holds(got, weights)
        holds = (
            "no checkpoint tensor"
            if found is None
            else found[0] + (" transposed" if found[1] else "")
        )
        return (
            f"{header}\n  expected {rows[0].checkpoint}\n  yours    {holds}\n"
            f"Likely cause: {_explain(rows[0].checkpoint, found, i, packed)}"
        )
    # the packed in_proj: name what each third holds
    E = got.size(0) // 3
    lines, cause = [], None
    for k, (row, third) in enumerate(zip(rows, got.split(E))):
        found = _holds(third, weights)
        holds = (
            "no checkpoint tensor"
            if found is None
            else found[0] + (" transposed" if found[1] else "")
        )
        lines.append(
            f"  rows [{k * E}:{(k + 1) * E}] expected {_part(row.checkpoint)}, yours {holds}"
        )
        if cause is None and (found is None or found[0] != row.checkpoint or found[1]):
            cause = _explain(row.checkpoint, found, i, packed)
    return f"{header}\n" + "\n".join(lines) + f"\nLikely cause: {cause}"


# ---------------------------------------------------------------- running the learner's code


def _crash_hint(error: BaseException, i: int) -> str | None:
    text = str(error)
    if isinstance(error, KeyError):
        return (
            f"{text} is not a name in the checkpoint. Layer {i}'s names are "
            f'f"encoder.layer.{i}." + one of: attention.self.query.weight, attention.output.dense.bias, '
            f"intermediate.dense.weight, output.LayerNorm.weight, ... (print(list(weights)) shows them all)."
        )
    if "in-place operation" in text or "requires grad" in text:
        return (
            "copying into a parameter must not be recorded by autograd: put the copies inside "
            "`with torch.no_grad():`."
        )
    if "cannot assign" in text and "parameter" in text:
        return (
            "a parameter can only be replaced by an nn.Parameter: copy into it with "
            "layer.linear1.weight.copy_(tensor) (inside torch.no_grad()), or wrap the tensor in nn.Parameter."
        )
    if isinstance(error, RuntimeError) and any(word in text for word in ("size", "shape")):
        return (
            "a shape mismatch while copying. Both nn.Linear and the checkpoint store a weight as "
            "(out_features, in_features), so copy without .T: query/key/value.weight are (384, 384) each "
            "and stack into in_proj_weight (1152, 384); intermediate.dense.weight (1536, 384) -> "
            "linear1.weight; output.dense.weight (384, 1536) -> linear2.weight."
        )
    return None


def _run(candidate, case: str, layer, weights: dict, i: int):
    try:
        return call_candidate(candidate, case, layer, weights, i)
    except ExerciseFailure as failure:
        error = failure.raised
        hint = None if error is None else _crash_hint(error, i)
        if hint is None:
            raise
        raise failure.with_cause(hint) from error


@functools.lru_cache(maxsize=8)
def _expected_names(packed: bool, i: int) -> tuple[str, ...]:
    """The parameters the reference fills, in order (the checker compares them in this order).
    The reference must fill every one with exactly the checkpoint's tensors."""
    weights = fake_checkpoint()
    layer = blank_layer(packed)
    reference.load_layer(layer, weights, i)
    for name, p in layer.named_parameters():
        if torch.isnan(p).any():
            raise RuntimeError(f"the reference load_layer left {name} unfilled")
    return tuple(name for name, _ in layer.named_parameters())


def _asks_for_separate_projections(failure: ExerciseFailure) -> bool:
    error = failure.__cause__
    return isinstance(error, AttributeError) and any(
        name in str(error) for name in ("q_proj", "k_proj", "v_proj")
    )


@checker(
    "load_layer",
    "Replace `raise NotImplementedError` with the copies from the checkpoint into the layer's parameters.",
)
def check_load_layer(candidate) -> int:
    """Check ``candidate(layer, weights, i)``: fills ``layer`` with layer ``i`` of the checkpoint
    ``weights``, in either layout; the first wrong parameter is named, with the likely cause."""
    weights = fake_checkpoint()
    packed = True
    for i in CASES:
        case = f"layer {i}"
        layer = blank_layer(packed)
        try:
            result = _run(candidate, case, layer, _Handout(weights), i)
        except ExerciseFailure as failure:
            if not (packed and _asks_for_separate_projections(failure)):
                raise
            packed = False  # the learner's layer keeps q_proj, k_proj, v_proj: check that layout
            layer = blank_layer(packed)
            result = _run(candidate, case, layer, _Handout(weights), i)
        params = dict(layer.named_parameters())
        by_parameter: dict[str, list] = {}
        for row in layer_weight_map(i, packed=packed):
            by_parameter.setdefault(row.parameter, []).append(row)
        for name in _expected_names(packed, i):
            if name not in params:
                raise ExerciseFailure(
                    f"Case {case!r}: the layer has no parameter {name} any more; fill the "
                    f"existing parameters instead of deleting or renaming them."
                )
            problem = _mismatch(case, name, params[name], by_parameter[name], weights, i, packed)
            if problem is not None:
                if isinstance(result, nn.Module) and result is not layer:
                    problem += (
                        "\nNote: your function returned a new module; fill the `layer` it is given "
                        "instead (in place), and return nothing."
                    )
                raise ExerciseFailure(problem)
    return len(CASES)


check_weight_map = check_load_layer  # the exercise is "write the weight-loading map"
