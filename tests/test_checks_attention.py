"""The lesson-01 attention checkers accept every correct style and name the classic mistakes."""

import math

import pytest
import torch
import torch.nn.functional as F
from einops import einsum
from torch.nn.functional import scaled_dot_product_attention as torch_sdpa

import mha_course
from mha_course import reference
from mha_course.checks import (
    check_scaled_dot_product_attention,
    check_self_attention,
)

from checker_helpers import NOTEBOOK_IMPORTS, fails_with, not_done, notebook_cell, passes, skeleton

# ---------------------------------------------------------------- scaled dot-product attention


def sdpa_matmul(query, key, value, attn_mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    weights = scores.softmax(-1)
    return weights @ value, weights


def sdpa_einsum(query, key, value, attn_mask=None):
    scores = einsum(query, key, "... l e, ... s e -> ... l s") / query.shape[-1] ** 0.5
    if attn_mask is not None:
        scores = torch.where(attn_mask, scores, torch.tensor(-1e9))
    weights = F.softmax(scores, dim=-1)
    return einsum(weights, value, "... l s, ... s v -> ... l v"), weights


def sdpa_loop(query, key, value, attn_mask=None):
    # one query at a time, over flattened leading dims, the way one might write it first
    lead = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2])
    q = query.expand(*lead, *query.shape[-2:]).reshape(-1, *query.shape[-2:])
    k = key.expand(*lead, *key.shape[-2:]).reshape(-1, *key.shape[-2:])
    v = value.expand(*lead, *value.shape[-2:]).reshape(-1, *value.shape[-2:])
    m = None
    if attn_mask is not None:
        m = attn_mask.expand(*lead, q.size(-2), k.size(-2)).reshape(-1, q.size(-2), k.size(-2))
    outs, ws = [], []
    for b in range(q.size(0)):
        rows_o, rows_w = [], []
        for i in range(q.size(1)):
            s = torch.stack([q[b, i] @ k[b, j] for j in range(k.size(1))]) / math.sqrt(q.size(-1))
            if m is not None:
                s = torch.where(m[b, i], s, float("-inf"))
            w = torch.softmax(s, 0)
            rows_w.append(w)
            rows_o.append(sum(w[j] * v[b, j] for j in range(k.size(1))))
        outs.append(torch.stack(rows_o))
        ws.append(torch.stack(rows_w))
    shape = (*lead, q.size(-2))
    return torch.stack(outs).reshape(*shape, -1), torch.stack(ws).reshape(*shape, -1)


def sdpa_with_torch(query, key, value, attn_mask=None):
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask)
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    return out, scores.softmax(-1)


@pytest.mark.parametrize("candidate", [sdpa_matmul, sdpa_einsum, sdpa_loop])
def test_sdpa_accepts_every_correct_style(candidate, capsys):
    passes(check_scaled_dot_product_attention, candidate, capsys)


def sdpa_full_path(query, key, value, attn_mask=None):
    weights = sdpa_matmul(query, key, value, attn_mask)[1]
    return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask), weights


def sdpa_alias(query, key, value, attn_mask=None):
    return torch_sdpa(query, key, value, attn_mask), sdpa_matmul(query, key, value, attn_mask)[1]


def sdpa_course(query, key, value, attn_mask=None):
    return mha_course.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask)


def sdpa_through_a_helper(query, key, value, attn_mask=None):
    return sdpa_course(query, key, value, attn_mask)


@pytest.mark.parametrize(
    "candidate, routine",
    [
        (sdpa_with_torch, "torch's scaled_dot_product_attention"),
        (sdpa_full_path, "torch's scaled_dot_product_attention"),
        (sdpa_alias, "torch's scaled_dot_product_attention"),
        (sdpa_course, "the course's scaled_dot_product_attention"),
        (sdpa_through_a_helper, "the course's scaled_dot_product_attention"),
    ],
)
def test_sdpa_that_calls_the_library_is_told_to_write_it(candidate, routine):
    message = fails_with(check_scaled_dot_product_attention, candidate, routine)
    assert "write it yourself" in message and "compare with it afterwards" in message
    assert "test_checks_attention.py, line" in message  # the line that calls it
    assert "Case" not in message  # no case needed: it fails before running any


