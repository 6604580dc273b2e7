"""The course in JupyterLab, the page learners use, driven in a real browser.

Debian's chromium (``/usr/bin/chromium``) is driven through Playwright; CI installs both with
``.ci/browser-deps`` and runs these tests with ``pytest -m browser`` (the default ``pytest`` run
leaves them out). Nothing is downloaded while they run.

What a learner does after a fresh clone, checked as they would see it:

* JupyterLab serves a fresh copy of the repository's tracked files (not this checkout, with its
  ``my_work/``), on a free port with a random token; its kernels save answers to a private folder;
* lesson 01: Run All; every cell runs, none shows an error, and the unsolved exercise's check
  says "⏳ … not done yet" on the page;
* lesson 05: Run All; the attention explorer shows its controls, and picking another query token
  or head redraws its heatmap.

Screenshots go to ``test-artifacts/browser/``, with the server's and the browser's logs when a
test fails. Every wait has a limit and a failure names the step that ran out of time.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts" / "browser"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",  # CI runs as root, where chromium's sandbox cannot start
    "--headless=new",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # No connections of the browser's own (updates, sync, field trials): the tests run offline.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1400, "height": 1600}  # tall enough for the whole explorer

# Limits in seconds, generous for a busy 2-core CI machine; a step that runs past its limit fails
# with its name instead of hanging the run.
SERVER_START = 90
PAGE_LOAD = 90
KERNEL_READY = 120
RUN_LESSON_01 = 150
RUN_LESSON_05 = 300
REDRAW = 60
SHUTDOWN = 20

EXPLORER_CALL = "attention_explorer("
UNSOLVED_CHECK = re.compile(r"⏳ scaled_dot_product_attention: not done yet")


# ---------------------------------------------------------------- the server


def course_copy(destination: Path) -> Path:
    """The repository's tracked files, as a learner's fresh clone has them."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in this checkout is left out
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Lab:
    """A running JupyterLab server and where its files and logs are."""

    process: subprocess.Popen
    url: str
    token: str
    log: Path
    home: Path
    console_log: Path = field(init=False)

    def __post_init__(self):
        self.console_log = self.home / "browser-console.log"

    def api(self, method: str, path: str, timeout: float = 10):
        request = urllib.request.Request(
            f"{self.url}{path}", method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
        return json.loads(body) if body else None

    def log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def wait_until_answering(self, limit: float) -> None:
        start = time.monotonic()
        while time.monotonic() < start + limit:
            if self.process.poll() is not None:
                pytest.fail(
                    f"JupyterLab exited with code {self.process.returncode} before answering; "
                    f"its log ends:\n{self.log_tail()}",
                    pytrace=False,
                )
            with contextlib.suppress(OSError):
                self.api("GET", "/api/status", timeout=2)
                print(f"\n{time.monotonic() - start:6.1f} s  starting JupyterLab")
                return
            time.sleep(0.5)
        pytest.fail(
            f"step timed out: starting JupyterLab (no answer in {limit} s); its log ends:\n"
            f"{self.log_tail()}",
            pytrace=False,
        )

    def shut_down_kernels(self) -> None:
        for session in self.api("GET", "/api/sessions"):
            self.api("DELETE", f"/api/sessions/{session['id']}", timeout=SHUTDOWN)

    def stop(self) -> None:
        """Shut the kernels and the server down; kill whatever is left, kernels included."""
        try:
            children = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        with contextlib.suppress(OSError, ValueError):
            self.shut_down_kernels()
            self.api("POST", "/api/shutdown")
        try:
            self.process.wait(SHUTDOWN)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(SHUTDOWN)
        for child in children:  # kernels run in sessions of their own
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()


# The learner's answer to "get notified about Jupyter news?" (a toast over the page otherwise):
# never, the course runs offline.
USER_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    }
}


