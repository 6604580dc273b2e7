"""The package on a CUDA device: the same answers as PyTorch's own modules there, in float32,
float16 and bfloat16, no host sync inside a forward, and torch.compile with its default backend.

Every test is marked ``gpu`` and takes the ``gpu`` fixture (tests/conftest.py): without CUDA it is
skipped, with the reason. ``MHA_COURSE_GPU_TESTS_ON=cpu pytest -m gpu tests/test_gpu.py`` runs
them on the CPU to check the tests themselves; what only a GPU can show (the sync check, the
inductor backend) is then skipped inside the test, the rest runs.

Sections: precision and tolerances; scaled_dot_product_attention; MultiHeadAttention;
EncoderLayer and Encoder; no host sync and torch.compile; MiniLM against BertModel.
"""

from __future__ import annotations

import contextlib
import copy
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mha_course import Encoder, EncoderLayer, MultiHeadAttention, masks
from mha_course import scaled_dot_product_attention as sdpa
from mha_course.pretrained import load_minilm, model_directory

pytestmark = pytest.mark.gpu

DTYPES = [
    pytest.param(torch.float32, id="float32"),
    pytest.param(torch.float16, id="float16"),
    pytest.param(torch.bfloat16, id="bfloat16"),
]
F64 = torch.float64

# ---------------------------------------------------------------- precision and tolerances

# Ours against torch's, both on the device, outputs of size about 1 (sums of at most 64 terms).
# float32 (TF32 off): both round to float32 (eps 1.2e-7) but add in different orders (a fused
# kernel against a written-out one): they differ by a few 1e-7 per op, ~1e-6 after a layer.
# float16 (eps 9.8e-4) and bfloat16 (eps 7.8e-3): every op rounds to a few ulps, and torch's own
# answer is that far from the exact one, so there both are compared with a float64 CPU
# reference: ours within (atol, rtol) of it, and no more than twice as far from it as torch's
# (plus one ulp of slack for the maximum of a few elements).
TOLERANCE = {
    torch.float32: (1e-5, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (6e-2, 6e-2),
}


@pytest.fixture(autouse=True)
def no_tf32():
    """float32 means float32: TF32 matmuls (10-bit mantissas) off, and restored afterwards."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def require_dtype(dtype: torch.dtype, device: torch.device) -> None:
    if dtype == torch.bfloat16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bfloat16 (torch.cuda.is_bf16_supported() is False)")


def assert_as_close_as_torch(ours, theirs, exact, dtype, what="output"):
    """``ours`` and ``theirs`` on the device in ``dtype``, ``exact`` the float64 CPU answer."""
    atol, rtol = TOLERANCE[dtype]
    ours, theirs = ours.detach().cpu().double(), theirs.detach().cpu().double()
    if dtype == torch.float32:
        torch.testing.assert_close(ours, theirs, atol=atol, rtol=rtol, msg=what)
        return
    torch.testing.assert_close(ours, exact, atol=atol, rtol=rtol, msg=what)
    error, torch_error = (ours - exact).abs().max(), (theirs - exact).abs().max()
    ulp = torch.finfo(dtype).eps * exact.abs().max()
    assert error <= 2 * torch_error + ulp, f"{what}: ours {error:.2e} off, torch {torch_error:.2e}"


def randomised(module: nn.Module, seed: int = 0) -> nn.Module:
    """Every parameter random (biases and norms included), so none hides behind its init."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return module


def pair_on(theirs: nn.Module, ours_from_torch, device, dtype):
    """(torch's module on the device, ours copied from it, torch's in float64 on the CPU)."""
    exact = copy.deepcopy(theirs).double().eval()
    theirs = theirs.to(device, dtype).eval()
    return theirs, ours_from_torch(theirs), exact


B, L, E, H = 3, 16, 32, 4
LENGTHS = [16, 9, 0]  # the last sequence is all padding: its queries may attend to nothing


def batch(device, dtype, seed=1):
    """x (B, L, E) on the device, the same in float64 on the CPU, and the key padding mask."""
    x = torch.randn(B, L, E, generator=torch.Generator().manual_seed(seed), dtype=F64)
    padding = masks.padding_mask(torch.tensor(LENGTHS), L)  # (B, L), True = padding
    return x.to(device, dtype), x, padding


# ---------------------------------------------------------------- scaled_dot_product_attention


@pytest.mark.parametrize("dtype", DTYPES)
def test_sdpa_matches_torch_on_the_device(gpu, dtype):
    require_dtype(dtype, gpu)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, H, L, 8, generator=g, dtype=F64) for _ in range(3))
    may_attend = torch.rand(2, 1, L, L, generator=g) > 0.3
    may_attend[1, 0, 3] = False  # query 3 of sequence 1 may attend to nothing
    empty = masks.nothing_to_attend(may_attend).squeeze(-1).expand(2, H, L)  # (2, H, L)
    on = [t.to(gpu, dtype) for t in (q, k, v)]
    out, weights = sdpa(*on, attn_mask=may_attend.to(gpu))
    theirs = F.scaled_dot_product_attention(*on, attn_mask=may_attend.to(gpu))
    exact, exact_weights = sdpa(q, k, v, attn_mask=may_attend)
    assert torch.isfinite(out).all() and (out[empty] == 0).all() and (weights[empty] == 0).all()
    assert_as_close_as_torch(out[~empty], theirs[~empty], exact[~empty], dtype)
    atol, rtol = TOLERANCE[dtype]
    torch.testing.assert_close(weights.cpu().double(), exact_weights, atol=atol, rtol=rtol)


