"""Lesson 05's exercises on a real pretrained encoder's outputs (all-MiniLM-L6-v2): sentence
embeddings (``embed_sentences``), and what each head is worth, measured by switching it off
(``head_ablation``). The references are the package's own, :mod:`mha_course.pretrained`."""

from __future__ import annotations

import copy
import functools

import torch
import torch.nn.functional as F
from torch import nn

from .. import pretrained, reference
from ._core import Mistake, exercise
from ._failure import ExerciseFailure
from ._table import Case, Out, Table, call_diagnosed, require_tensor

# ---------------------------------------------------------------- embed_sentences


class SmallMiniLM(pretrained.MiniLM):
    """The checker's model: a small random MiniLM (2 layers, E = 24) with the real WordPiece
    tokenizer, all that ``embed_sentences`` needs, cheap to run; without ``encode``, which is the
    package's own answer to this exercise."""

    def encode(self, *args, **kwargs):
        raise AttributeError(
            "the checker's model has no encode(): it is the course's version of this exercise. "
            "The model's tokenize and its forward are the steps to use."
        )


@functools.lru_cache(maxsize=1)
def _small_model() -> SmallMiniLM:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(pretrained.model_directory() / "tokenizer.json"))
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    config = pretrained.MiniLMConfig(
        hidden_size=24, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48
    )
    with torch.random.fork_rng():
        torch.manual_seed(52)
        return SmallMiniLM(config, tokenizer).eval()