def start_lab(home: Path) -> Lab:
    """``jupyter lab`` on a fresh copy of the course, with nothing of this machine's Jupyter set-up
    (config, user settings, workspaces, runtime files) and a private work folder for answers."""
    course = course_copy(home / "course")
    settings = home / "jupyter-config" / "lab" / "user-settings"
    for name, values in USER_SETTINGS.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(json.dumps(values), encoding="utf-8")
    token = secrets.token_hex(16)
    port = free_port()
    env = dict(
        os.environ,
        MHA_COURSE_WORK_DIR=str(home / "my_work"),
        # the kernels import the copy's package, as a fresh clone's editable install would
        PYTHONPATH=os.pathsep.join(filter(None, [str(course), os.environ.get("PYTHONPATH")])),
        JUPYTER_CONFIG_DIR=str(home / "jupyter-config"),
        JUPYTER_DATA_DIR=str(home / "jupyter-data"),
        JUPYTER_RUNTIME_DIR=str(home / "jupyter-runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(home / "jupyter-config" / "lab" / "workspaces"),
        IPYTHONDIR=str(home / "ipython"),
    )
    command = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--no-browser",
        "--allow-root",
        "--ServerApp.ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",  # the port asked for, or a clear failure
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={course}",
        "--LabApp.news_url=None",  # offline: no news, no update check
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: the notebook's model
    ]
    log = home / "jupyterlab.log"
    with log.open("w", encoding="utf-8") as out:
        process = subprocess.Popen(
            command,
            cwd=course,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    lab = Lab(process, f"http://127.0.0.1:{port}", token, log, home)
    try:
        lab.wait_until_answering(SERVER_START)
    except BaseException:
        lab.stop()
        raise
    return lab


def keep_logs(lab: Lab) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for log in (lab.log, lab.console_log):
        if log.exists():
            shutil.copy2(log, ARTIFACTS / log.name)


@pytest.fixture(scope="module")
def lab(request, tmp_path_factory):
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium (.ci/browser-deps)")
    pytest.importorskip(
        "playwright.sync_api", reason="the playwright package is missing (.ci/browser-deps)"
    )
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    failed_before = request.session.testsfailed
    home = tmp_path_factory.mktemp("jupyterlab")
    try:
        lab = start_lab(home)
    except BaseException:
        if (home / "jupyterlab.log").exists():
            shutil.copy2(home / "jupyterlab.log", ARTIFACTS / "jupyterlab.log")
        raise
    try:
        yield lab
    finally:
        lab.stop()
        if request.session.testsfailed > failed_before:
            keep_logs(lab)
        shutil.rmtree(home, ignore_errors=True)  # the course copy and the browser profile


@pytest.fixture(scope="module")
def browser(lab):
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    try:
        context = playwright.chromium.launch_persistent_context(
            str(lab.home / "chromium-profile"),  # a fresh profile
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            viewport=VIEWPORT,
            timeout=PAGE_LOAD * 1000,
        )
        try:
            yield context
        finally:
            context.close()
    finally:
        playwright.stop()


@pytest.fixture
def page(browser, lab):
    """A new tab; afterwards it is closed and its notebook's kernel shut down."""
    tab = browser.new_page()
    try:
        yield tab
    finally:
        tab.close()
        with contextlib.suppress(OSError, ValueError):
            lab.shut_down_kernels()


# ---------------------------------------------------------------- the notebook, as JupyterLab holds it

# JavaScript run in the page. `window.jupyterapp` is JupyterLab itself: its notebook model says
# which cells ran and what they output, whichever cells the page has drawn so far.
PANEL = """
const panel = Array.from(window.jupyterapp.shell.widgets("main"))
    .find((widget) => widget.context && widget.context.path === path);
"""
KERNEL_IDLE = f"""(path) => {{
    {PANEL}
    const kernel = panel && panel.context.isReady && panel.sessionContext.session?.kernel;
    return !!kernel && kernel.connectionStatus === "connected" && kernel.status === "idle";
}}"""
CELLS = f"""(path) => {{
    {PANEL}
    return Array.from(panel.content.model.cells).map((cell, index) => ({{
        index,
        type: cell.type,
        source: cell.sharedModel.getSource(),
        count: cell.type === "code" ? cell.executionCount : null,
        running: cell.type === "code" && cell.executionState === "running",
        outputs: cell.type === "code" ? cell.outputs.toJSON() : [],
    }}));
}}"""
# Run All has finished when the kernel is idle and no cell is waiting, and either every code
# cell ran or one failed (the kernel then skips the cells after it).
RUN_FINISHED = f"""(path) => {{
    const cells = ({CELLS})(path).filter((cell) => cell.type === "code");
    const failed = cells.some((cell) => cell.outputs.some((o) => o.output_type === "error"));
    return ({KERNEL_IDLE})(path) && !cells.some((cell) => cell.running)
        && (failed || cells.every((cell) => cell.count !== null));
}}"""
SCROLL_TO_CELL = f"""([path, index]) => {{
    {PANEL}
    panel.content.activeCellIndex = index;
    return panel.content.scrollToItem(index, "center");
}}"""


@contextlib.contextmanager
def step(name: str, lab: Lab):
    """Name the step in the failure when a wait inside it runs out of time."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    start = time.monotonic()
    try:
        yield
    except PlaywrightTimeout as error:
        timed_out = str(error).splitlines()[0]
    else:
        print(f"{time.monotonic() - start:6.1f} s  {name}")  # shown with pytest -s
        return
    pytest.fail(
        f"step timed out: {name}\n{timed_out}\nJupyterLab's log ends:\n{lab.log_tail(15)}",
        pytrace=False,
    )


def output_text(output: dict) -> str:
    if output["output_type"] == "error":
        return f"{output['ename']}: {output['evalue']}"
    if output["output_type"] == "stream":
        return output["text"]
    return "".join(output.get("data", {}).get("text/plain", ""))


def problems(cells: list[dict]) -> list[str]:
    """Each code cell that did not run, and each output a learner would see as an error or a
    warning (JupyterLab shows stderr in red, like a traceback)."""
    found = []
    for cell in cells:
        if cell["type"] != "code":
            continue
        first_line = (cell["source"].splitlines() or [""])[0]
        where = f"cell {cell['index']} ({first_line!r})"
        if cell["count"] is None:
            found.append(f"{where} did not run")
        for output in cell["outputs"]:
            if output["output_type"] == "error":
                found.append(f"{where} failed: {output_text(output)}")
            elif output.get("name") == "stderr":
                found.append(f"{where} wrote to stderr: {output_text(output).strip()[:500]}")
    return found


def open_and_run_all(page, lab: Lab, path: str, limit: float) -> list[dict]:
    """Open ``path`` in a workspace of its own, clear the stored outputs (so what the page shows
    afterwards comes from this run), Run All from the Run menu and wait for the kernel."""
    page.on("console", lambda message: log_console(lab, path, message))
    page.on("pageerror", lambda error: log_console(lab, path, f"page error: {error}"))
    workspace = Path(path).stem
    with step(f"opening {path} in JupyterLab", lab):
        page.goto(
            f"{lab.url}/lab/workspaces/{workspace}/tree/{path}?token={lab.token}",
            timeout=PAGE_LOAD * 1000,
        )
        page.wait_for_function(
            f"(path) => !!window.jupyterapp && (() => {{ {PANEL} return !!panel; }})()",
            arg=path,
            timeout=PAGE_LOAD * 1000,
        )
    with step(f"starting the kernel of {path}", lab):
        page.wait_for_function(KERNEL_IDLE, arg=path, timeout=KERNEL_READY * 1000, polling=500)
    with step(f"clearing the outputs of {path} (Edit menu)", lab):
        click_menu(page, "Edit", "Clear Outputs of All Cells")
        page.wait_for_function(
            f"(path) => ({CELLS})(path).every((c) => c.count === null && !c.outputs.length)",
            arg=path,
            timeout=PAGE_LOAD * 1000,
        )
    with step(f"running all cells of {path} (Run menu, limit {limit} s)", lab):
        click_menu(page, "Run", "Run All Cells")
        page.wait_for_function(RUN_FINISHED, arg=path, timeout=limit * 1000, polling=500)
    return page.evaluate(CELLS, path)


def click_menu(page, menu: str, item: str) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{menu}$")).click()
    page.get_by_role("menuitem", name=item, exact=True).click()


def log_console(lab: Lab, path: str, message) -> None:
    text = message if isinstance(message, str) else f"{message.type}: {message.text}"
    with lab.console_log.open("a", encoding="utf-8") as out:
        out.write(f"[{Path(path).name}] {text}\n")


def cell_index(cells: list[dict], needle: str) -> int:
    found = [c["index"] for c in cells if c["type"] == "code" and needle in c["source"]]
    assert found, f"no code cell holds {needle!r}"
    return found[0]


def scroll_to_cell(page, path: str, index: int) -> None:
    page.evaluate(SCROLL_TO_CELL, [path, index])


# ---------------------------------------------------------------- the tests


def test_lesson_01_runs_and_shows_the_unsolved_check(page, lab):
    path = "notebooks/01_self_attention.ipynb"
    cells = open_and_run_all(page, lab, path, RUN_LESSON_01)
    found = problems(cells)
    assert not found, "lesson 01 in JupyterLab:\n" + "\n".join(found)

    check = cell_index(cells, "check_scaled_dot_product_attention(")
    with step("showing the check cell's ⏳ line on the page", lab):
        scroll_to_cell(page, path, check)
        line = page.locator(".jp-OutputArea-output").filter(has_text=UNSOLVED_CHECK)
        line.wait_for(state="visible", timeout=REDRAW * 1000)
    page.screenshot(path=ARTIFACTS / "01-lesson-01-after-run-all.png")
    assert "Replace `raise NotImplementedError`" in line.inner_text()
    # what the learner sees as errors: rendered stderr or tracebacks
    errors = page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
    assert errors.count() == 0, errors.all_inner_texts()


EXPLORER_STATE = """(explorer) => {
    const image = explorer.querySelector("img");
    return {
        src: image ? image.src : null,
        loaded: !!image && image.complete && image.naturalWidth > 0,
        text: explorer.querySelector(".widget-html-content")?.innerText ?? "",
    };
}"""


def redraw(page, lab, explorer, before: dict, change: str, act) -> dict:
    """Make ``change`` with ``act`` and wait for the kernel to send a new heatmap."""
    with step(f"redrawing the explorer's heatmap after {change}", lab):
        act()
        page.wait_for_function(
            f"([e, src]) => {{ const s = ({EXPLORER_STATE})(e); return s.loaded && s.src !== src; }}",
            arg=[explorer.element_handle(), before["src"]],
            timeout=REDRAW * 1000,
        )
    return explorer.evaluate(EXPLORER_STATE)


def test_lesson_05_attention_explorer_redraws_when_a_control_changes(page, lab):
    path = "notebooks/05_pretrained_encoder.ipynb"
    cells = open_and_run_all(page, lab, path, RUN_LESSON_05)
    found = problems(cells)
    assert not found, "lesson 05 in JupyterLab:\n" + "\n".join(found)

    cell = cell_index(cells, EXPLORER_CALL)
    with step("showing the attention explorer's controls and heatmap", lab):
        scroll_to_cell(page, path, cell)
        explorer = page.locator(".jp-OutputArea-output .widget-vbox").filter(
            has=page.locator(".widget-dropdown select")
        )
        explorer.wait_for(state="visible", timeout=REDRAW * 1000)
        explorer.scroll_into_view_if_needed(timeout=REDRAW * 1000)
        page.wait_for_function(
            f"(e) => ({EXPLORER_STATE})(e).loaded",
            arg=explorer.element_handle(),
            timeout=REDRAW * 1000,
        )
    assert explorer.locator(".widget-slider").count() >= 2, "the layer and head sliders"
    heatmap = explorer.locator("img")
    before = explorer.evaluate(EXPLORER_STATE)
    before_pixels = heatmap.screenshot()
    explorer.screenshot(path=ARTIFACTS / "05-explorer-before.png")

    query = explorer.locator(".widget-dropdown select")
    options = query.evaluate("(select) => Array.from(select.options, (option) => option.text)")
    chosen = query.evaluate("(select) => select.options[select.selectedIndex].text")
    other = options[(options.index(chosen) + 1) % len(options)]  # the next token
    after = redraw(
        page,
        lab,
        explorer,
        before,
        f"query {chosen!r} -> {other!r}",
        lambda: query.select_option(label=other),
    )
    token = re.split(r":\s", other, maxsplit=1)[1]  # the labels hold a no-break space
    assert f"{token} looks most at" in after["text"], after["text"]
    assert heatmap.screenshot() != before_pixels, "the heatmap's pixels did not change"
    explorer.screenshot(path=ARTIFACTS / "05-explorer-after-query.png")

    head = explorer.locator(".widget-slider").filter(has_text="head")
    readout = head.locator(".widget-readout")
    head_before = int(readout.inner_text())
    key, step_by = ("ArrowLeft", -1) if head_before > 0 else ("ArrowRight", 1)

    def move_the_head_slider():
        handle = head.locator(".noUi-handle")
        handle.focus()
        handle.press(key)

    after_head = redraw(
        page,
        lab,
        explorer,
        after,
        f"head {head_before} -> {head_before + step_by} ({key})",
        move_the_head_slider,
    )
    assert int(readout.inner_text()) == head_before + step_by
    assert after_head["src"] != after["src"]
    explorer.screenshot(path=ARTIFACTS / "05-explorer-after-head.png")
