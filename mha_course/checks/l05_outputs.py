"""Lesson 05's exercises on a pretrained encoder's outputs (all-MiniLM-L6-v2): sentence embeddings
(``embed_sentences``), and each head's worth, measured by switching it off (``head_ablation``)."""

from __future__ import annotations

import copy
import functools

import torch
import torch.nn.functional as F
from torch import nn

from .. import pretrained, reference
from . import families
from ._core import Mistake, exercise
from ._failure import ExerciseFailure
from ._table import Case, Out, Table, call_diagnosed, require_tensor


class SmallMiniLM(pretrained.MiniLM):
    """The checker's model: a small random MiniLM with the real tokenizer, and no ``encode``."""

    def encode(self, *args, **kwargs):
        raise AttributeError(
            "the checker's model has no encode(), the course's version of this exercise: the "
            "model's tokenize and its forward are the steps to use."
        )


@functools.lru_cache(maxsize=1)
def _small_model() -> SmallMiniLM:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(pretrained.model_directory() / "tokenizer.json"))
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    sizes = dict(hidden_size=24, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48)
    config = pretrained.MiniLMConfig(**sizes)
    with torch.random.fork_rng():
        torch.manual_seed(52)
        return SmallMiniLM(config, tokenizer).eval()


_POOL = {  # flaw -> how it pools the hidden states h (N, L, E), m being the mask (N, L, 1)
    "": lambda h, m: (h * m).sum(1) / m.sum(1),
    "padding averaged in": lambda h, m: h.mean(1),
    "sum, not normalised": lambda h, m: (h * m).sum(1),
    "[CLS]": lambda h, m: h[:, 0],
    "max": lambda h, m: h.max(1).values,
    "no attention_mask at all": lambda h, m: h.mean(1),
    "batch": lambda h, m: (h * m).sum(0) / m.sum(0),
    "batch, padding": lambda h, m: h.mean(0),
    "mask axis": lambda h, m: (h * m[..., 0]).sum(1),
    "counts axis": lambda h, m: (h * m).sum(1) / m.sum(1)[:, 0],
}


def _embed(model, sentences, flaw=""):
    """``embed_sentences`` with one classic ``flaw`` switched on."""
    batch = model.tokenize(sentences)
    mask = None if "no attention_mask" in flaw else batch["attention_mask"]
    with torch.no_grad():
        h = model(batch["input_ids"], attention_mask=mask).last_hidden_state
    pooled = _POOL.get(flaw, _POOL[""])(h, batch["attention_mask"][..., None].to(h.dtype))
    if flaw in ("not normalised", "sum, not normalised"):
        return pooled
    return F.normalize(pooled, dim=0 if flaw == "batch norm" else -1)


_EMBED_FLAWS = {
    "padding averaged in": "you averaged over every position, the padding too: a short "
    "sentence's vector then depends on its batch. Only its real tokens count.",
    "not normalised": "your vectors are the right means but not of length 1: each is divided by "
    "its length (F.normalize), so that a dot product is a cosine.",
    "sum, not normalised": "your vectors are sums of the real tokens, not of length 1: divided by "
    "its length (F.normalize), a vector no longer depends on the count of tokens.",
    "batch norm": "you normalised over the batch axis; each sentence's vector has length 1.",
    "[CLS]": "you took the [CLS] token's vector; all-MiniLM-L6-v2 was trained with the mean of "
    "the real tokens as the sentence's vector.",
    "max": "you took the largest value of each feature, not the mean of the real tokens.",
    "no attention_mask in the forward": "the model ran without the attention_mask, so the real "
    "tokens attended to the padding: the model takes it too.",
    "no attention_mask at all": "the attention_mask is used nowhere: the real tokens attended to "
    "the padding, which was averaged in.",
    "batch": "you pooled over the batch axis, not over each sentence's own real tokens.",
    "batch, padding": "you averaged over the batch axis, the padding included.",
    "mask axis": "the mask (N, L) needs an axis for the features to multiply (N, L, E): (N, L, 1).",
    "counts axis": "the counts (N,) need a length-1 axis, (N, 1), to divide the sums (N, E).",
}


def _embed_cases():
    model = _small_model()
    sentences = ["Which do you like better, coffee or tea?", "Hi!", "The cat sleeps all day."]
    yield Case("3 sentences of 12, 4 and 8 tokens", (model, sentences))
    yield Case("one sentence, no padding", (model, ["Attention is all you need."]))
    longest = ["The train to Paris leaves at nine o'clock tomorrow morning.", "Yes.", "Snow."]
    yield Case("3 sentences, the longest first", (model, [*longest, "How do I reset my password?"]))


