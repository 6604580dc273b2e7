"""Find the notebook cells whose compared output depends on a clock.

A stored output that depends on how fast this machine ran ("GQA generates faster than MHA",
"the cache makes a step 5× faster") fails on a busy machine or another CPU. Such a cell must be
kept out of nbval's output comparison (``# NBVAL_IGNORE_OUTPUT`` or ``NBVAL_SKIP``, or their
cell tags): the learner still sees the claim, the tests do not depend on it.

The rule, statement by statement through the notebook (a ``try``/``with``/``if`` block is looked
into; a loop or a function is one statement):

* a statement that calls a timer (``time.perf_counter``, ``torch.utils.benchmark.Timer``, the
  course's ``bench.time_alternating``, ``bench.run_sweep``, ...) or reads a clock-derived name
  makes every name it assigns (or defines: a function, a class) clock-derived;
* a statement of a compared cell that shows something (``print``, ``expect``, ``display``, or
  the cell's last expression) and calls a timer or reads a clock-derived name is a violation.

Plots are not compared by nbval (their images are skipped), so a plot may read timings.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import nbformat

TIMERS = frozenset(
    {
        "perf_counter",
        "perf_counter_ns",
        "process_time",
        "monotonic",
        "Timer",
        "timeit",
        "blocked_autorange",
        "adaptive_autorange",
        "time_call",
        "time_alternating",
        "run_sweep",
        "matmul_rate",
        "describe_device",
        "memory_bandwidth",
        "copy_bandwidth",
    }
)
"""Routines that read a clock (or run a measurement that does)."""
SHOWS = frozenset({"print", "expect", "display"})
"""Calls whose output nbval compares."""
IGNORED = ("NBVAL_IGNORE_OUTPUT", "NBVAL_SKIP")
IGNORED_TAGS = ("nbval-ignore-output", "nbval-skip")


@dataclass(frozen=True)
class Violation:
    notebook: str
    cell: str  # the cell's id
    line: int  # within the cell
    names: tuple[str, ...]  # the clock-derived names (or timers) the statement reads

    def __str__(self) -> str:
        return (
            f"{self.notebook}, cell {self.cell!r}, line {self.line}: shows a result that depends "
            f"on a clock ({', '.join(self.names)}) in an output nbval compares; put it in a cell "
            f"marked # NBVAL_IGNORE_OUTPUT, or state what holds on any machine instead"
        )


def _python(source: str) -> str:
    """The cell's source with IPython's magics and shell lines blanked (line numbers kept)."""
    return "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
    )


def _statements(body: list[ast.stmt]):
    """The statements in order, looking into try/with/if blocks and loops (a loop's target is
    assigned from what it iterates over), not into functions; an assignment of a tuple of values
    to a tuple of names counts as one assignment per name."""
    for node in body:
        if isinstance(node, (ast.For, ast.AsyncFor)):
            yield ast.copy_location(ast.Assign(targets=[node.target], value=node.iter), node)
            yield from _statements(node.body)
            yield from _statements(node.orelse)
        elif isinstance(node, ast.While):
            yield ast.copy_location(ast.Expr(value=node.test), node)
            yield from _statements(node.body)
            yield from _statements(node.orelse)
        elif isinstance(node, (ast.Try, ast.With, ast.If)):
            yield from _statements(node.body)
            for handler in getattr(node, "handlers", []):
                yield from _statements(handler.body)
            yield from _statements(getattr(node, "orelse", []))
            yield from _statements(getattr(node, "finalbody", []))
        elif _pairs(node):
            for target, value in zip(node.targets[0].elts, node.value.elts):
                yield ast.copy_location(ast.Assign(targets=[target], value=value), node)
        else:
            yield node


def _pairs(node: ast.stmt) -> bool:
    """``a, b = x, y``."""
    return (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Tuple)
        and isinstance(node.value, ast.Tuple)
        and len(node.targets[0].elts) == len(node.value.elts)
        and not any(isinstance(t, ast.Starred) for t in node.targets[0].elts)
    )


SCOPES = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _stored(nodes) -> set[str]:
    """Names stored by ``nodes``, not looking into nested functions or comprehensions."""
    found = set()
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
            continue
        if isinstance(node, (*SCOPES, ast.Lambda)):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        found |= _stored(ast.iter_child_nodes(node))
    return found


def _parameters(node) -> set[str]:
    args = node.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    return {a.arg for a in every if a is not None}


def _reads(node: ast.AST, bound: frozenset = frozenset()) -> set[str]:
    """The notebook's names that ``node`` reads (a function's parameters and own variables, a
    comprehension's targets, are not), and the timers it calls by attribute (``time.time``,
    ``bench.time_alternating``)."""
    found = set()
    if isinstance(node, ast.Name):
        return {node.id} if isinstance(node.ctx, ast.Load) and node.id not in bound else set()
    if isinstance(node, ast.Attribute):
        if node.attr in TIMERS:
            found.add(node.attr)
        if isinstance(node.value, ast.Name) and (node.value.id, node.attr) == ("time", "time"):
            found.add("time.time")
    if isinstance(node, FUNCTIONS):
        body = node.body if isinstance(node.body, list) else [node.body]
        inner = bound | _parameters(node) | _stored(body)
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if default is not None:
                found |= _reads(default, bound)
        for decorator in getattr(node, "decorator_list", []):
            found |= _reads(decorator, bound)
        for statement in body:
            found |= _reads(statement, frozenset(inner))
        return found
    if isinstance(node, SCOPES):
        inner = bound | _stored(g.target for g in node.generators)
        for child in ast.iter_child_nodes(node):
            found |= _reads(child, frozenset(inner))
        return found
    for child in ast.iter_child_nodes(node):
        found |= _reads(child, bound)
    return found


def _writes(node: ast.AST) -> set[str]:
    """Names ``node`` assigns, defines or changes in the notebook's namespace: ``x = ...``,
    ``x[i] = ...``, ``x.a = ...``, ``x.append(...)``."""
    found = _stored([node])
    targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
    for target in targets:
        while isinstance(target, (ast.Subscript, ast.Attribute)):
            target = target.value
        if isinstance(target, ast.Name):
            found.add(target.id)
    call = node.value if isinstance(node, ast.Expr) else None
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute):
        owner = call.func.value
        if isinstance(owner, ast.Name):  # losses.append(loss): losses changes
            found.add(owner.id)
    return found


def _shows(node: ast.stmt, last: bool) -> bool:
    if last and isinstance(node, ast.Expr) and not _is_plot(node.value):
        return True
    return any(
        isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in SHOWS
        for sub in ast.walk(node)
    )


def _is_plot(value: ast.expr) -> bool:
    """``plt.show()``, ``ax.plot(...)``: an image, which nbval does not compare."""
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)


def _ignored(cell) -> bool:
    tags = cell.metadata.get("tags", [])
    return any(marker in cell.source for marker in IGNORED) or any(t in tags for t in IGNORED_TAGS)


def violations(path: Path) -> list[Violation]:
    """The statements of ``path``'s compared cells that show a clock-derived result."""
    nb = nbformat.read(path, as_version=4)
    clock: set[str] = set(TIMERS) | {"time.time"}
    found = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(_python(cell.source))
        except SyntaxError:  # an exercise skeleton may not parse; it shows nothing timed
            continue
        last = tree.body[-1] if tree.body else None
        for node in _statements(tree.body):
            touched = _reads(node) & clock
            if not touched:  # a name written from clock-free values is clock-free again
                clock -= _writes(node) - TIMERS
                continue
            clock |= _writes(node)
            if not _ignored(cell) and _shows(node, last=node is last):
                found.append(
                    Violation(path.name, cell.get("id", "?"), node.lineno, tuple(sorted(touched)))
                )
    return found