def variant(
    scale=None,
    axis=-1,
    fill=float("-inf"),
    invert=False,
    ignore_mask=False,
    values="value",
    after=False,
    transpose_scores=False,
    softmax=True,
):
    """A scaled dot-product attention with one classic mistake switched on."""

    def attention(query, key, value, attn_mask=None):
        d = query.size(-1)
        s = 1 / math.sqrt(d) if scale is None else scale(d, value.size(-1))
        scores = (
            key @ query.transpose(-2, -1) if transpose_scores else query @ key.transpose(-2, -1)
        )
        scores = scores * s
        mask = attn_mask
        if mask is not None and invert:
            mask = ~mask
        if mask is not None and not ignore_mask and not after:
            scores = scores.masked_fill(~mask, fill)
        weights = torch.softmax(scores, dim=axis) if softmax else scores
        if mask is not None and after:
            weights = weights * mask
        mixed = {"value": value, "key": key}[values]
        return weights @ mixed, weights

    return attention


def transposed_keys_T(query, key, value, attn_mask=None):
    key_T = key.permute(*reversed(range(key.dim())))  # what key.T does: reverse every axis
    scores = query @ key_T / math.sqrt(query.size(-1))
    w = scores.softmax(-1)
    return w @ value, w


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (variant(scale=lambda d, dv: 1.0), "not scaled"),
        (variant(scale=lambda d, dv: 1.0 / d), "divided by d_k itself"),
        (variant(scale=lambda d, dv: math.sqrt(d)), "multiplied by √d_k"),
        (variant(scale=lambda d, dv: 1.0 / math.sqrt(dv)), "the size of the values"),
        (variant(scale=lambda d, dv: 0.1), "the scores are scaled by 0.1"),
        (variant(axis=-2), "down each column, over the queries"),
        (variant(ignore_mask=True), "the mask has no effect"),
        (variant(invert=True), "mask is inverted"),
        (variant(fill=0.0), "exp(0) = 1"),
        (variant(after=True), "after the softmax"),
        (variant(values="key"), "attention mixes the values"),
        (variant(transpose_scores=True), "the scores and weights are (..., L, S)"),
        (variant(softmax=False), "without a softmax"),
        (transposed_keys_T, "reverses them all"),
    ],
)
def test_sdpa_names_each_classic_mistake(candidate, phrase):
    fails_with(check_scaled_dot_product_attention, candidate, "Likely cause", phrase)


def weights_first(query, key, value, attn_mask=None):
    return tuple(reversed(sdpa_matmul(query, key, value, attn_mask)))


def attend(scores, value, attn_mask, blocked=lambda mask: ~mask):
    """The rest of the attention from the scores, the mask turned into the blocked keys by
    ``blocked``."""
    if attn_mask is not None:
        scores = scores.masked_fill(blocked(attn_mask), float("-inf"))
    weights = scores.softmax(-1)
    return weights @ value, weights


def scaled_by_the_number_of_keys(query, key, value, attn_mask=None):
    return attend(query @ key.transpose(-2, -1) / math.sqrt(key.size(-2)), value, attn_mask)


def einsum_summing_the_keys(query, key, value, attn_mask=None):
    """'...ld,...sd->...l' sums over the keys too; broadcasting then hides the lost axis."""
    scores = torch.einsum("...ld,...sd->...l", query, key) / math.sqrt(query.size(-1))
    return attend(scores.unsqueeze(-1).expand(*scores.shape, key.size(-2)), value, attn_mask)


def einsum_without_the_key_axis(query, key, value, attn_mask=None):
    scores = torch.einsum("...ld,...sd->...l", query, key)[..., None] / math.sqrt(query.size(-1))
    return attend(scores, value[..., :1, :], None)


def scores(query, key):
    return query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))


def mask_unsqueezed(query, key, value, attn_mask=None):
    # as if the mask came as (B, S): here it is (B, 1, S) already
    return attend(scores(query, key), value, attn_mask, lambda mask: ~mask.unsqueeze(1))


