"""The package on a CUDA device, against PyTorch's and transformers' own modules on the same device.

Every test here is marked ``gpu`` and takes the ``gpu`` fixture (tests/conftest.py): skipped, with
the reason, without CUDA. ``MHA_COURSE_GPU_TESTS_ON=cpu pytest -p no:xdist -m gpu tests/test_gpu.py``
runs them on the CPU, to check the tests themselves.
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported: never touch the network

import pytest
import torch

from mha_course.pretrained import load_minilm, model_directory

# ---------------------------------------------------------------- MiniLM against BertModel
#
# The course's all-MiniLM-L6-v2 and transformers' BertModel, both loaded from the installed model
# files (nothing is downloaded), run the same padded batch on the device. Only real tokens are
# compared: what a padded position computes means nothing in either model.

MINILM_SENTENCES = [
    "Which do you like better, coffee or tea?",
    "Hi.",
    "Crème brûlée — naïve café in Zürich! 東京 is far.",
]  # small: half precision on the CPU (the tests' own check) is slow

# float32 with TF32 off: both models round only at float32's 2^-24 (6e-8) relative; sums of up to
# 1536 products and six layers bring that to about 2e-6 (measured on the CPU) at the hidden states' largest values
# (|x| up to ~6), so 1e-4 leaves a wide margin for the kernels' different summation orders and
# still catches a real difference: GELU's tanh approximation instead of the exact one moves the
# hidden states by about 3e-3.
MINILM_FLOAT32_TOL = 1e-4
# Half precision: the gap between two implementations is mostly rounding, so each is measured
# against the float64 truth, and ours must be about as accurate as BertModel in the same dtype
# (at most twice its error), and within a bound. float16 keeps 11 significant bits: where the
# hidden states reach |x| ~ 6, one rounding step is 2^-8 ~ 4e-3, and after six layers both models
# are ~1-2 steps from the truth; 2e-2 allows five. Attention weights are in [0, 1] but inherit the
# scores' error: ~2e-3 measured, 1e-2 allowed. bfloat16 keeps 8 bits: steps 8 times coarser, so
# bounds 8 times wider. (hidden states, attention weights)
MINILM_HALF_BOUNDS = {torch.float16: (2e-2, 1e-2), torch.bfloat16: (1.6e-1, 8e-2)}


@pytest.fixture
def no_tf32():
    """float32 matmuls and convolutions in full float32 (no TensorFloat-32) for one test, then the
    settings as they were."""
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def _bert(device, dtype, attn_implementation):
    from transformers import BertModel

    model = BertModel.from_pretrained(
        str(model_directory()), attn_implementation=attn_implementation
    )
    return model.to(device=device, dtype=dtype).eval()


def _minilm_on(device, dtype):
    """The course's MiniLM on ``device`` in ``dtype``, and the padded batch (B, L) there."""
    model = load_minilm(device).to(dtype)
    return model, model.tokenize(MINILM_SENTENCES)


def _float64_truth(batch):
    """BertModel in float64 on the CPU, on the same ``batch``: the exact answer that half
    precision is measured against. Hidden states and every layer's attention weights."""
    with torch.no_grad():
        out = _bert("cpu", torch.float64, "eager")(
            **{name: t.cpu() for name, t in batch.items()}, output_attentions=True
        )
    return out.last_hidden_state, out.attentions


def _real(batch):
    """(B, L) True at real tokens, and (B, 1, L, L) True where query and key are both real."""
    real = batch["attention_mask"].bool()
    return real, real[:, None, :, None] & real[:, None, None, :]


def _hidden_error(ours, theirs, real) -> float:
    """Largest |difference| of the hidden states (B, L, E) over the real tokens."""
    return (ours.double().cpu() - theirs.double().cpu())[real.cpu()].abs().max().item()


def _attention_error(ours, theirs, both_real) -> float:
    """Largest |difference| of every layer's weights (B, H, L, L), real queries and keys only."""
    return max(
        (w.double().cpu() - w_ref.double().cpu()).masked_select(both_real.cpu()).abs().max().item()
        for w, w_ref in zip(ours, theirs, strict=True)
    )


