"""The lesson-07 checkers of DecoderBlock (the causal pre-LN block) and CharLM (the language
model around it) accept every correct style and name each classic mistake."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mha_course import DecoderLM, reference
from mha_course.checks import check_char_lm, check_decoder_block
from mha_course.layernorm import LayerNorm

from checker_helpers import fails_with, not_done, passes

# ---------------------------------------------------------------- DecoderBlock


def block(forward):
    """A DecoderBlock with the skeleton's parts and the given forward(self, x)."""

    class DecoderBlock(nn.Module):
        def __init__(self, d_model, num_heads, d_ff):
            super().__init__()
            self.self_attn = reference.MultiHeadAttention(d_model, num_heads)
            self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
            self.linear1 = nn.Linear(d_model, d_ff)
            self.linear2 = nn.Linear(d_ff, d_model)

    DecoderBlock.forward = forward
    return DecoderBlock


def tril(L, offset=0):
    return torch.ones(L, L, dtype=torch.bool).tril(offset)


def attend(self, h, mask):
    return self.self_attn(h, h, h, attn_mask=mask)[0]


def ffn(self, z, act=F.gelu):
    return self.linear2(act(self.linear1(z)))


def pre_ln(mask=tril, act=F.gelu):
    def forward(self, x):
        L = x.size(1)
        x = x + attend(self, self.norm1(x), None if mask is None else mask(L))
        return x + ffn(self, self.norm2(x), act)

    return forward


class TorchNormsBlock(nn.Module):
    """Another correct style: torch's LayerNorm, a float-built mask of shape (1, 1, L, L), an
    nn.GELU module and an nn.Sequential-free feed-forward."""

    def __init__(self, d_model, num_heads, d_ff):
        super().__init__()
        self.self_attn = reference.MultiHeadAttention(d_model, num_heads)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.act = nn.GELU()

    def forward(self, x):
        L = x.size(-2)
        mask = torch.tril(torch.ones(L, L, device=x.device)).bool()[None, None]
        h = self.norm1(x)
        attended, _ = self.self_attn(h, h, h, mask)
        x = attended + x
        return x + self.linear2(self.act(self.linear1(self.norm2(x))))


@pytest.mark.parametrize(
    "candidate",
    [
        reference.DecoderBlock,
        TorchNormsBlock,
        block(pre_ln()),
        block(pre_ln(act=lambda t: F.gelu(t, approximate="tanh"))),  # GPT-2's own GELU
    ],
)
def test_decoder_block_accepts_correct_answers(candidate, capsys):
    passes(check_decoder_block, candidate, capsys)


def post_ln(self, x):
    z = self.norm1(x + attend(self, x, tril(x.size(1))))
    return self.norm2(z + ffn(self, z))


def norm_on_path(self, x):
    x = self.norm1(x)
    x = x + attend(self, x, tril(x.size(1)))
    x = self.norm2(x)
    return x + ffn(self, x)


def no_attention_residual(self, x):
    x = attend(self, self.norm1(x), tril(x.size(1)))
    return x + ffn(self, self.norm2(x))


def no_ffn_residual(self, x):
    x = x + attend(self, self.norm1(x), tril(x.size(1)))
    return ffn(self, self.norm2(x))


def ffn_reads_input(self, x):
    a = x + attend(self, self.norm1(x), tril(x.size(1)))
    return a + ffn(self, self.norm2(x))


def ffn_not_normalised(self, x):
    x = x + attend(self, self.norm1(x), tril(x.size(1)))
    return x + ffn(self, x)


def norm1_twice(self, x):
    x = x + attend(self, self.norm1(x), tril(x.size(1)))
    return x + ffn(self, self.norm1(x))


def norms_swapped(self, x):
    x = x + attend(self, self.norm2(x), tril(x.size(1)))
    return x + ffn(self, self.norm1(x))


def returns_tuple(self, x):
    return pre_ln()(self, x), None


def wants_a_mask(self, x, attn_mask):
    return pre_ln()(self, x)