_ONE_EACH = "one vector per sentence, (N, E): pool over the tokens."
_MEAN = "each sentence's vector is the mean of its real tokens (attention_mask 1), of length 1."
EMBED = Table(
    cases=_embed_cases,
    reference=pretrained.embed_sentences,
    mistakes=families.flawed(_embed, _EMBED_FLAWS, **_EMBED_FLAWS),
    outputs=[Out("the sentence vectors", shape_hint=_ONE_EACH, fallback=_MEAN)],
    crash="the hidden states are (N, L, E) and the attention_mask (N, L): the mask needs a last "
    "axis of size 1 to multiply every feature.",
)
todo = "Replace `raise NotImplementedError` with the steps to normalised mean vectors."
check_embed_sentences = exercise(
    "embed_sentences", "05", reference=pretrained.embed_sentences, todo=todo, table=EMBED
)


@functools.lru_cache(maxsize=4)
def _built(num_layers: int, E: int, H: int, seed: int) -> nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = nn.Module()  # what head_ablation is given: the layers in model.encoder.layers
        model.encoder = nn.Module()
        model.encoder.layers = nn.ModuleList(
            reference.EncoderLayer(E, H, 2 * E, activation=F.gelu).double().eval()
            for _ in range(num_layers)
        )
        with torch.no_grad():
            for layer in model.encoder.layers:
                for p in layer.parameters():  # a bias in every part, so that forgetting one shows
                    if p.dim() == 1:
                        p.normal_(0, 0.3)
                layer.self_attn.q_proj.weight.mul_(4)  # sharp attention: a head with no query
                layer.self_attn.q_proj.bias.mul_(4)  # (attending evenly) then differs clearly
    return model.eval()


def case_model(num_layers: int = 3, E: int = 16, H: int = 4, seed: int = 0) -> nn.Module:
    """A fresh copy of the checker's model: ``num_layers`` of lesson 04's layers, in float64."""
    return copy.deepcopy(_built(num_layers, E, H, seed))


