"""Failing checks as a learner sees them: wrong answers run in a real Jupyter kernel, and each
failing cell's error output is short (at most 15 lines), names the cause and shows none of the
checker's own code."""

import re
import textwrap

from checker_helpers import MHA_INIT_SOURCE as MHA_INIT

ANSI = re.compile(r"\x1b\[[0-9;]*m")

SETUP = """
import math
import torch
import torch.nn as nn
import torch.nn.functional as F
from mha_course.notebook import start
from mha_course.checks import (
    check_layer_norm, check_load_layer, check_multi_head_attention,
    check_scaled_dot_product_attention,
)
start()
d_k, h = 6, 4  # the notebook's own example sizes
"""


def mha(forward_body: str, init: str = MHA_INIT) -> str:
    """A learner's MultiHeadAttention cell whose forward is ``forward_body``, then its check."""
    forward = "    def forward(self, query, key, value, attn_mask=None):\n" + textwrap.indent(
        textwrap.dedent(forward_body), " " * 8
    )
    return init + "\n" + forward + "\n\ncheck_multi_head_attention(MultiHeadAttention)\n"


MHA_FORWARD = """
B, L, E = query.shape
q, k, v = (
    p(x).view(B, -1, self.num_heads, E // self.num_heads).transpose(1, 2)
    for p, x in ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value))
)
scores = q @ k.transpose(-2, -1) / math.sqrt(E // self.num_heads)
if attn_mask is not None:
    scores = scores.masked_fill(~attn_mask, float("-inf"))
weights = scores.softmax(dim=-1)
return self.out_proj((weights @ v).transpose(1, 2).reshape(B, L, E)), weights
"""


def sdpa(body: str) -> str:
    """A learner's scaled_dot_product_attention whose body is ``body``, then its check."""
    return (
        "def scaled_dot_product_attention(query, key, value, attn_mask=None):\n"
        + textwrap.indent(textwrap.dedent(body), "    ")
        + "\n\ncheck_scaled_dot_product_attention(scaled_dot_product_attention)\n"
    )


# (the wrong answer's cell, a phrase of the cause the check must name)
WRONG_ANSWERS = [
    (
        sdpa("""
        w = torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)), dim=-1)
        return w, w @ value
        """),
        "the pair came as (weights, output)",
    ),
    (
        sdpa("""
        w = torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(key.size(-2)), dim=-1)
        return w @ value, w
        """),
        "the number of keys",
    ),
    (
        sdpa("""
        scores = torch.einsum("...ld,...sd->...l", query, key) / math.sqrt(query.size(-1))
        w = torch.softmax(scores[..., None].expand(*scores.shape, key.size(-2)), dim=-1)
        return w @ value, w
        """),
        "every key gets the same weight",
    ),
    (
        sdpa("""
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask)
        return out, torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)), -1)
        """),
        "calls torch's scaled_dot_product_attention",
    ),
    (
        sdpa("""
        scores = query @ key.T / math.sqrt(query.size(-1))
        w = torch.softmax(scores, dim=-1)
        return w @ value, w
        """),
        "scores = query @ key.T / math.sqrt(query.size(-1))",  # the learner's line that raised
    ),
    (mha(MHA_FORWARD, MHA_INIT.replace("super().__init__()", "pass")), "through super"),
    (mha(MHA_FORWARD.replace("math.sqrt(E // self.num_heads)", "math.sqrt(d_k)")), "`d_k`"),
    (
        mha(MHA_FORWARD.replace("~attn_mask", "~attn_mask.unsqueeze(1)")),
        "runs without a mask but not with this one",
    ),
    (
        """
class LayerNorm(nn.Module):
    def __init__(self, normalized_shape, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


check_layer_norm(LayerNorm)
""",
        "calls torch's layer_norm",
    ),
]

# A correct answer whose check reads a crash of it: lesson 05's load_layer, written for the layer
# with q_proj, k_proj and v_proj, first meets the packed layout and raises AttributeError there.
CORRECT_LOAD_LAYER = """
def load_layer(layer, weights, i):
    with torch.no_grad():
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
        for name, module in places.items():
            module.weight.copy_(weights[f"encoder.layer.{i}.{name}.weight"])
            module.bias.copy_(weights[f"encoder.layer.{i}.{name}.bias"])


check_load_layer(load_layer)
"""
BROKEN_CELL = "# exercise: MultiHeadAttention\nclass MultiHeadAttention(nn.Module:\n    pass\n"
STALE_CHECK = "check_multi_head_attention(MultiHeadAttention)"


def error_lines(cell) -> list[str]:
    """The lines of the cell's error output as the notebook shows them."""
    errors = [o for o in cell.outputs if o.output_type == "error"]
    assert len(errors) == 1, cell.outputs
    return ANSI.sub("", "\n".join(errors[0].traceback)).splitlines()


def test_failing_checks_in_a_kernel_are_short_and_name_the_cause(tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("MHA_COURSE_WORK_DIR", str(tmp_path / "my_work"))
    sources = [SETUP] + [cell for cell, _ in WRONG_ANSWERS]
    sources += [CORRECT_LOAD_LAYER, BROKEN_CELL, STALE_CHECK]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    NotebookClient(
        nb, timeout=60, allow_errors=True, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()

    assert not [o for o in nb.cells[0].outputs if o.output_type == "error"], nb.cells[0].outputs
    shown = {}
    for (_, cause), cell in zip(WRONG_ANSWERS, nb.cells[1:], strict=False):
        lines = error_lines(cell)
        shown[cause] = len(lines)
        text = "\n".join(lines)
        assert len(lines) <= 15, text
        assert cause in text, text
        assert "AssertionError" in lines[0], text
        assert "_core.py" not in text and "mha_course/checks" not in text, text
        assert "Traceback" not in text and "----" not in text, text
    crash = "\n".join(error_lines(nb.cells[5]))
    assert "Cell In[" in crash and "RuntimeError" in crash, crash

    correct = nb.cells[-3]
    assert [o.output_type for o in correct.outputs] == ["stream"], correct.outputs
    assert correct.outputs[0].text.startswith("✅ load_layer"), correct.outputs

    stale = error_lines(nb.cells[-1])
    text = "\n".join(stale)
    assert len(stale) <= 15, text
    assert "did not run: SyntaxError" in text and "still the earlier definition" in text, text
    shown["stale cell"] = len(stale)
    print("lines shown by each failing check:", shown)
