"""Lesson 07's generation: ``sample_next``, each token's share of thousands of draws held to its
probability (greedy exact), and the KV cache (``CachedAttention``), fed a sequence in pieces as
generation does, each piece's output held to causal attention over the whole sequence."""

from __future__ import annotations

import contextlib
import copy
import functools
import re
from collections import Counter

import torch
from torch import nn

from .. import masks, reference
from .._validate import shape_str
from ..attention import scaled_dot_product_attention
from ..generation import sample_next
from . import families
from ._core import call_candidate, exercise
from ._failure import ExerciseFailure
from ._table import Case, build_module, require_tensor, seeded_randn

# ---------------------------------------------------------------- sample_next

DRAWS, TOLERANCE = 8000, 0.03  # draws per row of logits; on each token's share of them
_RECIPE = (
    "the temperature divides the logits; top-k keeps the k largest and blocks the others; a "
    "softmax; then one draw per row, with the generator given."
)
_CRASH = (
    "torch.multinomial wants non-negative weights, one row per draw: the probabilities, not the "
    "logits or log-probabilities. " + _RECIPE
)
_GREEDY = (("greedy, top_k = 1, logits (64, 10)", 1.0), ("greedy at temperature 0.7", 0.7))
_SAMPLE_TEXTS = {
    "temperature after the softmax": "your temperature ({t}) changes nothing: it comes after the "
    "softmax (a draw renormalises), or not at all. It divides the logits.",
    "softmax, temperature, softmax again": "you divided the probabilities by the temperature and "
    "took a softmax again; the temperature divides the logits, before the one softmax.",
    "temperature multiplied": "you multiplied the logits by the temperature ({t}); they are "
    "divided by it (below 1 it sharpens the distribution, above 1 flattens it).",
    "always the likeliest token": "your answer is always the likeliest token: that is greedy "
    "decoding, top_k = 1. Otherwise each token is drawn with its probability.",
    "top-k keeps k - 1": "you kept {below} tokens instead of top_k = {k}: an off-by-one in top-k.",
    "top-k keeps k + 1": "you kept {above} tokens instead of top_k = {k}: an off-by-one in the "
    "threshold (the (k+1)-th largest logit is the first one dropped).",
    "top-k keeps the smallest": "you kept the k *smallest* logits; top-k keeps the k largest.",
    "uniform over the top k": "you drew uniformly among the top k tokens; they are drawn with "
    "their probabilities, softmax(kept logits / temperature).",
    "top-k ignored": "top_k = {k} is ignored: every token can be drawn.",
}
_TODO = "Replace `raise NotImplementedError` in sample_next: temperature, top-k, softmax, draw."
_SAMPLE_OWN = {"the course's sample_next (mha_course)": sample_next}
_SAMPLE_LOGITS = [  # no ties, the largest at different places
    [2.0, 1.0, 0.5, 0.0, -1.0, -3.0],
    [0.3, -0.2, 1.4, 0.9, -0.5, 0.1],
    [-1.0, 0.0, 0.2, -0.4, 0.6, 1.1],
    [0.0, 3.0, -2.0, 1.5, 2.2, -0.7],
]
_SAMPLES = [  # the logits' (temperature, top_k)
    Case("temperature 1.0, every token: logits (4, 6)", (1.0, None)),
    Case("temperature 0.5 (sharper)", (0.5, None)),
    Case("temperature 2.0 (flatter)", (2.0, None)),
    Case("top_k=3, temperature 1.0", (1.0, 3)),
    Case("top_k=2, temperature 0.7", (0.7, 2)),
    Case("top_k=5 of 6, temperature 1.5", (1.5, 5)),
]


def _probs(logits, t=1.0, top_k=None, flaw=""):
    """softmax(top-k logits / temperature t), with ``flaw`` (None: it cannot be made here)."""
    if flaw == "softmax, temperature, softmax again":
        logits = logits.softmax(-1)
    scales = {"temperature after the softmax": 1.0, "temperature multiplied": 1 / t}
    scaled = logits / scales.get(flaw, 1e-6 if flaw == "always the likeliest token" else t)
    k = (top_k or 0) + {"top-k keeps k - 1": -1, "top-k keeps k + 1": 1}.get(flaw, 0)
    if top_k is None or flaw == "top-k ignored":
        return torch.softmax(scaled, dim=-1)
    if not 0 < k <= logits.size(-1):
        return None
    kept = torch.topk(scaled, k, dim=-1, largest=flaw != "top-k keeps the smallest").indices
    picked = 0.0 if flaw == "uniform over the top k" else scaled.gather(-1, kept)
    return torch.softmax(torch.full_like(scaled, -torch.inf).scatter(-1, kept, picked), dim=-1)