_POOL = {  # flaw -> how it pools the hidden states h (N, L, E), m being the mask (N, L, 1)
    "": lambda h, m: (h * m).sum(1) / m.sum(1),
    "padding averaged in": lambda h, m: h.mean(1),
    "sum, not normalised": lambda h, m: (h * m).sum(1),
    "[CLS]": lambda h, m: h[:, 0],
    "max over the tokens": lambda h, m: h.max(1).values,
    "no attention_mask at all": lambda h, m: h.mean(1),
    "over the batch axis": lambda h, m: (h * m).sum(0) / m.sum(0),
    "over the batch axis, the padding in": lambda h, m: h.mean(0),
    "mask without a features axis": lambda h, m: (h * m[..., 0]).sum(1),
    "counts without their axis": lambda h, m: (h * m).sum(1) / m.sum(1)[:, 0],
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
    return F.normalize(pooled, dim=0 if flaw == "normalised over the batch" else -1)


_EMBED_FLAWS = {
    "padding averaged in": "you averaged over every position, the padding too: a short "
    "sentence's vector then depends on the longest sentence of its batch. Only its real tokens "
    "count.",
    "not normalised": "your vectors are the right means but not of length 1; each is divided by "
    "its length (F.normalize), so that a dot product is a cosine.",
    "sum, not normalised": "your vectors are sums of the real tokens, not of length 1; each is "
    "divided by its length (F.normalize), and the count of tokens then does not matter.",
    "normalised over the batch": "you normalised over the batch axis; each sentence's own vector "
    "has length 1, its norm taken over the features.",
    "[CLS]": "you took the [CLS] token's vector. all-MiniLM-L6-v2 was trained with the mean of "
    "the real tokens as the sentence's vector, so that is what its similarities mean.",
    "max over the tokens": "you took the largest value of each feature; the sentence's vector is "
    "the mean of its real tokens.",
    "no attention_mask in the forward": "the model ran without the attention_mask, so the real "
    "tokens attended to the padding: the model takes the tokenizer's attention_mask too.",
    "no attention_mask at all": "the attention_mask is used nowhere: the model ran without it "
    "(the real tokens attended to the padding) and the padding was averaged in.",
    "over the batch axis": "you pooled over the batch axis; a sentence's vector is the mean over "
    "its own real tokens, the tokens' axis.",
    "over the batch axis, the padding in": "you averaged over the batch axis, the padding "
    "included; a sentence's vector is the mean over its own real tokens, the tokens' axis.",
    "mask without a features axis": "the mask (N, L) needs an axis for the features to multiply "
    "the hidden states (N, L, E): (N, L, 1), one factor per token.",
    "counts without their axis": "the counts of real tokens are (N,): they need a length-1 axis, "
    "(N, 1), to divide the sums (N, E) row by row.",
}
_EMBED_MISTAKES = [
    Mistake(flaw, functools.partial(_embed, flaw=flaw), why) for flaw, why in _EMBED_FLAWS.items()
]


def _embed_cases():
    model = _small_model()
    sentences = ["Which do you like better, coffee or tea?", "Hi!", "The cat sleeps all day."]
    yield Case("3 sentences of 12, 4 and 8 tokens", (model, sentences))
    yield Case("one sentence, no padding", (model, ["Attention is all you need."]))
    sentences = ["The train to Paris leaves at nine o'clock tomorrow morning.", "Yes.", "Snow."]
    yield Case(
        "3 sentences, the longest first", (model, [*sentences, "How do I reset my password?"])
    )


EMBED = Table(
    cases=_embed_cases,
    reference=pretrained.embed_sentences,
    mistakes=_EMBED_MISTAKES,
    outputs=[
        Out(
            "the sentence vectors",
            shape_hint="one vector per sentence, (N, E): pool over the tokens.",
            fallback="each sentence's vector is the mean of its real tokens (attention_mask 1), "
            "divided by its length (F.normalize does that) over the features.",
        )
    ],
    crash="the hidden states are (N, L, E) and the attention_mask (N, L): the mask needs a last "
    "axis of size 1 to multiply every feature, and the pooling runs over the tokens.",
)
check_embed_sentences = exercise(
    "embed_sentences",
    "05",
    reference=pretrained.embed_sentences,
    todo="Replace `raise NotImplementedError` with the steps from sentences to normalised mean "
    "vectors.",
    table=EMBED,
)


# ---------------------------------------------------------------- head_ablation


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
    """A fresh copy of the checker's model: ``num_layers`` post-LN layers (lesson 04's, with
    lesson 02's attention) of ``H`` heads each, in float64."""
    return copy.deepcopy(_built(num_layers, E, H, seed))


def case_score(num_layers: int, E: int, H: int, seed: int):
    """score(model) -> float: a fixed random reading of the model's output on a fixed batch with
    padding (so that a head's effect reaches the score through the whole encoder)."""
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
_OFF = {  # flaw -> what it zeroes to switch off head h, whose features are f = h·D … (h+1)·D − 1
    "": lambda a, f, h, H: [a.out_proj.weight[:, f]],
    "rows of W^O": lambda a, f, h, H: [a.out_proj.weight[f]],
    "the shared bias too": lambda a, f, h, H: [a.out_proj.weight[:, f], a.out_proj.bias],
    "a slice of the shared bias too": lambda a, f, h, H: [
        a.out_proj.weight[:, f],
        a.out_proj.bias[f],
    ],
    "queries or keys": lambda a, f, h, H: [a.q_proj.weight[f], a.q_proj.bias[f]],
    "query weights": lambda a, f, h, H: [a.q_proj.weight[f]],
    "value weights without their bias": lambda a, f, h, H: [a.v_proj.weight[f]],
    "strided heads": lambda a, f, h, H: [a.out_proj.weight[:, h::H]],
}


def _ablation(model, score, flaw=""):
    """``head_ablation`` with one classic ``flaw`` switched on (a key of :data:`_OFF`, or "heads
    left off", "the sign", "scores, not drops")."""
    layers = model.encoder.layers
    H = layers[0].self_attn.num_heads
    base, drops = score(model), torch.zeros(len(layers), H, dtype=torch.float64)
    for i, layer in enumerate(layers):
        a = layer.self_attn
        D = a.out_proj.weight.size(1) // H
        for h in range(H):
            kept = copy.deepcopy(a.state_dict())
            with torch.no_grad():
                for t in _OFF.get(flaw, _OFF[""])(a, slice(h * D, (h + 1) * D), h, H):
                    t.zero_()
            drops[i, h] = score(model) if flaw == "scores, not drops" else base - score(model)
            if flaw != "heads left off":
                a.load_state_dict(kept)
    return -drops if flaw == "the sign" else drops


_COLUMNS = (
    "head h's output is features h·D … (h+1)·D − 1 of the concatenation, and it meets W^O only "
    "in those columns of out_proj.weight (an nn.Linear weight is (out_features, in_features)): "
    "those columns are what switching the head off zeroes, inside torch.no_grad()."
)
_RESTORE = (
    "every switched-off head goes back before the next one, from a copy (.clone()) kept before "
    "zeroing: a slice of the weight is a view, zeroed with the weight."
)
_STILL_SENDS = "A head with no {} still sends on an output: {}. Switch off what the head sends on: "
_ABLATION_FLAWS = {
    "rows of W^O": "you zeroed rows of out_proj.weight: those are output features, which every "
    "head writes into. " + _COLUMNS,
    "the shared bias too": "you zeroed out_proj.bias too. The bias of W^O is added once, for all "
    "the heads together: it stays, and only the head's columns of out_proj.weight go.",
    "a slice of the shared bias too": "you zeroed part of out_proj.bias too. The bias of W^O "
    "belongs to no head (it is added once, after the heads are mixed): it stays, and only the "
    "head's columns of out_proj.weight go.",
    "heads left off": "each head stayed off while the next ones were measured, so the drops add "
    "up along each row: " + _RESTORE,
    "queries or keys": "you zeroed the head's queries (or keys). "
    + _STILL_SENDS.format("query or no key", "it attends evenly to every token")
    + _COLUMNS,
    "query weights": "you zeroed the head's query weights. "
    + _STILL_SENDS.format("query weights", "its attention now depends on the bias alone")
    + _COLUMNS,
    "value weights without their bias": "you zeroed the head's value weights but not their bias, "
    "so every value is the bias and the head still outputs it. The bias rows go too, or the "
    "output is switched off instead: " + _COLUMNS,
    "strided heads": "you took head h as every H-th feature (h, h+H, ...). The concatenation "
    "puts each head's D features side by side: head h is features h·D … (h+1)·D − 1.",
    "the sign": "your numbers have the wrong sign. The drop is the score of the whole model minus "
    "the score with the head off: positive when the head helped.",
    "scores, not drops": "you returned the scores with each head off; the drops are the score of "
    "the whole model minus each of those.",
}
_ABLATION_MISTAKES = [  # each run on a fresh copy of the case's model: mistakes change the model
    Mistake(f, lambda *c, f=f: _ablation(case_model(*c), case_score(*c), f), why)
    for f, why in _ABLATION_FLAWS.items()
]


def _ablation_crash(error: BaseException, case: Case) -> str | None:
    text = str(error)
    if "in-place operation" in text or "requires grad" in text:
        return (
            "changing a parameter in place must not be recorded by autograd: it belongs inside a "
            "torch.no_grad() block."
        )
    if isinstance(error, TypeError) and "positional argument" in text:
        return "score takes the model as its one argument, runs it and returns a number."
    if isinstance(error, AttributeError) and "num_heads" in text:
        return "the number of heads is the attention's num_heads (lesson 02's __init__ keeps it)."
    return None


def _drops_shape(got, case: Case) -> str:
    layers, _, H, _ = case.args
    if tuple(got.shape) == (H, layers):
        return "layers and heads swapped: one row per layer, one column per head."
    return (
        "one drop per (layer, head): as many rows as the model has layers, as many columns as "
        "each has heads (both taken from the model, not from the notebook)."
    )


def _changed(model: nn.Module, fresh: nn.Module) -> str | None:
    """The first parameter of ``model`` that is not what it was (``fresh``), with where."""
    before = dict(fresh.named_parameters())
    for name, p in model.named_parameters():
        p, was = p.detach(), before[name].detach()
        if p.shape != was.shape or not torch.equal(p, was):
            if p.dim() == 2 and p.shape == was.shape:
                columns = (p != was).any(dim=0).nonzero().flatten().tolist()
                return f"{name}, columns {columns[0]} … {columns[-1]}"
            return name
    return None


@exercise(
    "head_ablation",
    "05",
    reference=pretrained.head_ablation,
    todo="Replace `raise NotImplementedError` with the loop that switches each head off, scores "
    "the model, and puts the head back.",
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
        require_tensor(
            case,
            "the drops per layer and head",
            got,
            expected,
            _ABLATION_MISTAKES,
            sizes,
            shape_hint=_drops_shape,
            cause=lambda got, case: (
                None
                if got.is_floating_point()
                else "the drops are fractions, and an integer tensor cuts them off: the result is a "
                "float tensor."
            ),
            fallback="switch one head off at a time, score the model, put the head back; the drop "
            "is the whole model's score minus that. " + _COLUMNS,
            atol=1e-6,
            rtol=1e-4,
        )
        if any(m._forward_hooks or m._forward_pre_hooks for m in model.modules()):
            raise ExerciseFailure(
                f"Case {case!r}: your drops are right, but afterwards the model still has hooks "
                "on it, so it no longer computes what it did.\nLikely cause: every hook "
                "registered is removed again (registering one returns a handle with a remove "
                "method)."
            )
        where = _changed(model, case_model(*sizes))
        if where is not None:
            raise ExerciseFailure(
                f"Case {case!r}: your drops are right, but afterwards the model is not as it was: "
                f"{where} changed.\nLikely cause: {_RESTORE}"
            )
    return len(ABLATION_CASES)
