"""Head-pattern scores on hand-built attention weights whose answers are known, against a
brute-force loop, and on the real model (padding must not change a score)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_course.head_patterns import (
    PATTERNS,
    PatternTally,
    format_top_heads,
    head_pattern_scores,
    is_punctuation,
    measure_head_patterns,
    score_grid,
    target_masks,
    top_heads,
    word_ids_from_tokens,
)

TOKENS = ["[CLS]", "the", "cat", "sat", ",", "the", "cat", "play", "##ed", ".", "[SEP]"]
L = len(TOKENS)
P = {name: k for k, name in enumerate(PATTERNS)}


def one_hot_rows(targets: list[int]) -> torch.Tensor:
    """(L, L): query i puts all its attention on key targets[i]."""
    return torch.nn.functional.one_hot(torch.tensor(targets), L).double()


def brute_force(weights, tokens, pattern):
    """The score, written as the definition says: a loop over queries, then over keys."""
    word_ids = word_ids_from_tokens(tokens)
    words = {}
    for t, w in zip(tokens, word_ids):
        if w is not None:
            words[w] = words.get(w, "") + t.removeprefix("##")

    def is_target(i, j):
        if pattern == "self":
            return i == j
        if i == j:
            return False
        if pattern == "previous":
            return j == i - 1
        if pattern == "next":
            return j == i + 1
        if pattern == "cls":
            return tokens[j] == "[CLS]"
        if pattern == "sep":
            return tokens[j] == "[SEP]"
        if pattern == "punctuation":
            return is_punctuation(tokens[j])
        wi, wj = word_ids[i], word_ids[j]
        return (
            wi is not None
            and wj is not None
            and (wi == wj or words[wi].lower() == words[wj].lower())
        )

    masses = []
    for i in range(len(tokens)):
        targets = [j for j in range(len(tokens)) if is_target(i, j)]
        if targets:
            masses.append(sum(float(weights[i, j]) for j in targets))
    return sum(masses) / len(masses) if masses else float("nan")


def test_target_masks_on_a_hand_checked_sentence():
    masks = target_masks(TOKENS)
    assert masks.shape == (len(PATTERNS), L, L)
    assert torch.equal(masks[P["previous"]], torch.ones(L, L, dtype=torch.bool).tril(-1).triu(-1))
    assert torch.equal(masks[P["next"]], masks[P["previous"]].T)
    assert torch.equal(masks[P["self"]], torch.eye(L, dtype=torch.bool))
    assert masks[P["cls"]][:, 0].tolist() == [False] + [True] * (L - 1)  # never its own target
    assert masks[P["cls"]][:, 1:].sum() == 0
    assert masks[P["sep"]][:, L - 1].tolist() == [True] * (L - 1) + [False]
    same = {(i, j) for i, j in masks[P["same_word"]].nonzero().tolist()}
    assert same == {(1, 5), (5, 1), (2, 6), (6, 2), (7, 8), (8, 7)}  # the/the, cat/cat, play/##ed
    punctuation_keys = masks[P["punctuation"]].any(dim=0).nonzero().flatten().tolist()
    assert punctuation_keys == [4, 9]


def test_known_heads_get_their_known_scores():
    previous = one_hot_rows(
        [0] + list(range(L - 1))
    )  # each token looks at the one before ([CLS] at itself)
    uniform = torch.full((L, L), 1.0 / L, dtype=torch.float64)
    to_sep = one_hot_rows([L - 1] * L)
    to_cls = one_hot_rows([0] * L)
    weights = torch.stack([previous, uniform, to_sep, to_cls]).unsqueeze(
        0
    )  # (1 layer, 4 heads, L, L)
    table = head_pattern_scores([(weights, TOKENS, None)])
    score = {(r.pattern, r.head): r.score for r in table}
    chance = {r.pattern: r.chance for r in table}
    assert score["previous", 0] == 1.0 and score["next", 0] == 0.0
    assert score["self", 0] == pytest.approx(1 / L)  # only [CLS] looks at itself
    assert score["cls", 0] == pytest.approx(1 / (L - 1))  # only "the" (position 1) looks at [CLS]
    assert score["sep", 2] == 1.0 and score["cls", 3] == 1.0
    assert score["sep", 3] == 0.0 and score["next", 2] == pytest.approx(
        1 / (L - 1)
    )  # "." before [SEP]
    for pattern in PATTERNS:  # an evenly spread head scores exactly the chance level
        assert score[pattern, 1] == pytest.approx(chance[pattern])
    assert chance["previous"] == pytest.approx(1 / L) and chance["cls"] == pytest.approx(1 / L)
    assert chance["punctuation"] == pytest.approx(
        (9 * 2 + 2 * 1) / L / L
    )  # 2 targets, 1 for "," and "."
    assert {r.queries for r in table if r.pattern == "same_word"} == {6}


def test_scores_equal_the_brute_force_loop_over_two_sentences():
    g = torch.Generator().manual_seed(0)
    other = ["[CLS]", "why", "?", "why", "not", "!", "[SEP]"]
    a = torch.softmax(torch.randn(2, 3, L, L, generator=g), dim=-1)
    b = torch.softmax(torch.randn(2, 3, len(other), len(other), generator=g), dim=-1)
    table = head_pattern_scores([(a, TOKENS, None), (b, other, None)])
    assert len(table) == len(PATTERNS) * 2 * 3
    for row in table:
        queries_a = int(target_masks(TOKENS)[P[row.pattern]].any(-1).sum())
        queries_b = int(target_masks(other)[P[row.pattern]].any(-1).sum())
        total = (
            brute_force(a[row.layer, row.head], TOKENS, row.pattern) * queries_a
            + brute_force(b[row.layer, row.head], other, row.pattern) * queries_b
        )
        assert row.queries == queries_a + queries_b
        assert row.score == pytest.approx(total / (queries_a + queries_b), abs=1e-12)


tokens_strategy = st.lists(
    st.sampled_from(["the", "cat", "##s", ",", ".", "run", "##ning", "?", "a"]),
    min_size=1,
    max_size=10,
).map(lambda ts: ["[CLS]", *ts, "[SEP]"])


@settings(max_examples=30, deadline=None)
@given(tokens=tokens_strategy, seed=st.integers(0, 2**16))
def test_scores_are_masses_in_0_1_and_match_the_definition(tokens, seed):
    n = len(tokens)
    weights = torch.softmax(
        3 * torch.randn(1, 2, n, n, generator=torch.Generator().manual_seed(seed)), dim=-1
    )
    for row in head_pattern_scores([(weights, tokens, word_ids_from_tokens(tokens))]):
        expected = brute_force(weights[0, row.head], tokens, row.pattern)
        if math.isnan(expected):
            assert math.isnan(row.score) and row.queries == 0
        else:
            assert 0.0 <= row.score <= 1.0 + 1e-12
            assert row.score == pytest.approx(expected, abs=1e-12)


def test_top_heads_grid_and_summary():
    weights = torch.stack(
        [
            one_hot_rows([0] + list(range(L - 1))),  # head 0: previous
            torch.full((L, L), 1.0 / L, dtype=torch.float64),
            one_hot_rows([min(i + 1, L - 1) for i in range(L)]),
        ]
    )  # head 2: next
    weights = torch.stack([weights, weights.flip(0)])  # layer 1 has the heads in reverse order
    table = head_pattern_scores([(weights, TOKENS, None)])
    top = top_heads(table, k=2)
    assert [(r.layer, r.head) for r in top["previous"]] == [(0, 0), (1, 2)]
    assert [(r.layer, r.head) for r in top["next"]] == [(0, 2), (1, 0)]
    assert all(len(rows) == 2 for rows in top.values())
    grid = score_grid(table, "previous")
    assert grid.shape == (2, 3) and grid[0, 0] == 1.0 and grid[1, 2] == 1.0
    text = format_top_heads(top)
    assert "previous" in text and "L0H0 1.00" in text and "chance 0.09" in text
    with pytest.raises(ValueError, match="pattern must be one of"):
        score_grid(table, "diagonal")


def test_a_pattern_without_any_target_is_nan_and_left_out_of_the_top():
    tokens = ["[CLS]", "no", "repeats", "here", "[SEP]"]
    table = head_pattern_scores([(torch.full((1, 1, 5, 5), 0.2), tokens, None)])
    same = [r for r in table if r.pattern == "same_word"]
    assert math.isnan(same[0].score) and same[0].queries == 0
    top = top_heads(table)
    assert top["same_word"] == [] and "no query had a target" in format_top_heads(top)


def test_punctuation_and_word_ids():
    for token in [".", "?", ",", "...", "—", "«", "$", "##.", "!"]:
        assert is_punctuation(token), token
    for token in ["a", "3", "[SEP]", "[CLS]", "##s", "naïve", ""]:
        assert not is_punctuation(token), token
    assert word_ids_from_tokens(TOKENS) == [None, 0, 1, 2, 3, 4, 5, 6, 6, 7, None]


def test_word_ids_from_tokens_agree_with_the_tokenizer():
    from tokenizers import Tokenizer

    from mha_course.pretrained import model_directory

    tokenizer = Tokenizer.from_file(str(model_directory() / "tokenizer.json"))
    for sentence in [
        "Unbelievably, the tokenizer's pieces don't lie!",
        "Crème brûlée à Zürich: 東京 — $5 🙂.",
        "embeddings embedding embedded",
    ]:
        encoding = tokenizer.encode(sentence)
        assert word_ids_from_tokens(encoding.tokens) == encoding.word_ids, sentence


def test_bad_arguments_raise_clear_errors():
    tally = PatternTally()
    with pytest.raises(ValueError, match=r"L = 11 tokens, got shape \(1, 2, 5, 5\)"):
        tally.add(torch.zeros(1, 2, 5, 5), TOKENS)
    with pytest.raises(ValueError, match="got 3 word_ids for 11 tokens"):
        target_masks(TOKENS, [0, 1, 2])
    tally.add(torch.zeros(1, 2, L, L), TOKENS)
    with pytest.raises(ValueError, match="earlier sentences"):
        tally.add(torch.zeros(2, 2, L, L), TOKENS)
    with pytest.raises(ValueError, match="no sentences"):
        PatternTally().table()
    with pytest.raises(TypeError, match="weights must be a torch.Tensor"):
        tally.add([[0.0]], ["[CLS]"])


@pytest.fixture(scope="module")
def model():
    from mha_course.pretrained import load_minilm

    return load_minilm("cpu")


def test_measured_on_the_model_padding_and_batching_do_not_change_a_score(model):
    sentences = [
        "Which do you like better, coffee or tea?",
        "Tea, please.",
        "I like coffee and I like tea; my friend likes neither!",
        "Why?",
    ]
    together = measure_head_patterns(model, sentences, batch_size=4)  # padded batch
    one_by_one = measure_head_patterns(model, sentences, batch_size=1)  # no padding at all
    assert len(together) == len(PATTERNS) * 6 * 12
    for a, b in zip(together, one_by_one):
        assert (a.pattern, a.layer, a.head, a.queries) == (b.pattern, b.layer, b.head, b.queries)
        assert a.score == pytest.approx(b.score, abs=1e-5)
        assert 0.0 <= a.score <= 1.0 + 1e-6