def _forward_both_ways(model, batch):
    """The forward with every layer's weights, and the fused one without."""
    with torch.no_grad():
        return model(**batch, output_attentions=True), model(**batch)


def _assert_no_weight_on_padding(attentions, real):
    for layer, w in enumerate(attentions):
        padded_keys = ~real[:, None, None, :].expand_as(w)
        assert (w.masked_select(padded_keys) == 0).all(), (
            f"layer {layer}: a token attends to padding"
        )


@pytest.mark.gpu
def test_minilm_float32_on_the_device_matches_bert(gpu, no_tf32):
    ours, batch = _minilm_on(gpu, torch.float32)
    real, both_real = _real(batch)
    with_weights, fused = _forward_both_ways(ours, batch)
    with torch.no_grad():
        eager = _bert(gpu, torch.float32, "eager")(**batch, output_attentions=True)
        default = _bert(gpu, torch.float32, None)(**batch)  # transformers' default: SDPA

    assert with_weights.last_hidden_state.device.type == gpu.type
    assert with_weights.last_hidden_state.dtype == torch.float32
    errors = {
        "hidden states (with weights)": _hidden_error(
            with_weights.last_hidden_state, eager.last_hidden_state, real
        ),
        "attention weights": _attention_error(with_weights.attentions, eager.attentions, both_real),
        "hidden states (fused)": _hidden_error(
            fused.last_hidden_state, default.last_hidden_state, real
        ),
    }
    for what, error in errors.items():
        assert error <= MINILM_FLOAT32_TOL, f"float32 {what} differ from BertModel's by {error:.2e}"
    _assert_no_weight_on_padding(with_weights.attentions, real)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_minilm_half_precision_on_the_device_is_as_accurate_as_bert(gpu, dtype):
    if (
        dtype == torch.bfloat16
        and gpu.type == "cuda"
        and not torch.cuda.is_bf16_supported(including_emulation=False)
    ):
        major, minor = torch.cuda.get_device_capability(gpu)
        pytest.skip(f"this GPU has no native bfloat16 (compute capability {major}.{minor} < 8.0)")
    hidden_bound, attention_bound = MINILM_HALF_BOUNDS[dtype]
    ours, batch = _minilm_on(gpu, dtype)
    truth_hidden, truth_attentions = _float64_truth(batch)
    real, both_real = _real(batch)
    with_weights, fused = _forward_both_ways(ours, batch)
    with torch.no_grad():
        eager = _bert(gpu, dtype, "eager")(**batch, output_attentions=True)
        default = _bert(gpu, dtype, None)(**batch)

    assert with_weights.last_hidden_state.dtype == fused.last_hidden_state.dtype == dtype
    assert all(w.dtype == dtype for w in with_weights.attentions)
    cases = {  # what: (our error, BertModel's error, bound), each against the float64 truth
        "hidden states (with weights)": (
            _hidden_error(with_weights.last_hidden_state, truth_hidden, real),
            _hidden_error(eager.last_hidden_state, truth_hidden, real),
            hidden_bound,
        ),
        "attention weights": (
            _attention_error(with_weights.attentions, truth_attentions, both_real),
            _attention_error(eager.attentions, truth_attentions, both_real),
            attention_bound,
        ),
        "hidden states (fused)": (
            _hidden_error(fused.last_hidden_state, truth_hidden, real),
            _hidden_error(default.last_hidden_state, truth_hidden, real),
            hidden_bound,
        ),
    }
    for what, (mine, theirs, bound) in cases.items():
        message = (
            f"{dtype} {what}: ours {mine:.2e} from the float64 answer, BertModel's {theirs:.2e}"
        )
        assert mine <= 2 * theirs, message + " (ours should be about as accurate)"
        assert mine <= bound, message + f" (bound {bound:.0e})"
    _assert_no_weight_on_padding(with_weights.attentions, real)
