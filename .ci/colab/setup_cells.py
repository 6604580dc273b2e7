"""CI's Colab replica, run by .ci/colab-replica with the replica's Python: every notebook's set-up
cell, executed as Colab executes it, with its install pointed at the clone under test.

1. With no package index reachable, the first set-up cell must print its one failure line and
   nothing else (no pip traceback, no Python error), and install nothing.
2. The first set-up cell then installs the course package: its output must be what the notebooks
   store, and no package that was there before may change version (or go).
3. Every notebook's set-up cell, run again in a fresh kernel (a runtime reset, the other notebooks
   on the same runtime), must find the package installed, print the same and run no pip.

Usage: python setup_cells.py REPOSITORY_ROOT   (in the replica, google.colab importable)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(sys.argv[1]).resolve()
sys.path.insert(0, str(ROOT))
from tools import authoring  # noqa: E402

HERE = Path(__file__).resolve().parent
EXPECTED = "Ready: device = cpu, seed = 0\n"


def installed() -> dict[str, str]:
    """``{name: version}`` of every distribution here, as pip lists them (metadata versions)."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(line.split("==", 1) for line in listed.splitlines() if "==" in line)


def clone_url() -> str:
    """Where the replica installs the course from: the clone under test, at its commit."""
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    if dirty:
        print("note: uncommitted changes are not installed (the set-up cell installs a commit)")
    return f"git+file://{ROOT}@{commit}"


def setup_cell(path: Path, url: str) -> str:
    """The notebook's set-up cell, its install pointed at ``url``, the clone under test."""
    nb = nbformat.read(path, as_version=4)
    source = next(c.source for c in nb.cells if c.cell_type == "code")
    if source != authoring.setup_cell_source():
        raise SystemExit(
            f"{path.relative_to(ROOT)}: its set-up cell is stale (python tools/authoring.py stamp)"
        )
    published = f"git+{authoring.repository_url()}@{authoring.course_ref()}"
    assert published in source, f"{path.name}: the set-up cell does not install {published}"
    return source.replace(published, url)


def run_cells(sources: list[str], cwd: Path, env: dict[str, str]) -> tuple[list[list], float]:
    """Execute cells one after another in a fresh kernel of this Python, as a notebook at ``cwd``:
    each cell's outputs, and the seconds it all took (the kernel's start included)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    nb.metadata["kernelspec"] = dict(authoring.KERNELSPEC)
    before = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    start = time.perf_counter()
    try:
        NotebookClient(
            nb,
            timeout=900,
            kernel_name="python3",
            allow_errors=True,
            resources={"metadata": {"path": str(cwd)}},
        ).execute()
    finally:
        os.environ.clear()
        os.environ.update(before)
    return [cell.outputs for cell in nb.cells], time.perf_counter() - start


def text_of(outputs: list) -> str:
    """The outputs as one text; a stderr stream or an error fails the check that reads it. (A
    shell command's output comes through a terminal, its lines ending in CR LF.)"""
    parts = []
    for output in outputs:
        if output.output_type == "stream":
            text = output.text.replace("\r\n", "\n")
            parts.append(("" if output.name == "stdout" else "[stderr] ") + text)
        elif output.output_type == "error":
            parts.append(f"[error] {output.ename}: {output.evalue}\n")
        else:
            parts.append(f"[{output.output_type}]\n")
    return "".join(parts)


def fail(message: str) -> None:
    print(f"FAILED: {message}")
    sys.exit(1)


def main() -> None:
    notebooks = authoring.lesson_notebooks()
    url = clone_url()
    cells = [(path, setup_cell(path, url)) for path in notebooks]
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    if "mha-course" in installed():
        fail("the course package is already installed in the replica: start from a fresh one")
    log = Path(authoring.INSTALL_LOG)

    # 1. no index reachable: one line, nothing installed
    offline = {k: v for k, v in env.items() if k != "PIP_FIND_LINKS"}
    offline.update(PIP_NO_INDEX="1", PIP_CONFIG_FILE=os.devnull)
    path, source = cells[0]
    (outputs,), seconds = run_cells([source], path.parent, offline)
    got = text_of(outputs)
    if got != authoring.INSTALL_FAILED + "\n":
        fail(f"offline, the set-up cell should print its one failure line; it printed:\n{got}")
    if "mha-course" in installed():
        fail("offline, the set-up cell installed the course package anyway")
    print(f"offline: the set-up cell printed its one line in {seconds:.1f} s:\n  {got.strip()}")

    # 2. the install
    before = installed()
    (outputs,), seconds = run_cells([source], path.parent, env)
    got = text_of(outputs)
    if got != EXPECTED:
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
        fail(f"{path.name}: the set-up cell printed\n{got}\npip's log ends:\n{tail}")
    after = installed()
    print(f"{path.relative_to(ROOT)}: installed the course in {seconds:.1f} s")
    changed = {
        name: (version, after.get(name))
        for name, version in before.items()
        if after.get(name) != version
    }
    added = sorted(f"{name}=={after[name]}" for name in after.keys() - before.keys())
    print(f"  added: {', '.join(added)}")
    if changed:
        fail(
            "the install changed packages Colab has: "
            + ", ".join(f"{n} {old} -> {new or 'removed'}" for n, (old, new) in changed.items())
        )
    print(f"  changed: none of the {len(before)} packages that were there")

    # 3. every notebook's set-up cell again, in a fresh kernel (a runtime reset), one after the
    #    other (the other notebooks on the same runtime)
    stamp = log.stat().st_mtime_ns
    outputs, seconds = run_cells([source for _, source in cells], path.parent, env)
    for (path, _), output in zip(cells, outputs):
        got = text_of(output)
        if got != EXPECTED:
            fail(
                f"{path.relative_to(ROOT)}: with the course installed, the set-up cell printed\n{got}"
            )
    if log.stat().st_mtime_ns != stamp or installed() != after:
        fail("with the course installed, a set-up cell ran pip again")
    print(
        f"the {len(cells)} notebooks' set-up cells again, the course installed: the same output, "
        f"no pip ({seconds:.1f} s in all, a kernel's start included)"
    )


if __name__ == "__main__":
    main()