def _draw(candidate, case: str, logits, temperature=1.0, top_k=None, seed=0, copies=DRAWS):
    """The candidate's draws (R·copies,) for the rows of ``logits`` (R, V) repeated, checked."""
    given = logits.repeat_interleave(copies, dim=0)
    (B, V), g = given.shape, seed if seed is None else torch.Generator().manual_seed(seed)
    kwargs = {"temperature": temperature, "top_k": top_k, "generator": g}
    ids = call_candidate(candidate, case, given, crash_hint=_CRASH, **kwargs)
    problem = cause = None
    if not torch.equal(given, logits.repeat_interleave(copies, dim=0)):
        problem = "sample_next changed the logits it was given (in place)"
        cause = "the caller still needs its logits: new tensors are made from them instead."
    elif not isinstance(ids, torch.Tensor):
        problem = f"result is a {type(ids).__name__}, expected a tensor of token ids (B, 1)"
    elif tuple(ids.shape) != (B, 1):
        problem = f"result has shape {shape_str(ids.shape)}, expected (B, 1) = ({B}, 1)"
        cause = {(B, V): "you returned the probabilities: a token is drawn from them."}.get(
            tuple(ids.shape), "one id per row, kept as a column (B, 1), as one draw per row gives."
        )
    elif ids.is_floating_point() or ids.dtype == torch.bool:
        problem = f"ids are {ids.dtype}; token ids are integers (torch.long)"
    elif int(ids.min()) < 0 or int(ids.max()) >= V:
        problem = f"ids run from {int(ids.min())} to {int(ids.max())}, not within 0 .. {V - 1}"
    if problem:
        because = f"\nLikely cause: {cause}" if cause else ""
        raise ExerciseFailure(f"Case {case!r}: your {problem}.{because}")
    return ids.flatten()


def _require_shares(case: Case, ids: torch.Tensor) -> None:
    logits, t, k = case.args
    R, V = logits.shape
    shares = nn.functional.one_hot(ids.view(R, DRAWS), V).sum(1).double() / DRAWS

    def fits(flaw=""):  # the shares drawn are the probabilities with ``flaw``
        p = _probs(logits.double(), t, k, flaw) if k or "top" not in flaw else None
        return p is not None and bool((shares - p).abs().max() <= TOLERANCE)

    if fits():
        return
    expected = _probs(logits.double(), t, k)
    row = int((shares - expected).abs().max(dim=-1).values.argmax())
    flaw = next((f for f in _SAMPLE_TEXTS if fits(f)), None)
    drawn, possible = int((shares[row] > 0).sum()), int((expected[row] > 0).sum())
    cause = _RECIPE if drawn == possible else f"you drew {drawn} tokens of {possible} possible."
    if flaw:
        cause = _SAMPLE_TEXTS[flaw].format(t=t, k=k, below=(k or 0) - 1, above=(k or 0) + 1)
    show = ", ".join
    raise ExerciseFailure(
        f"Case {case.name!r}: the tokens you drew do not follow the probabilities.\n"
        f"  row {row}, share of {DRAWS} draws per token:\n"
        f"  expected [{show(f'{v:.2f}' for v in expected[row].tolist())}]\n"
        f"  got      [{show(f'{v:.2f}' for v in shares[row].tolist())}]\nLikely cause: {cause}"
    )


def _require_greedy_and_the_generator(candidate, logits) -> None:
    big = torch.randn(64, 10, generator=torch.Generator().manual_seed(72))
    for case, t in _GREEDY:
        wrong = _draw(candidate, case, big, t, 1, copies=1) != big.argmax(dim=-1)
        if wrong.any():
            raise ExerciseFailure(
                f"Case {case!r}: {int(wrong.sum())} of 64 rows are not their likeliest token, "
                f"first row {int(wrong.nonzero()[0])}.\nLikely cause: top_k = 1 keeps exactly one "
                "token, the largest logit (an off-by-one in the top-k mask keeps 2, or 0)."
            )
    case = "the generator: the same seed, the same tokens"
    first, again, other = (_draw(candidate, case, logits, seed=s, copies=16) for s in (7, 7, 8))
    if not torch.equal(first, again):
        raise ExerciseFailure(
            f"Case {case!r}: two calls with generators seeded alike gave different tokens.\n"
            "Likely cause: your draw does not use `generator`: it goes to every random call."
        )
    if torch.equal(first, other):
        raise ExerciseFailure(
            f"Case {case!r}: generators with different seeds gave the same {len(first)} tokens.\n"
            "Likely cause: your function makes a generator of its own (or seeds one) instead of "
            "the one it is given."
        )
    try:
        _draw(candidate, case, logits, seed=None, copies=1)
    except ExerciseFailure as failure:
        raise failure.with_cause(
            "without a generator (None) the draw uses the global random stream: None is handed "
            "on as it is (torch's random functions accept it)."
        ) from failure.raised