@pytest.mark.parametrize(
    "forward, phrase",
    [
        (pre_ln(mask=None), "there is no causal mask"),
        (pre_ln(mask=lambda L: ~tril(L)), "the causal mask is inverted"),
        (pre_ln(mask=lambda L: tril(L).T.contiguous()), "your causal mask keeps the future"),
        (pre_ln(mask=lambda L: tril(L, -1)), "your causal mask leaves out the diagonal"),
        (post_ln, "the LayerNorms sit in the other place"),
        (norm_on_path, "replaces x on the residual path"),
        (no_attention_residual, "residual around the self-attention is missing"),
        (no_ffn_residual, "residual around the feed-forward network is missing"),
        (ffn_reads_input, "reads what the sub-layer before it read"),
        (ffn_not_normalised, "input is not normalised"),
        (norm1_twice, "you used norm1 twice"),
        (norms_swapped, "norm1 and norm2 are swapped"),
        (pre_ln(act=F.relu), "the activation is the other one"),
        (pre_ln(act=lambda t: t), "has no activation"),
        (returns_tuple, "returned a tuple of 2"),
        (wants_a_mask, "forward takes x alone"),
    ],
)
def test_decoder_block_names_each_mistake(forward, phrase):
    fails_with(check_decoder_block, block(forward), phrase)


def test_decoder_block_nan_from_a_mask_with_an_empty_row():
    """A learner's attention that gives NaN for a query with no key: the cause is still named."""

    class NaNAttention(reference.MultiHeadAttention):
        def forward(self, query, key, value, attn_mask=None):
            out, weights = super().forward(query, key, value, attn_mask)
            empty = ~attn_mask.any(-1)  # (L,): queries with nothing to attend to
            return out.masked_fill(empty[..., None], float("nan")), weights

    Block = block(pre_ln(mask=lambda L: tril(L, -1)))
    original = Block.__init__

    def init(self, d_model, num_heads, d_ff):
        original(self, d_model, num_heads, d_ff)
        self.self_attn = NaNAttention(d_model, num_heads)

    Block.__init__ = init
    fails_with(check_decoder_block, Block, "NaN", "strictly below the diagonal")


def test_decoder_block_missing_part_and_torch_layer(capsys):
    class Named(nn.Module):
        def __init__(self, d_model, num_heads, d_ff):
            super().__init__()
            self.self_attn = reference.MultiHeadAttention(d_model, num_heads)
            self.ln1, self.ln2 = LayerNorm(d_model), LayerNorm(d_model)
            self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    fails_with(check_decoder_block, Named, "has no attribute `norm1`")

    class Torch(nn.Module):
        def __init__(self, d_model, num_heads, d_ff):
            super().__init__()
            self.layer = nn.TransformerEncoderLayer(d_model, num_heads, d_ff, norm_first=True)

    fails_with(check_decoder_block, Torch, "calls torch's nn.TransformerEncoderLayer")

    class Skeleton(nn.Module):
        def __init__(self, d_model, num_heads, d_ff):
            super().__init__()
            raise NotImplementedError

    not_done(check_decoder_block, Skeleton, capsys)


# ---------------------------------------------------------------- CharLM


def char_lm(forward=None, *, tie=True, blocks="modulelist", block_class=reference.DecoderBlock):
    """A CharLM with the skeleton's parts (built as asked) and the given forward."""

    class CharLM(nn.Module):
        def __init__(self, vocab_size, d_model, nhead, num_layers, dim_feedforward, max_len):
            super().__init__()
            self.token_embedding = nn.Embedding(vocab_size, d_model)
            self.position_embedding = nn.Embedding(max_len, d_model)
            made = [block_class(d_model, nhead, dim_feedforward) for _ in range(num_layers)]
            if blocks == "shared":
                made = [made[0]] * num_layers
            self.blocks = made if blocks == "list" else nn.ModuleList(made)
            self.norm = LayerNorm(d_model)
            self.head = nn.Linear(d_model, vocab_size, bias=False)
            if tie:
                self.head.weight = self.token_embedding.weight

    CharLM.forward = forward or lm_forward()
    return CharLM


def lm_forward(positions="start", norm=True, chain=True, order=1, softmax=False):
    def forward(self, ids, start=0):
        T = ids.size(1)
        x = self.token_embedding(ids)
        if positions == "start":
            x = x + self.position_embedding(torch.arange(start, start + T))
        elif positions == "zero":
            x = x + self.position_embedding(torch.arange(T))
        elif positions == "ids":
            x = x + self.position_embedding(ids)
        x0 = x
        for b in list(self.blocks)[::order]:
            x = b(x if chain else x0)
        logits = self.head(self.norm(x) if norm else x)
        return logits.softmax(-1) if softmax else logits

    return forward