# ---------------------------------------------------------------- MultiHeadAttention


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "need_weights, average",
    [(False, True), (True, True), (True, False)],
    ids=["no weights", "averaged", "per head"],
)
def test_multi_head_attention_matches_torch_on_the_device(gpu, dtype, need_weights, average):
    """Key padding and a causal attn_mask together; the all-padding sequence's queries attend to
    nothing: torch gives NaN there, ours zero attention (output = the out_proj bias)."""
    require_dtype(dtype, gpu)
    torch_mha = randomised(nn.MultiheadAttention(E, H, batch_first=True))
    theirs, ours, exact_module = pair_on(torch_mha, MultiHeadAttention.from_torch, gpu, dtype)
    x, x64, padding = batch(gpu, dtype)
    causal = ~masks.causal_mask(L, L)  # True = masked out, torch's convention
    kwargs = dict(need_weights=need_weights, average_attn_weights=average)
    with torch.no_grad():
        out, weights = ours(
            x, x, x, key_padding_mask=padding.to(gpu), attn_mask=causal.to(gpu), **kwargs
        )
        expected, expected_weights = theirs(
            x, x, x, key_padding_mask=padding.to(gpu), attn_mask=causal.to(gpu), **kwargs
        )
        exact, exact_weights = exact_module(
            x64, x64, x64, key_padding_mask=padding, attn_mask=causal, **kwargs
        )
    real = ~padding.all(-1)  # (B,): the sequences whose queries have keys
    assert torch.isfinite(out).all()
    bias = ours.out_proj.bias.detach().expand(L, E)
    torch.testing.assert_close(out[~real.to(gpu)][0], bias)
    assert_as_close_as_torch(out[real], expected[real], exact[real], dtype)
    assert (weights is None) == (not need_weights)
    if need_weights:
        assert (weights[~real.to(gpu)] == 0).all()
        assert_as_close_as_torch(
            weights[real], expected_weights[real], exact_weights[real], dtype, "weights"
        )


# ---------------------------------------------------------------- EncoderLayer and Encoder