@exercise("sample_next", "07", reference=sample_next, todo=_TODO, own_work=_SAMPLE_OWN)
def check_sample_next(candidate) -> int:
    """Check ``candidate(logits, temperature=1.0, top_k=None, generator=None)`` -> ids (B, 1)."""
    logits = torch.tensor(_SAMPLE_LOGITS)
    for seed, case in enumerate(_SAMPLES):
        case = Case(case.name, (logits, *case.args))
        _require_shares(case, _draw(candidate, case.name, *case.args, seed))
    _require_greedy_and_the_generator(candidate, logits)
    return len(_SAMPLES) + 2


# ---------------------------------------------------------------- a KV cache, fed in pieces

TOLERANCE_PIECES = {"atol": 1e-4, "rtol": 1e-3}
_NEW_ONLY = "the output of the new tokens only, (B, T, E)."


def project(a, H: int, query, key, value) -> tuple[torch.Tensor, ...]:
    """The new tokens' queries, keys and values through ``a``'s projections, (B, H, T, D) each."""
    pairs = ((a.q_proj, query), (a.k_proj, key), (a.v_proj, value))
    return tuple(families.split_heads(p(x), H) for p, x in pairs)


def random_attention(E: int, H: int, seed: int) -> nn.Module:
    """The lesson-02 reference MultiHeadAttention with random weights and biases."""
    g, attn = torch.Generator().manual_seed(seed), reference.MultiHeadAttention(E, H).eval()
    with torch.no_grad():
        for p in attn.parameters():
            p.copy_((E if p.dim() == 2 else 4) ** -0.5 * torch.randn(p.shape, generator=g))
    return attn