def sliced_positions(self, ids, start=0):
    x = self.token_embedding(ids) + self.position_embedding.weight[start : start + ids.size(1)]
    for b in self.blocks:
        x = b(x)
    return F.linear(self.norm(x), self.token_embedding.weight)


def only_last_block(self, ids, start=0):
    x = self.token_embedding(ids) + self.position_embedding(
        torch.arange(start, start + ids.size(1))
    )
    return self.head(self.norm(self.blocks[-1](x)))


class Unmasked(nn.Module):
    """A block that sees the future: torch's encoder layer without a mask."""

    def __init__(self, d_model, num_heads, d_ff):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(
            d_model, num_heads, d_ff, dropout=0.0, batch_first=True
        )

    def forward(self, x):
        return self.layer(x)


@pytest.mark.parametrize("candidate", [reference.CharLM, char_lm(), char_lm(sliced_positions)])
def test_char_lm_accepts_correct_answers(candidate, capsys):
    passes(check_char_lm, candidate, capsys)


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (char_lm(lm_forward(positions="zero")), "your positions start at 0 whatever `start` is"),
        (char_lm(lm_forward(positions=None)), "the position embedding is missing"),
        (
            char_lm(lm_forward(positions="ids")),
            "looked up the position embedding with the token ids",
        ),
        (char_lm(lm_forward(norm=False)), "the final LayerNorm is missing"),
        (char_lm(lm_forward(order=-1)), "the blocks run in reverse order"),
        (char_lm(lm_forward(chain=False)), "the last block applied to the embeddings"),
        (char_lm(only_last_block), "the last block applied to the embeddings"),
        (char_lm(lm_forward(softmax=True)), "you returned probabilities"),
        (char_lm(tie=False), "not tied to the token embedding"),
        (char_lm(blocks="list"), "self.blocks is a Python list"),
        (char_lm(blocks="shared"), "one and the same block"),
        (char_lm(block_class=Unmasked), "your model looks ahead"),
    ],
)
def test_char_lm_names_each_mistake(candidate, phrase):
    fails_with(check_char_lm, candidate, phrase)


def test_char_lm_wrong_sizes_and_the_course_model(capsys):
    class Small(reference.CharLM):
        def __init__(self, vocab_size, d_model, nhead, num_layers, dim_feedforward, max_len):
            super().__init__(vocab_size, d_model, nhead, num_layers, dim_feedforward, max_len // 2)

    fails_with(check_char_lm, Small, "self.position_embedding has 6 rows of 16", "(12, 16)")

    class OldNames(reference.CharLM):
        def __init__(self, vocab_size, d_model, num_heads, d_ff, num_layers, max_len):
            super().__init__(vocab_size, d_model, num_heads, num_layers, d_ff, max_len)

    fails_with(check_char_lm, OldNames, "arguments have torch's names", "nhead, num_layers")

    class Course(nn.Module):
        def __init__(self, vocab_size, d_model, nhead, num_layers, dim_feedforward, max_len):
            super().__init__()
            self.model = DecoderLM(
                vocab_size, d_model, nhead, num_layers, dim_feedforward, max_len=max_len
            )

    fails_with(check_char_lm, Course, "calls the course's DecoderLM")
    not_done(
        check_char_lm,
        char_lm(lambda self, ids, start=0: (_ for _ in ()).throw(NotImplementedError())),
        capsys,
    )


# ---------------------------------------------------------------- the lesson's registry rows

LESSON_07 = ["DecoderBlock", "CharLM", "sample_next", "CachedAttention", "decode_roofline"]
LESSON_07 += ["StaticCachedAttention", "DecoderLayer"]


@pytest.mark.parametrize("name", LESSON_07)
def test_lesson_07_exercises_are_registered_and_their_references_pass(name):
    from mha_course.exercises import by_name

    exercise = by_name(name)
    assert exercise.lesson == "07" and exercise.reference is getattr(reference, name)
    assert exercise.check.exercise == name
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    assert exercise.check.passes(exercise.reference)
    torch.testing.assert_close(torch.rand(3), expected)  # the learner's random stream is untouched