def case_score(num_layers: int, E: int, H: int, seed: int):
    """score(model) -> float: a fixed random reading of its output on a fixed padded batch."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 5, E, generator=g, dtype=torch.float64)
    may_attend = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])[:, None, None, :]
    readout = torch.randn(2, 5, E, generator=g, dtype=torch.float64)

    def score(model: nn.Module) -> float:
        h = x
        with torch.no_grad():
            for layer in model.encoder.layers:
                h = layer(h, attn_mask=may_attend)
        return float((h * readout).sum() / 10)

    return score


ABLATION_CASES = (  # (name, layers, E, H, seed)
    ("3 layers of 4 heads, E = 16", 3, 16, 4, 0),
    ("2 layers of 2 heads, E = 12", 2, 12, 2, 1),
)


def _ablation(model, score, flaw=""):
    """``head_ablation`` with one classic ``flaw`` switched on (see :data:`_ABLATION_FLAWS`)."""
    layers = model.encoder.layers
    H = layers[0].self_attn.num_heads
    base, drops = score(model), torch.zeros(len(layers), H, dtype=torch.float64)
    for i, layer in enumerate(layers):
        a = layer.self_attn
        w, b, q = a.out_proj.weight, a.out_proj.bias, a.q_proj
        D = w.size(1) // H
        for h in range(H):
            f = slice(h * D, (h + 1) * D)  # head h's features
            off = {  # flaw -> what it zeroes to switch head h off
                "rows": [w[f]],
                "bias": [w[:, f], b],
                "bias slice": [w[:, f], b[f]],
                "queries": [q.weight[f], q.bias[f]],
                "query weights": [q.weight[f]],
                "values": [a.v_proj.weight[f]],
                "strided": [w[:, h::H]],
            }
            kept = copy.deepcopy(a.state_dict())
            with torch.no_grad():
                for t in off.get(flaw, [w[:, f]]):
                    t.zero_()
            drops[i, h] = score(model) if flaw == "scores" else base - score(model)
            if flaw != "left off":
                a.load_state_dict(kept)
    return -drops if flaw == "sign" else drops


_COLUMNS = (
    "head h's output, features h·D … (h+1)·D − 1, meets W^O only in those columns of "
    "out_proj.weight, which is (out_features, in_features): switching the head off zeroes them, "
    "in torch.no_grad()."
)
_RESTORE = (
    "every switched-off head goes back before the next one, from a copy (.clone()) kept before "
    "zeroing: a slice of the weight is a view, zeroed with the weight."
)
_SENDS = " Switch off what the head sends on: " + _COLUMNS
_ABLATION_FLAWS = {
    "rows": "you zeroed rows of out_proj.weight: output features, which every head writes into. "
    + _COLUMNS,
    "bias": "you zeroed out_proj.bias too; W^O's bias is added once, for all the heads.",
    "bias slice": "you zeroed part of out_proj.bias too; W^O's bias belongs to no head.",
    "left off": "each head stayed off while the next ones were measured, so the drops add up along "
    "each row: " + _RESTORE,
    "queries": "you zeroed the head's queries (or keys): it then attends evenly to every token, "
    "and still sends that on." + _SENDS,
    "query weights": "you zeroed the head's query weights: its attention then depends on the bias "
    "alone, and it still sends that on." + _SENDS,
    "values": "you zeroed the head's value weights but not their bias: every value is the bias, "
    "which the head still sends on." + _SENDS,
    "strided": "you took head h as every H-th feature (h, h+H, ...); its D sit side by side.",
    "sign": "your numbers have the wrong sign: the drop is the score with the head minus without.",
    "scores": "you returned the scores with each head off, not the drops from the whole model's.",
}
_ABLATION_MISTAKES = [  # each run on a fresh copy of the case's model: mistakes change the model
    Mistake(f, lambda *c, f=f: _ablation(case_model(*c), case_score(*c), f), why)
    for f, why in _ABLATION_FLAWS.items()
]


def _ablation_crash(error: BaseException, case: Case) -> str | None:
    text = str(error)
    if "in-place operation" in text or "requires grad" in text:
        return "autograd must not record changes to a parameter: they go in torch.no_grad()."
    if isinstance(error, TypeError) and "positional argument" in text:
        return "score takes the model as its one argument, runs it and returns a number."
    if isinstance(error, AttributeError) and "num_heads" in text:
        return "the number of heads is the attention's num_heads (lesson 02's __init__ keeps it)."
    return None


def _drops_shape(got, case: Case) -> str:
    layers, _, H, _ = case.args
    if tuple(got.shape) == (H, layers):
        return "layers and heads swapped: one row per layer, one column per head."
    return "a drop per (layer, head): a row per layer, a column per head (the model's, not yours)."


def _changed(model: nn.Module, fresh: nn.Module) -> str | None:
    """The first parameter of ``model`` that is not what it was (``fresh``), with where."""
    before = dict(fresh.named_parameters())
    for name, p in model.named_parameters():
        was = before[name]
        if p.shape != was.shape or not torch.equal(p, was):
            if p.dim() == 2 and p.shape == was.shape:
                columns = (p != was).any(dim=0).nonzero().flatten().tolist()
                return f"{name}, columns {columns[0]} … {columns[-1]}"
            return name
    return None


_INTEGER = "the drops are fractions, and an integer tensor cuts them off: the result is float."
_HOOKS = "a hook registered stays until it is removed (the handle it returns has a remove method)."
_DROPS = {  # how the drops are held
    "shape_hint": _drops_shape,
    "cause": lambda got, case: None if got.is_floating_point() else _INTEGER,
    "fallback": "switch one head off at a time, score the model, put the head back; the drop is "
    "the whole model's score minus that. " + _COLUMNS,
    "atol": 1e-6,
    "rtol": 1e-4,
}


@exercise(
    "head_ablation",
    "05",
    reference=pretrained.head_ablation,
    todo="Replace `raise NotImplementedError` with the loop that switches each head off and back.",
    own_work={
        "the course's heads_off": pretrained.heads_off,
        "the course's head_ablation": pretrained.head_ablation,
    },
)
def check_head_ablation(candidate) -> int:
    """Check ``candidate(model, score) -> (layers, H)``: each head's drop in ``score(model)``, the
    model left as it was (no weight changed, no hook left on it)."""
    for case, *sizes in ABLATION_CASES:
        model, score = case_model(*sizes), case_score(*sizes)
        got = call_diagnosed(candidate, Case(case, (model, score)), (), _ablation_crash)
        expected = pretrained.head_ablation(case_model(*sizes), score)
        mistakes, what = _ABLATION_MISTAKES, "the drops per layer and head"
        require_tensor(case, what, got, expected, mistakes, sizes, **_DROPS)
        if any(m._forward_hooks or m._forward_pre_hooks for m in model.modules()):
            after, cause = "the model still has hooks on it", _HOOKS
        elif where := _changed(model, case_model(*sizes)):
            after, cause = f"the model is not as it was: {where} changed", _RESTORE
        else:
            continue
        raise ExerciseFailure(
            f"Case {case!r}: your drops are right, but afterwards {after}.\nLikely cause: {cause}"
        )
    return len(ABLATION_CASES)
