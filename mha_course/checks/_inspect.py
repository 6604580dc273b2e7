"""Reading the learner's code (every function whose file is not Python's, an installed
package's or this course's: a notebook cell, a saved answer in ``my_work/``, a test file):
:func:`library_call` (does it call the routine the exercise replaces?), :func:`notebook_variable`
(does it use a variable of another cell? it breaks when a later lesson loads it from
``my_work/``), :func:`exercise_helpers` (other exercises' answers it uses) and
:func:`learner_frames` (where in it an error came from).
"""

from __future__ import annotations

import ast
import dis
import functools
import linecache
import os
import re
import site
import sysconfig
import traceback
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

_LIBRARY_DIRS = tuple(
    os.path.join(Path(folder).resolve(), "")  # with a trailing separator: whole folders only
    for folder in {
        *(sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib")),
        *site.getsitepackages(),
        site.getusersitepackages(),
        Path(__file__).parents[1],  # the mha_course package
    }
)
_LIBRARIES = ("torch", "mha_course")  # a class of theirs is no subclass to blame
_LOADS = {"LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLOSURE"}
_ATTRIBUTES = {"LOAD_ATTR", "LOAD_METHOD"}
_READ = (types.FunctionType, type, functools.partial)  # what may hold the learner's functions
_NO_DATA = (types.ModuleType, type, types.FunctionType, types.MethodType, functools.partial)
_NO_DATA += (types.BuiltinFunctionType, types.BuiltinMethodType, type(None))  # code, or unknown


@functools.lru_cache(maxsize=512)
def is_learner_file(filename: str) -> bool:
    if filename.startswith("<"):  # "<string>", "<ipython-input-...>"; not "<frozen ...>"
        return not filename.startswith(("<frozen", "<built-in"))
    return not str(Path(filename).resolve()).startswith(_LIBRARY_DIRS)


@dataclass(frozen=True)
class Found:
    """A use of a name in the learner's code: which name, what it is, and the line."""

    name: str
    value: object
    filename: str
    lineno: int | None

    def lines(self) -> list[str]:
        return [] if self.lineno is None else located(self.filename, self.lineno)


# ---------------------------------------------------------------- the learner's functions


def _functions_of(obj) -> list[types.FunctionType]:
    """The learner-written functions an answer is made of: a function itself, or the methods of a
    class (its own and those of its learner-written bases)."""
    if isinstance(obj, functools.partial):
        obj = obj.func
    if isinstance(obj, types.MethodType):
        obj = obj.__func__
    if not isinstance(obj, (types.FunctionType, type)) and isinstance(obj, torch.nn.Module):
        obj = type(obj)  # an instance of the learner's class
    if isinstance(obj, types.FunctionType):
        functions = [obj]
    elif isinstance(obj, type):
        functions = []
        for cls in obj.__mro__:
            if cls is object or cls.__module__.startswith("torch."):  # nothing of the learner's
                continue
            for member in vars(cls).values():
                if isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                parts = (member.fget, member.fset) if isinstance(member, property) else (member,)
                functions += [f for f in parts if isinstance(f, types.FunctionType)]
    else:
        return []
    return [f for f in functions if is_learner_file(f.__code__.co_filename)]


def is_learner_code(obj) -> bool:
    return bool(_functions_of(obj))


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _value(function: types.FunctionType, code: types.CodeType, name: str, opname: str):
    """What a loaded name refers to, where it can be known without running the code."""
    if opname in ("LOAD_GLOBAL", "LOAD_NAME"):
        return function.__globals__.get(name)
    if code is function.__code__ and name in code.co_freevars and function.__closure__:
        try:
            return function.__closure__[code.co_freevars.index(name)].cell_contents
        except ValueError:  # an empty cell
            return None
    return None


def _uses(candidate, stop_at: frozenset[str] = frozenset()) -> Iterator[tuple[str, Found, bool]]:
    """Every name (or attribute, its chain known) the learner's code loads, as ``(kind, found,
    is_global)``, in the learner's functions it uses too but those loaded as a name in ``stop_at``."""
    queue, seen = _functions_of(candidate), set()
    while queue:
        function = queue.pop()
        if function in seen:
            continue
        seen.add(function)
        for code in _codes(function.__code__):
            chain, line = None, code.co_firstlineno
            for ins in dis.get_instructions(code):
                line = _line_of(ins) or line
                if ins.opname in _LOADS:
                    chain = _value(function, code, ins.argval, ins.opname)
                    found = Found(ins.argval, chain, code.co_filename, line)
                    yield "name", found, ins.opname == "LOAD_GLOBAL"
                    if isinstance(chain, _READ) and ins.argval not in stop_at:
                        queue.extend(_functions_of(chain))
                elif ins.opname in _ATTRIBUTES:
                    known = isinstance(chain, (types.ModuleType, type))
                    chain = getattr(chain, ins.argval, None) if known else None
                    yield "attribute", Found(ins.argval, chain, code.co_filename, line), False
                else:
                    chain = None


def _line_of(ins: dis.Instruction) -> int | None:
    """The instruction's line (Python 3.11+ give each one; 3.10 only a line's first)."""
    positions = getattr(ins, "positions", None)
    if positions is not None and positions.lineno is not None:
        return positions.lineno
    start = getattr(ins, "line_number", ins.starts_line)
    return start if isinstance(start, int) and not isinstance(start, bool) else None


# ---------------------------------------------------------------- what the checks look for


@dataclass(frozen=True)
class Helper:
    """Another exercise's answer that the learner's code uses: its name, the learner's
    definition, and the exercise it was reached through (None: the candidate calls it itself)."""

    name: str
    value: object
    via: str | None = None

    def raised(self, error: BaseException) -> bool:
        """Whether ``error`` was raised in this helper's own code (its innermost learner frame)."""
        codes = _learner_codes(error)
        return bool(codes) and any(
            codes[-1][0] in set(_codes(f.__code__)) for f in _functions_of(self.value)
        )


def exercise_helpers(candidate, exercises: set[str]) -> list[Helper]:
    """The answers to other exercises (names in ``exercises``) that the learner's code uses,
    written by the learner: those it calls itself first, then those they call, in turn."""
    stop = frozenset(exercises)
    helpers: list[Helper] = []
    seen, queue = {id(candidate)}, [(candidate, None)]
    while queue:
        user, via = queue.pop(0)
        for kind, found, _ in _uses(user, stop_at=stop):
            value = found.value
            if kind != "name" or found.name not in stop or id(value) in seen:
                continue
            if not is_learner_code(value):  # the course's reference, say: nothing to blame
                continue
            seen.add(id(value))
            helpers.append(Helper(found.name, value, via))
            queue.append((value, found.name))
    return helpers


def library_call(candidate, routines: dict[str, object]) -> Found | None:
    """The first call in the learner's code to one of ``routines`` ({what to call it: object}),
    or a subclass of one. Found.name is the description."""
    if not routines:
        return None
    if isinstance(candidate, type) and candidate.__module__.split(".")[0] not in _LIBRARIES:
        for what, obj in routines.items():
            if isinstance(obj, type) and issubclass(candidate, obj):
                return Found(what, obj, "", None)
    if not is_learner_code(candidate):
        return None
    by_id = {id(obj): what for what, obj in routines.items()}
    by_name = {getattr(obj, "__name__", ""): what for what, obj in routines.items()}
    for kind, found, _ in _uses(candidate):
        if id(found.value) in by_id and found.value is not None:
            return Found(by_id[id(found.value)], found.value, found.filename, found.lineno)
        if kind == "attribute" and found.value is None and found.name in by_name:
            return Found(by_name[found.name], None, found.filename, found.lineno)
    return None


def notebook_variable(candidate) -> Found | None:
    """The first global name the learner's code uses that holds data (a number, a tensor, ...)
    and is not defined in the code's own cell or file."""
    if not is_learner_code(candidate):
        return None
    for kind, found, is_global in _uses(candidate):
        if kind != "name" or not is_global or isinstance(found.value, _NO_DATA):
            continue
        defined = _defined_names(found.filename)
        if defined is not None and found.name not in defined:
            return found
    return None


def _defined_names(filename: str) -> set[str] | None:
    """The names a cell or file defines at its top level (None when its source is unknown)."""
    try:
        tree = ast.parse("".join(linecache.getlines(filename)))
    except (SyntaxError, ValueError):
        return None
    if not tree.body:
        return None
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(child.name)  # its body has names of its own, but for `global` ones
                names.update(
                    n for g in ast.walk(child) if isinstance(g, ast.Global) for n in g.names
                )
            elif isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
                names.add(child.id)
            elif isinstance(child, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in child.names)
            elif not isinstance(child, ast.Lambda):
                visit(child)

    visit(tree)
    return names


# ---------------------------------------------------------------- where an error came from


def where(filename: str, lineno: int | None) -> str:
    """ "Cell In[7], line 5" for a notebook cell, "my_work/x.py, line 5" for a file (relative to
    the working folder, or its own folder and name when it lies elsewhere, as on Drive)."""
    label = _cell_label(filename)
    if label is None:
        path = Path(filename)
        try:
            label = str(path.resolve().relative_to(Path.cwd()))
        except ValueError:  # outside the working folder: its folder and name are enough
            label = str(Path(path.parent.name, path.name))
    return label if lineno is None else f"{label}, line {lineno}"


def _cell_label(filename: str) -> str | None:
    """ "Cell In[7]" when ``filename`` is a cell of this IPython session, else None. A label that
    cannot be found never breaks the message it goes in."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    if shell is None:
        return None
    try:
        format_code_name = getattr(shell.compile, "format_code_name", None)
        if format_code_name is not None:  # IPython 8 and later
            names = format_code_name(filename)
            return " ".join(names) if names else None
        number = _cell_number(shell, filename)  # IPython 7 (Colab's 7.34) has no such method
    except Exception:
        return None
    return None if number is None else f"Cell In[{number}]"


_IPYTHON_INPUT = re.compile(r"<ipython-input-(\d+)-")
_RECENT_CELLS = 200  # how far back the history is searched for a cell's number


def _cell_number(shell, filename: str) -> int | None:
    """The execution count of the cell compiled as ``filename``: from IPython 7's name for it, or
    (ipykernel 6's temporary files) the latest cell of the history with the code cached for it."""
    match = _IPYTHON_INPUT.match(filename)
    if match:
        return int(match.group(1))
    cached = linecache.cache.get(filename)
    if not cached or not cached[2]:
        return None
    code = "".join(cached[2]).rstrip("\n")
    parsed = shell.history_manager.input_hist_parsed  # the cells as run, In[n] at n
    for number in range(len(parsed) - 1, max(len(parsed) - 1 - _RECENT_CELLS, 0), -1):
        if parsed[number].rstrip("\n") == code:
            return number
    return None


def source_line(filename: str, lineno: int | None) -> str:
    return linecache.getline(filename, lineno).strip() if lineno else ""


def _learner_codes(error: BaseException) -> list[tuple[types.CodeType, int]]:
    """(code, line) of each frame of the learner's code in ``error``'s traceback, outermost first."""
    walk = traceback.walk_tb(error.__traceback__)
    return [(f.f_code, line) for f, line in walk if is_learner_file(f.f_code.co_filename)]


def learner_frames(error: BaseException) -> list[tuple[str, int, str]]:
    """(file, line, function) of each frame of the learner's code in ``error``'s traceback,
    outermost first; the checker's and the libraries' frames are left out."""
    return [(code.co_filename, line, code.co_name) for code, line in _learner_codes(error)]


def frame_lines(error: BaseException, keep: int = 2) -> list[str]:
    """The innermost ``keep`` frames of the learner's code, two lines each: where, and the line."""
    return [line for frame in learner_frames(error)[-keep:] for line in located(*frame)]


def located(filename: str, lineno: int, function: str = "") -> list[str]:
    """Two lines: where (the cell or file, the line, the function), then the line of code."""
    text = source_line(filename, lineno)
    in_function = f", in {function}" if function else ""
    return [f"  at {where(filename, lineno)}{in_function}:"] + ([f"      {text}"] if text else [])