def mask_negated_with_minus(query, key, value, attn_mask=None):
    return attend(scores(query, key), value, attn_mask, lambda mask: -mask)


@pytest.mark.parametrize(
    "candidate, phrases",
    [
        (weights_first, ["the pair came as (weights, output)", "output comes first"]),
        (scaled_by_the_number_of_keys, ["scaled by 1/√6, S, the number of keys", "8 here"]),
        (
            einsum_summing_the_keys,
            ["every key gets the same weight", "one score per query and key"],
        ),
        (einsum_without_the_key_axis, ["one column instead of one per key"]),
        (mask_unsqueezed, ["Case 'padding mask", "already broadcasts against the scores"]),
        (mask_negated_with_minus, ["Case 'padding mask", "minus sign does not invert"]),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_sdpa_names_the_cause_of_these_mistakes_too(candidate, phrases):
    message = fails_with(check_scaled_dot_product_attention, candidate, "Likely cause", *phrases)
    for wrong in ("reverses them all", "variable of the notebook", "scaled by 0"):
        assert wrong not in message


def test_sdpa_a_crash_shows_the_learners_line_and_not_the_checkers():
    def crashes(query, key, value, attn_mask=None):
        scores = query @ key.transpose(0, 1) / math.sqrt(query.size(-1))  # right for 2-D only
        weights = scores.softmax(-1)
        return weights @ value, weights

    message = fails_with(
        check_scaled_dot_product_attention, crashes, "Case 'a batch", "RuntimeError"
    )
    assert "test_checks_attention.py, line" in message and "in crashes:" in message
    assert "scores = query @ key.transpose(0, 1) / math.sqrt(query.size(-1))  # right" in message
    assert "_core.py" not in message and "checks/l01_attention.py" not in message


def test_sdpa_a_variable_of_the_notebook_is_named():
    cells: dict = {}
    notebook_cell(NOTEBOOK_IMPORTS + "d_k = 8\n", cells, 1)
    notebook_cell(
        """
        def scaled_dot_product_attention(query, key, value, attn_mask=None):
            scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
            weights = torch.softmax(scores, dim=-1)
            return weights @ value, weights
        """,
        cells,
        2,
    )
    fails_with(
        check_scaled_dot_product_attention,
        cells["scaled_dot_product_attention"],
        "uses `d_k` (= 8), a variable of the notebook",
        "<notebook cell 2>, line 3:",
        "scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)",
        "from the inputs",
    )


def test_sdpa_a_notebook_global_d_k_is_caught():
    d_k = 8  # what a learner's notebook defines

    def uses_global(query, key, value, attn_mask=None):
        scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
        if attn_mask is not None:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        weights = scores.softmax(-1)
        return weights @ value, weights

    fails_with(
        check_scaled_dot_product_attention, uses_global, "d_k = 5", "1/√8", "their last axis"
    )


def test_sdpa_wrong_return_type():
    fails_with(
        check_scaled_dot_product_attention,
        lambda q, k, v, attn_mask=None: sdpa_matmul(q, k, v)[0],
        "should be a pair (output, weights)",
    )


def test_sdpa_unstable_softmax_is_caught():
    def naive(query, key, value, attn_mask=None):
        scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
        if attn_mask is not None:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        e = scores.exp()
        w = e / e.sum(-1, keepdim=True)
        return w @ value, w

    fails_with(check_scaled_dot_product_attention, naive, "huge scores", "exp overflowed")


# ---------------------------------------------------------------- the lesson's full signature


def sdpa_full(query, key, value, attn_mask=None, is_causal=False, scale=None):
    """The lesson's answer: scale, bool and float masks, is_causal, no NaN for an empty query."""
    if scale is None:
        scale = 1 / math.sqrt(query.size(-1))
    scores = query @ key.transpose(-2, -1) * scale
    if is_causal:
        attn_mask = torch.ones(query.size(-2), key.size(-2), dtype=torch.bool).tril()
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    elif attn_mask is not None:
        scores = scores + attn_mask
    nothing = scores.isneginf().all(dim=-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(nothing, 0.0), dim=-1).masked_fill(nothing, 0.0)
    return weights @ value, weights


def sdpa_where(query, key, value, attn_mask=None, is_causal=False, scale=None):
    """Another style: torch.where, the causal mask from a comparison, NaN turned into 0."""
    scale = query.size(-1) ** -0.5 if scale is None else scale
    scores = einsum(query, key, "... l e, ... s e -> ... l s") * scale
    if is_causal:
        L, S = query.size(-2), key.size(-2)
        attn_mask = torch.arange(S)[None, :] <= torch.arange(L)[:, None]
    if attn_mask is not None:
        bias = (
            attn_mask if attn_mask.is_floating_point() else torch.where(attn_mask, 0.0, -math.inf)
        )
        scores = scores + bias
    weights = torch.nan_to_num(scores.softmax(-1), nan=0.0)
    return weights @ value, weights


def sdpa_scale_only(query, key, value, attn_mask=None, scale=None):
    """Accepts scale but not is_causal: held to the scale, float masks and empty queries."""
    return sdpa_full(query, key, value, attn_mask=attn_mask, scale=scale)


@pytest.mark.parametrize(
    "candidate", [sdpa_full, sdpa_where, sdpa_scale_only, reference.scaled_dot_product_attention]
)
def test_sdpa_with_the_lessons_signature_accepts_every_correct_style(candidate, capsys):
    out = passes(check_scaled_dot_product_attention, candidate, capsys)
    assert "all 14 cases" in out or "all 16 cases" in out  # 7 older cases, 7 or 9 new ones


def test_sdpa_an_older_candidate_is_held_to_the_older_cases_only(capsys):
    assert "all 7 cases" in passes(check_scaled_dot_product_attention, sdpa_matmul, capsys)


def full_variant(
    scale_rule="given",
    float_mask="add",
    bool_fill=float("-inf"),
    empty="zero",
    causal="tril",
    invert=False,
):
    """The lesson's answer with one mistake switched on (the defaults are right)."""

    def attention(query, key, value, attn_mask=None, is_causal=False, scale=None):
        d_k, L, S = query.size(-1), query.size(-2), key.size(-2)
        s = d_k**-0.5 if scale is None or scale_rule == "ignored" else scale
        scores = query @ key.mT * (1 / s if scale_rule == "divided" and scale else s)
        if is_causal and causal != "ignored":
            diagonal = {"tril": 0, "tril(-1)": -1, "bottom-right": S - L}.get(causal, 0)
            attn_mask = torch.ones(L, S, dtype=torch.bool).tril(diagonal)
            attn_mask = attn_mask.T.contiguous() if causal == "triu" else attn_mask
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(attn_mask if invert else ~attn_mask, bool_fill)
        elif attn_mask is not None and float_mask == "add":
            scores = scores + attn_mask
        elif attn_mask is not None and float_mask == "multiplied":
            scores = scores * attn_mask
        nothing = scores.isneginf().all(dim=-1, keepdim=True)
        if empty == "zero":
            scores = scores.masked_fill(nothing, 0.0)
        weights = torch.softmax(scores, dim=-1)
        if empty == "zero":
            weights = weights.masked_fill(nothing, 0.0)
        return weights @ value, weights

    return attention


@pytest.mark.parametrize(
    "flaw, phrases",
    [
        ({"scale_rule": "ignored"}, ["Case 'scale = 0.5 given", "the scale argument is ignored"]),
        ({"scale_rule": "divided"}, ["divided by the scale"]),
        ({"float_mask": "ignored"}, ["Case 'a float mask (4, 6)", "the float mask has no effect"]),
        ({"float_mask": "multiplied"}, ["multiplied into the scores"]),
        (
            {"bool_fill": -1e9, "empty": "nan"},
            ["equal weights on every key", "instead of one whose exponential is 0"],
        ),
        (
            {"empty": "nan"},
            ["where query 1 may attend to nothing", "your weights contain NaN", "0/0 = NaN"],
        ),
        ({"causal": "ignored"}, ["Case 'is_causal, L = S = 5'", "is_causal is ignored"]),
        ({"causal": "triu"}, ["keeps the future"]),
        ({"causal": "tril(-1)"}, ["leaves out the diagonal"]),
        ({"causal": "bottom-right"}, ["4 queries and 6 keys", "aligned top-left"]),
        ({"invert": True}, ["Case 'padding mask", "the mask is inverted", "not as NaN"]),
        ({"invert": True, "empty": "nan"}, ["Case 'padding mask", "the mask is inverted", "NaN"]),
    ],
)
def test_sdpa_names_each_mistake_of_the_lessons_signature(flaw, phrases):
    message = fails_with(
        check_scaled_dot_product_attention, full_variant(**flaw), "Likely cause", *phrases
    )
    assert len(message.splitlines()) <= 15
    assert "rows of your weights" not in message  # an inverted mask is not blamed on the softmax


def test_the_right_version_of_the_lessons_mistakes_passes(capsys):
    passes(check_scaled_dot_product_attention, full_variant(), capsys)


def test_sdpa_a_float_mask_read_as_bool_is_named():
    def float_as_bool(query, key, value, attn_mask=None, is_causal=False, scale=None):
        if attn_mask is not None and attn_mask.is_floating_point():
            attn_mask = attn_mask.bool()  # 0 -> False: the allowed keys become blocked
        return sdpa_full(query, key, value, attn_mask=attn_mask, is_causal=is_causal, scale=scale)

    fails_with(check_scaled_dot_product_attention, float_as_bool, "Case 'a float", "Likely cause")


def test_sdpa_a_float_mask_inverted_with_tilde_crashes_with_its_case():
    def tilde_on_float(query, key, value, attn_mask=None, is_causal=False, scale=None):
        scores = query @ key.mT * (query.size(-1) ** -0.5 if scale is None else scale)
        if attn_mask is not None:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        weights = scores.softmax(-1)
        return weights @ value, weights

    fails_with(
        check_scaled_dot_product_attention,
        tilde_on_float,
        "Case 'a float mask (4, 6)",
        "raised",
        "a float mask is added to the scores as it is",
        "the ~ operator and masked_fill are for a bool mask",
    )


# ---------------------------------------------------------------- SelfAttention


class SelfAttentionAnswer(torch.nn.Module):
    """The lesson's answer, on the learner's attention (here the lesson's full signature)."""

    def __init__(self, d_model, d_k, d_v=None):
        super().__init__()
        self.q_proj = torch.nn.Linear(d_model, d_k, bias=False)
        self.k_proj = torch.nn.Linear(d_model, d_k, bias=False)
        self.v_proj = torch.nn.Linear(d_model, d_k if d_v is None else d_v, bias=False)

    def forward(self, x, attn_mask=None):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        return sdpa_full(q, k, v, attn_mask=attn_mask)


class SelfAttentionMatrices(torch.nn.Module):
    """Another style: the weights used as matrices, the package's attention."""

    def __init__(self, d_model, d_k, d_v=None):
        super().__init__()
        self.q_proj, self.k_proj = (torch.nn.Linear(d_model, d_k, bias=False) for _ in range(2))
        self.v_proj = torch.nn.Linear(d_model, d_v or d_k, bias=False)

    def forward(self, x, attn_mask=None):
        q, k, v = (x @ p.weight.T for p in (self.q_proj, self.k_proj, self.v_proj))
        return mha_course.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)


@pytest.mark.parametrize(
    "candidate", [reference.SelfAttention, SelfAttentionAnswer, SelfAttentionMatrices]
)
def test_self_attention_accepts_every_correct_style(candidate, capsys):
    passes(check_self_attention, candidate, capsys)


def one_head(flaw):
    class Flawed(SelfAttentionAnswer):
        def forward(self, x, attn_mask=None):
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
            q, k, v, attn_mask = flaw(self, x, q, k, v, attn_mask)
            return sdpa_full(q, k, v, attn_mask=attn_mask)

    return Flawed


@pytest.mark.parametrize(
    "flaw, phrase",
    [
        (lambda m, x, q, k, v, mask: (q, m.q_proj(x), v, mask), "projected with the query weights"),
        (lambda m, x, q, k, v, mask: (k, q, v, mask), "the queries and the keys are swapped"),
        (lambda m, x, q, k, v, mask: (q, k, x, mask), "the values are x itself"),
        (lambda m, x, q, k, v, mask: (q, k, v, None), "forward hands it on"),
    ],
)
def test_self_attention_names_each_mistake(flaw, phrase):
    fails_with(check_self_attention, one_head(flaw), "Likely cause", phrase)


def test_self_attention_values_projected_with_the_key_weights():
    class ValuesWithKeys(SelfAttentionAnswer):
        def forward(self, x, attn_mask=None):
            return sdpa_full(self.q_proj(x), self.k_proj(x), self.k_proj(x), attn_mask=attn_mask)

    fails_with(check_self_attention, ValuesWithKeys, "Case 'one sentence", "with the key weights")


def test_self_attention_projections_are_held_to_their_spec():
    class WithBias(SelfAttentionAnswer):
        def __init__(self, d_model, d_k, d_v=None):
            super().__init__(d_model, d_k, d_v)
            self.k_proj = torch.nn.Linear(d_model, d_k)

    class NoDv(SelfAttentionAnswer):
        def __init__(self, d_model, d_k, d_v=None):
            super().__init__(d_model, d_k)

    class Missing(torch.nn.Module):
        def __init__(self, d_model, d_k, d_v=None):
            super().__init__()
            self.query = torch.nn.Linear(d_model, d_k, bias=False)

    fails_with(check_self_attention, WithBias, "self.k_proj has a bias", "without bias")
    fails_with(
        check_self_attention,
        NoDv,
        "Case 'a batch",
        "v_proj.weight has shape (8, 16), expected (4, 16)",
    )
    fails_with(check_self_attention, Missing, "self.q_proj has no weight", "an nn.Linear")
    fails_with(check_self_attention, SelfAttentionAnswer(4, 2), "not an instance")


def test_self_attention_on_an_unfinished_or_wrong_attention_says_so(capsys):
    cells: dict = {}
    notebook_cell(
        NOTEBOOK_IMPORTS
        + "def scaled_dot_product_attention(query, key, value, attn_mask=None):\n    raise NotImplementedError\n",
        cells,
        1,
    )
    notebook_cell(
        """
        class SelfAttention(nn.Module):
            def __init__(self, d_model, d_k, d_v=None):
                super().__init__()
                self.q_proj = nn.Linear(d_model, d_k, bias=False)
                self.k_proj = nn.Linear(d_model, d_k, bias=False)
                self.v_proj = nn.Linear(d_model, d_v or d_k, bias=False)

            def forward(self, x, attn_mask=None):
                q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
                return scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        """,
        cells,
        2,
    )
    check_self_attention(cells["SelfAttention"])  # ⏳, naming the unfinished helper
    assert "calls scaled_dot_product_attention, which is not done yet" in capsys.readouterr().out
    notebook_cell(
        "def scaled_dot_product_attention(query, key, value, attn_mask=None):\n"
        "    w = (query @ key.mT).softmax(-1)\n    return w @ value, w\n",
        cells,
        3,
    )
    fails_with(
        check_self_attention,
        cells["SelfAttention"],
        "which does not pass check_scaled_dot_product_attention",
        "not scaled",
        "check_scaled_dot_product_attention(scaled_dot_product_attention)",
    )
    cells["scaled_dot_product_attention"] = sdpa_matmul
    passes(check_self_attention, cells["SelfAttention"], capsys)


def test_self_attention_not_done(capsys):
    class Skeleton(torch.nn.Module):
        def __init__(self, d_model, d_k, d_v=None):
            super().__init__()
            raise NotImplementedError

    not_done(check_self_attention, Skeleton, capsys)
    not_done(check_scaled_dot_product_attention, skeleton, capsys)