def torch_layer(norm_first: bool) -> nn.TransformerEncoderLayer:
    layer = nn.TransformerEncoderLayer(
        E, H, dim_feedforward=64, dropout=0.0, batch_first=True, norm_first=norm_first
    )
    return randomised(layer)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_encoder_layer_matches_torch_on_the_device(gpu, dtype, norm_first):
    require_dtype(dtype, gpu)
    theirs, ours, exact_layer = pair_on(
        torch_layer(norm_first), EncoderLayer.from_torch, gpu, dtype
    )
    x, x64, padding = batch(gpu, dtype)
    with torch.no_grad():
        out = ours(x, src_key_padding_mask=padding.to(gpu))
        expected = theirs(x, src_key_padding_mask=padding.to(gpu))
        exact = exact_layer(x64, src_key_padding_mask=padding)
    real = ~padding  # (B, L): the real tokens (the padding's outputs mean nothing)
    assert torch.isfinite(out).all()
    assert_as_close_as_torch(out[real.to(gpu)], expected[real.to(gpu)], exact[real], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_encoder_matches_torch_on_the_device(gpu, dtype, norm_first):
    require_dtype(dtype, gpu)
    torch_encoder = nn.TransformerEncoder(
        torch_layer(norm_first),
        num_layers=3,
        norm=randomised(nn.LayerNorm(E), seed=2) if norm_first else None,
        enable_nested_tensor=False,
    )
    theirs, ours, exact_encoder = pair_on(torch_encoder, Encoder.from_torch, gpu, dtype)
    x, x64, padding = batch(gpu, dtype)
    with torch.no_grad():
        out = ours(x, src_key_padding_mask=padding.to(gpu))
        expected = theirs(x, src_key_padding_mask=padding.to(gpu))
        exact = exact_encoder(x64, src_key_padding_mask=padding)
    real = ~padding
    assert torch.isfinite(out).all()
    assert_as_close_as_torch(out[real.to(gpu)], expected[real.to(gpu)], exact[real], dtype)


# ---------------------------------------------------------------- no host sync, torch.compile


@contextlib.contextmanager
def no_host_sync(device: torch.device):
    """On CUDA, any op that makes the CPU wait for the GPU (``.item()``, ``.any()`` in an ``if``,
    a copy to the CPU) raises inside this block."""
    if device.type != "cuda":  # checking the test on the CPU: nothing to wait for
        yield
        return
    saved = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(saved)


CASES = [
    "MultiHeadAttention, weights",
    "MultiHeadAttention, no weights",
    "EncoderLayer",
    "Encoder, 6 layers",
    "Encoder, 6 layers, weights",
]


def with_padding(case: str, device):
    """(the module in eval mode, a call of it) with a padding mask that leaves one sequence
    nothing to attend to; the call returns one tensor."""
    x = torch.randn(B, L, E, device=device)
    padding = masks.padding_mask(torch.tensor(LENGTHS), L).to(device)
    if case.startswith("MultiHeadAttention"):
        need_weights = case.endswith(", weights")
        return MultiHeadAttention(E, H, device=device).eval(), lambda m: m(
            x, x, x, key_padding_mask=padding, need_weights=need_weights
        )[0]
    layer = EncoderLayer(E, H, 64, dropout=0.0, device=device).eval()
    if case == "EncoderLayer":
        return layer, lambda m: m(x, src_key_padding_mask=padding)
    need_weights = case.endswith(", weights")
    return Encoder(layer, num_layers=6).eval(), lambda m: m(
        x, src_key_padding_mask=padding, need_weights=need_weights
    )


@pytest.mark.parametrize("case", CASES)
def test_forward_with_a_padding_mask_makes_no_host_sync(gpu, case):
    module, call = with_padding(case, gpu)
    with torch.no_grad():
        call(module)  # warm-up: the first call may load kernels
        with no_host_sync(gpu):
            out = call(module)
    out = out[0] if isinstance(out, tuple) else out  # the Encoder's (output, weights)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("case", CASES)
def test_torch_compile_fullgraph_with_the_default_backend(gpu, case):
    """inductor on CUDA (on the CPU the eager backend checks the test); the compiled forward
    also runs without a host sync."""
    module, call = with_padding(case, gpu)
    torch.compiler.reset()
    compiled = torch.compile(
        module, fullgraph=True, backend="inductor" if gpu.type == "cuda" else "eager"
    )
    with torch.no_grad():
        expected = call(module)
        call(compiled)  # compiles
        with no_host_sync(gpu):
            got = call(compiled)
    if isinstance(expected, tuple):  # the Encoder's (output, weights of every layer)
        torch.testing.assert_close(got[1], expected[1], atol=1e-4, rtol=1e-4)
        got, expected = got[0], expected[0]
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


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
def test_minilm_float32_on_the_device_matches_bert(gpu):
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


# ---------------------------------------------------------------- every lesson on the device
#
# Each notebook, both versions, executed top to bottom on the GPU (its set-up cell picks CUDA) in
# nbval's lax mode: every cell must run without an error; outputs are not compared (numbers
# legitimately differ on a GPU). A lesson must fit a GPU session: at most 90 s on an H100-class
# device (compute capability 8.0 or more); on smaller GPUs (a Colab T4) the time is reported.

LESSON_SECONDS_ON_A_BIG_GPU = 90


def _lesson_notebooks():
    from tools import authoring

    return authoring.lesson_notebooks()


@pytest.mark.parametrize("notebook", _lesson_notebooks(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_lesson_runs_on_the_device(gpu, notebook):
    import subprocess
    import sys
    import time

    if gpu.type != "cuda" and os.environ.get("MHA_COURSE_GPU_NOTEBOOKS_ON_CPU") != "1":
        pytest.skip(
            "the lessons on the CPU are the default test run; set MHA_COURSE_GPU_NOTEBOOKS_ON_CPU=1"
        )
    start = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-o",
            "addopts=",
            "-p",
            "no:cacheprovider",
            "-q",
            "--nbval-lax",
            "--nbval-current-env",
            "--nbval-cell-timeout=300",
            str(notebook),
        ],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        env={**os.environ, "MHA_COURSE_DEVICE": gpu.type},
    )
    seconds = time.perf_counter() - start
    assert done.returncode == 0, done.stdout[-4000:]
    print(f"{notebook.name} on {gpu.type}: {seconds:.0f} s")
    if gpu.type == "cuda" and torch.cuda.get_device_capability(gpu)[0] >= 8:
        assert seconds <= LESSON_SECONDS_ON_A_BIG_GPU, f"{notebook.name} took {seconds:.0f} s"
