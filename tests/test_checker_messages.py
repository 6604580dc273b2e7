"""A checker's message names the cause of a wrong answer and where to look, never the corrected
line: no text a checker can show holds a line (or a piece of a line) of code that fixes it.

Every string of the checker modules is read (docstrings and case names aside: a case names its
inputs) and held to a list of what only code looks like: a call with arguments, a keyword
argument, a slice, a matrix product, a return, an assignment from a call."""

import ast
import re
from pathlib import Path

import pytest

CHECKS = Path(__file__).resolve().parent.parent / "mha_course" / "checks"
RULED = sorted(
    p
    for p in CHECKS.glob("*.py")
    if re.match(r"l\d\d_", p.name)
    or p.name in ("families.py", "_table.py", "_core.py", "_verdict.py", "_registry.py")
)

CODE = {
    "a call with arguments": re.compile(r"[\w\])]\.\w+\((?!\))"),
    "a library call with arguments": re.compile(r"\b(?:torch|F|nn|math|np|einops)\.\w+\((?!\))"),
    "a keyword argument": re.compile(r"\b[a-z_]\w*=(?:[-\w'\"(\[])"),
    "a slice": re.compile(r"\[[^\]\n]*:[^\]\n]*\]"),
    "a matrix product": re.compile(r"\w[\])]?\s@\s[\w(]"),
    "a return statement": re.compile(r"\breturn\s+[\w(]"),
    "an assignment from a call": re.compile(r"\b\w+\s=\s[\w.]+\("),
    "an inverted mask in code": re.compile(r"~[A-Za-z_(]"),
}


def code_in(text: str) -> list[str]:
    """What in ``text`` reads as code (the kinds of :data:`CODE` it matches)."""
    return [kind for kind, pattern in CODE.items() if pattern.search(text)]


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _case_names(tree: ast.AST) -> set[int]:
    """The first argument of every ``Case(...)``: a case names its inputs."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Case" and node.args:
            found |= {id(n) for n in ast.walk(node.args[0])}
    return found


def messages(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of every string in ``path`` a learner may read (f-strings with their
    fields as X)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _docstrings(tree) | _case_names(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "X" for v in node.values)
            found.append((node.lineno, text))
            skip |= {id(v) for v in node.values}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and " " in node.value:
            found.append((node.lineno, node.value))
    return found


@pytest.mark.parametrize("path", RULED, ids=lambda p: p.name)
def test_no_message_shows_the_corrected_line(path):
    found = [
        f"{path.name}:{line}: {kinds}: {text!r}"
        for line, text in messages(path)
        if (kinds := code_in(text))
    ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "text",
    [
        "divide by √d_k, with d_k = query.size(-1)",
        "weights = torch.softmax(scores, dim=-1)",
        "out.transpose(1, 2).reshape(B, L, E)",
        "torch.cat([self.k, k], dim=2)",
        "ones.tril(S)",
        "x.var(dim=-1, keepdim=True, unbiased=False)",
        "output = weights @ value",
        "end with `return module`",
        "masked_fill(~attn_mask, float('-inf'))",
        "keys[:, :, start:end]",
    ],
)
def test_the_rule_finds_code(text):
    assert code_in(text)


@pytest.mark.parametrize(
    "text",
    [
        "the scores are not scaled: between Q Kᵀ and the softmax they are multiplied by 1/√d_k",
        "the mask is inverted: here True means the query MAY attend to that key",
        "Case 'padding mask (2, 1, 1, 7)': the weights differ from the reference.",
        "look at the axis your softmax runs over (torch.softmax takes it as an argument)",
        "softmax(Q Kᵀ / √d_k) V",
        "expected (B, H, L, S) = (2, 4, 5, 7)",
    ],
)
def test_the_rule_lets_words_through(text):
    assert not code_in(text)