def fed(a, H: int, x, sizes, flaw="", before=None, max_len=None, piece=0) -> torch.Tensor:
    """Piece ``piece``'s output, x's pieces fed to a KV cache around ``a`` with ``flaw`` (static if
    ``max_len``); ``before``: the sequence fed to the one before (kept: "state not reset")."""
    B, L, E = x.shape
    kept = before if flaw == "state not reset" and before is not None else x[:, :0]
    slots = torch.arange(max_len or kept.size(1) + L)
    K = V = x.new_zeros(B, H, len(slots), E // H)
    p, outputs = 0, []
    for new in [kept, *x.split(list(sizes), dim=1)]:  # what was kept first: no output of its own
        q, k, v = project(a, H, new, new, new)
        T = q.size(2)
        at = p + torch.arange(T)  # the new tokens' positions
        written = at + (flaw == "written one slot late")
        K, V = K.index_copy(2, written, k), V.index_copy(2, written, v)
        i, whole = at[:, None], slots < p + T
        mask = {
            "causal top-left": slots <= torch.arange(T)[:, None],
            "mask after the advance": slots <= i + T,
            "off-by-one diagonal": slots <= i + 1,
            "causal without the diagonal": slots < i,
            "prompt not causal": whole,
            "mask ignored": whole,
            "cache not used": (slots >= p) & (slots <= i),
            "the new token's key not included": slots < p if p else slots <= i,
            "empty slots seen": None,
        }.get(flaw, slots <= i)
        if max_len is None:  # a growing cache holds the tokens so far, no more
            mask = mask & whole
        scaled = flaw if flaw == "scaled by √d_model" else ""
        out, _ = families.attention(q, K, V, mask, scaled, d_model=E)
        outputs.append(a.out_proj(families.merge_heads(out)))
        p += T
    return outputs[1 + piece]


def pieces(wrapper, name, attn, H, x, sizes, spec, crash_cause, **options):
    """Feed x (B, L, E) to the learner's cache in pieces of ``sizes`` tokens as a block does, each
    call inside ``options``' ``watch()``; hold each piece's (output, weights) to causal attention
    over the whole sequence, naming :func:`fed`'s flaws (``spec``: texts, the outputs' fallback,
    the weights' shape hint). Yields ``(i, label, start, end, watched)`` after each piece."""
    a64, x64 = copy.deepcopy(attn).double(), x.double()
    full, weights = scaled_dot_product_attention(*project(a64, H, x64, x64, x64), is_causal=True)
    full = a64.out_proj(families.merge_heads(full))
    watch, max_len = options.pop("watch", contextlib.nullcontext), options.get("max_len")
    texts, fallback, weights_hint = spec
    ends = torch.tensor(sizes).cumsum(0).tolist()
    for i, (start, end) in enumerate(zip([0, *ends], ends)):
        label, new = f"{name}; piece {i} (tokens {start}..{end - 1})", x[:, start:end]
        try:
            with torch.no_grad(), watch() as watched:
                mask = masks.causal_mask(end - start, end - start)
                result = call_candidate(wrapper, label, new, new, new, attn_mask=mask)
        except ExerciseFailure as failure:
            cause = failure.raised and crash_cause(failure.raised, i, start, end)
            if not cause:
                raise
            raise failure.with_cause(cause) from failure.raised
        if not (isinstance(result, tuple) and len(result) == 2):
            raise ExerciseFailure(
                f"Case {label!r}: your forward returned {type(result).__name__}; it returns "
                "(output, weights), as your MultiHeadAttention does: a block calls either."
            )
        run = functools.partial(fed, a64, H, x64, sizes, piece=i, **options)
        mistakes = families.flawed(run, texts, **texts)
        out, got = result
        hold = {"shape_hint": _NEW_ONLY, "fallback": fallback, **TOLERANCE_PIECES}
        require_tensor(label, "outputs", out, full[:, start:end], mistakes, (), **hold)
        if isinstance(got, torch.Tensor) or max_len:  # a growing cache's weights may be None
            expected = weights.new_zeros(x.size(0), H, end - start, max_len or end)
            expected[..., :end] = weights[:, :, start:end, :end]
            hold = {"shape_hint": weights_hint, **TOLERANCE_PIECES}
            require_tensor(label, "weights", got, expected, (), (), **hold)
        yield i, label, start, end, watched


# ---------------------------------------------------------------- CachedAttention


class CachedAttention(nn.Module):
    """``attn`` with a KV cache: forward on T new tokens appends their keys and values to
    ``self.k``, ``self.v`` (B, H, S, D); the new queries attend over all S + T, causal."""

    def __init__(self, attn, num_heads):
        super().__init__()
        self.attn, self.num_heads = attn, num_heads
        self.k = self.v = None

    def forward(self, query, key, value, attn_mask=None):
        q, k, v = project(self.attn, self.num_heads, query, key, value)
        if self.k is not None:
            k, v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
        self.k, self.v = k, v
        T, S = q.size(2), k.size(2)
        mask = masks.causal_mask(T, S, q.device, offset=S - T)
        heads, weights = scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.attn.out_proj(families.merge_heads(heads)), weights


_MASK = (
    "With S cached tokens, each of the T new queries sees all of them and the new keys up to "
    "its own: the causal mask (T, S + T) aligned bottom-right."
)
_APPEND = "the cache (B, H, S, D) grows along the tokens' axis, 2, by the new (B, H, T, D)."
_CACHE_TEXTS = {
    "causal top-left": families.CAUSAL["causal top-left"] + " " + _MASK,
    "mask ignored": "there is no causal mask over the keys: with several new tokens at once (a "
    "prompt), each sees the new tokens after it. " + _MASK,
    "off-by-one diagonal": families.CAUSAL["off-by-one diagonal"] + " " + _MASK,
    "cache not used": "the new queries attend over the new tokens' keys only: the cached keys "
    "and values are not used (or the cache is replaced instead of extended).",
    "the new token's key not included": "the new queries attend over the cached keys only, not "
    "their own: the new keys and values join the cache first (a token attends to itself).",
    "scaled by √d_model": "the scores are scaled by √d_model; by √d_k, the size of one head.",
    "state not reset": "the cache still holds the previous sequence: a new CachedAttention "
    "around the same attention started where the last one stopped, so the cache lives outside "
    "the object (on the class, on the attention it wraps, in a global). Each starts empty.",
}
_CACHE_TODO = (
    "Replace `raise NotImplementedError` in CachedAttention.forward: project the new tokens, "
    "append their keys and values to the cache, attend over all of them with the right mask."
)
_JOIN = "the new keys and values join the cache, then the new queries attend over all of them. "
_SPEC = (_CACHE_TEXTS, _JOIN + _MASK, "one per head, query and key: (B, H, T, S + T).")


def _crash_cause(wrapper, error: BaseException, i: int, done: int, end: int) -> str:
    T, axis = end - done, re.search(r"except in dimension (\d+)", str(error))
    if axis and not done:  # nothing is cached before the first piece
        return _CACHE_TEXTS["state not reset"]
    cached = getattr(wrapper, "k", None)
    if axis and isinstance(cached, torch.Tensor) and cached.dim() == 4:
        return f"the new keys or values are appended along axis {axis.group(1)}, but {_APPEND}"
    if done and T > 1 and re.search("size of tensor|must match|broadcast", str(error)):
        return (
            "a mask of the wrong shape? The block passes its causal mask over the T new tokens, "
            "(T, T); the scores are (B, H, T, S + T). " + _MASK
        )
    return f"a shape mix-up: {_APPEND} The new queries attend with a (T, S + T) mask."


def _require_cache(wrapper, label: str, x, end: int, T: int, projected: Counter) -> None:
    """``self.k``, ``self.v`` hold B·end·E numbers, whatever the layout; each projected once."""
    B, _, E = x.shape
    for name, what in (("k", "keys"), ("v", "values")):
        cached = getattr(wrapper, name, None)
        tokens = cached.numel() / (B * E) if isinstance(cached, torch.Tensor) else end
        cause = {
            T: f"self.{name} holds only the newest tokens' {what}: it is replaced each call "
            f"instead of extended: {_APPEND}",
            end - T: f"the new tokens' {what} were not added to the cache: {_APPEND}",
        }.get(tokens, f"the new {what} are appended along the wrong axis: {_APPEND}")
        if tokens != end:
            raise ExerciseFailure(
                f"Case {label!r}: after {end} tokens, self.{name} has shape "
                f"{shape_str(cached.shape)}: {cached.numel()} numbers, where the {what} of {end} "
                f"tokens are B·{end}·E = {B * end * E}.\nLikely cause: {cause}"
            )
    for name, count in projected.items():
        if count > B * end:
            raise ExerciseFailure(
                f"Case {label!r}: after {end} tokens, {name} has projected {count // B} tokens "
                "per sequence: each token's key and value are computed again at every step.\n"
                "Likely cause: you cache the inputs (or recompute every key). The cache holds the "
                "projected keys and values: only the new tokens are projected."
            )


def _run_cache(candidate, name: str, attn, H: int, x, sizes, before) -> None:
    wrapper = build_module(candidate, Case(name), (attn, H)).eval()
    projected = Counter()

    def count(module, args, out):  # (a deep copy of attn has the hook too: not counted)
        if module is attn.k_proj or module is attn.v_proj:
            projected["k_proj" if module is attn.k_proj else "v_proj"] += args[0].shape[:-1].numel()

    hooks = [attn.k_proj.register_forward_hook(count), attn.v_proj.register_forward_hook(count)]
    crash_cause = functools.partial(_crash_cause, wrapper)
    try:
        for _, label, start, end, _ in pieces(
            wrapper, name, attn, H, x, sizes, _SPEC, crash_cause, before=before
        ):
            _require_cache(wrapper, label, x, end, end - start, projected)
    finally:
        for hook in hooks:
            hook.remove()


@exercise("CachedAttention", "07", reference=CachedAttention, todo=_CACHE_TODO, points=3)
def check_cached_attention(candidate) -> int:
    """Check ``candidate(attn, num_heads)``'s ``(output, weights)`` on new tokens, piece by piece,
    against causal attention over the whole sequence so far."""
    randn, before = seeded_randn(73), None
    cases = [
        ("a prompt of 4 tokens, then 1, 1, 1; E 16, 2 heads, B 2", (2, 7, 16), 2, [4, 1, 1, 1]),
        ("token by token from the first: 1, 1, 1, 1, 1; E 12, 3 heads", (1, 5, 12), 3, [1] * 5),
        ("a prompt of 3, then 2 at a time: 3, 2, 2; E 16, 4 heads", (2, 7, 16), 4, [3, 2, 2]),
        ("the same again in a new CachedAttention around the same attention", None, 4, [3, 2, 2]),
        ("a prompt of 3, then 3 more (as many new as cached); E 8, 2 heads", (2, 6, 8), 2, [3, 3]),
        ("the whole sequence at once, nothing cached: 6 tokens, 1 head", (1, 6, 8), 1, [6]),
    ]
    for seed, (name, shape, H, sizes) in enumerate(cases):
        if shape is not None:  # else the same attention and sequence as the case before
            x, before, attn = randn(*shape), None, random_attention(shape[-1], H, seed)
        _run_cache(candidate, name, attn, H, x, sizes, before)
        before = x.double()
    return len(cases)
