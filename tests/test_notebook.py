"""What the set-up cell starts: exercise cells watched and saved, answers loaded in later
lessons, and the fallback to the reference."""

from pathlib import Path

import pytest
import torch

from mha_course import checks, reference, work
from mha_course.exercises import yours_or_reference
from mha_course.notebook import after_exercise_cell, load_your_work
from mha_course.work import last_run, save_answer


@pytest.fixture(autouse=True)
def fresh_cell_runs(monkeypatch):
    """Each test starts with no exercise cell run, and leaves none behind for other tests."""
    monkeypatch.setattr(work, "_LAST_RUNS", {})


GOOD_SOFTMAX = """# exercise: softmax
def softmax(scores):
    return torch.softmax(scores, dim=-1)
"""
WRONG_SOFTMAX = """# exercise: softmax
def softmax(scores):
    return torch.softmax(scores, dim=0)
"""


def test_an_exercise_cell_that_ran_is_saved_and_remembered(tmp_path, monkeypatch):
    monkeypatch.setenv("MHA_COURSE_WORK_DIR", str(tmp_path))
    after_exercise_cell("x = 1")
    after_exercise_cell(GOOD_SOFTMAX)
    assert (tmp_path / "softmax.py").read_text() == GOOD_SOFTMAX
    assert last_run("softmax").succeeded and last_run("softmax").error is None


def test_a_cell_that_failed_is_remembered_and_not_saved(tmp_path, monkeypatch):
    monkeypatch.setenv("MHA_COURSE_WORK_DIR", str(tmp_path))
    broken = "# exercise: LayerNorm\nclass LayerNorm(:\n"
    try:
        compile(broken, "<cell>", "exec")
    except SyntaxError as error:
        after_exercise_cell(broken, error)
    run = last_run("LayerNorm")
    assert not run.succeeded and run.error.startswith("SyntaxError") and "(line 2)" in run.error
    assert not (tmp_path / "LayerNorm.py").exists()


SKELETON_SOFTMAX = f"# exercise: softmax\ndef softmax(scores):\n    {work.TODO}\n"


def run_cell(source: str, namespace: dict) -> None:
    """What the kernel does with an exercise cell: run it, then the cell hook."""
    try:
        exec(compile(source, "<cell>", "exec"), namespace)
    except Exception as error:
        after_exercise_cell(source, error, namespace)
    else:
        after_exercise_cell(source, None, namespace)


def test_a_skeleton_run_uses_the_answer_saved_earlier(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MHA_COURSE_WORK_DIR", str(tmp_path))
    namespace = {"torch": torch}
    run_cell(GOOD_SOFTMAX, namespace)
    namespace = {"torch": torch}  # a fresh kernel: the lesson re-run from the top
    run_cell(SKELETON_SOFTMAX, namespace)
    assert (tmp_path / "softmax.py").read_text() == GOOD_SOFTMAX  # never replaced by a skeleton
    said = capsys.readouterr().out
    assert said.count("\n") == 1, said  # one line
    assert f"saved in {tmp_path.as_posix()}/softmax.py runs in place" in said
    assert f"`%load {tmp_path.as_posix()}/softmax.py`" in said
    torch.testing.assert_close(namespace["softmax"](torch.zeros(2)), torch.tensor([0.5, 0.5]))
    # the check and the cells below see the learner's answer
    assert (
        yours_or_reference(checks.check_softmax, namespace["softmax"], reference.softmax)
        is (namespace["softmax"])
    )


def test_the_saved_answer_runs_in_place_with_a_relative_work_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("MHA_COURSE_WORK_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    save_answer(GOOD_SOFTMAX)
    run_cell(SKELETON_SOFTMAX, {"torch": torch})
    said = capsys.readouterr().out
    assert "saved in my_work/softmax.py runs in place" in said
    assert "`%load my_work/softmax.py`" in said


@pytest.mark.parametrize(
    "saved, problem",
    [
        ("# exercise: softmax\ndef softmax(scores:\n    pass\n", "did not run (SyntaxError"),
        ("# exercise: softmax\nimport no_such_module_here\n", "did not run (ModuleNotFoundError"),
        ("# exercise: softmax\ndef soft_max(scores):\n    return scores\n", "defines no softmax"),
    ],
)
def test_a_saved_answer_that_does_not_run_leaves_the_skeleton(
    saved, problem, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("MHA_COURSE_WORK_DIR", str(tmp_path))
    (tmp_path / "softmax.py").write_text(saved)
    namespace = {"torch": torch, "kept": 1}
    run_cell(SKELETON_SOFTMAX, namespace)
    skeleton = namespace["softmax"]
    said = capsys.readouterr().out
    assert said.count("\n") == 1 and problem in said and "%load" in said, said
    assert set(namespace) == {"torch", "kept", "softmax", "__builtins__"}  # nothing else defined
    with pytest.raises(NotImplementedError):
        skeleton(torch.zeros(2))
    assert (tmp_path / "softmax.py").read_text() == saved


LOADED = "# %load my_work/softmax.py\n"


def test_a_cell_restored_with_load_is_saved_without_the_load_line(tmp_path, monkeypatch):
    monkeypatch.setenv("MHA_COURSE_WORK_DIR", str(tmp_path))
    edited = LOADED + GOOD_SOFTMAX.replace("dim=-1", "-1")
    run_cell(edited, {"torch": torch})
    assert (tmp_path / "softmax.py").read_text() == GOOD_SOFTMAX.replace("dim=-1", "-1")
    assert last_run("softmax").succeeded


def test_a_loaded_cell_that_does_not_run_makes_its_check_say_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MHA_COURSE_WORK_DIR", str(tmp_path))
    namespace = {"torch": torch}
    run_cell(GOOD_SOFTMAX, namespace)
    run_cell(LOADED + GOOD_SOFTMAX.replace("(scores)", "(scores"), namespace)  # a syntax error
    assert not last_run("softmax").succeeded
    with pytest.raises(checks.ExerciseFailure, match="did not run: SyntaxError"):
        checks.check_softmax(namespace["softmax"])
    assert (tmp_path / "softmax.py").read_text() == GOOD_SOFTMAX


def test_a_loaded_earlier_version_becomes_the_answer_once_run(tmp_path, monkeypatch):
    monkeypatch.setenv("MHA_COURSE_WORK_DIR", str(tmp_path))
    save_answer(WRONG_SOFTMAX)
    save_answer(GOOD_SOFTMAX)
    [earlier] = work.history("softmax")
    assert earlier.read_text() == WRONG_SOFTMAX
    run_cell(f"# %load {earlier.as_posix()}\n" + earlier.read_text(), {"torch": torch})
    assert (tmp_path / "softmax.py").read_text() == WRONG_SOFTMAX
    assert [p.read_text() for p in work.history("softmax")] == [WRONG_SOFTMAX, GOOD_SOFTMAX]


def test_load_your_work_uses_yours_when_it_passes(tmp_path, capsys):
    save_answer(GOOD_SOFTMAX, tmp_path)
    work = load_your_work(tmp_path)
    assert work.softmax is not reference.softmax
    assert torch.allclose(work.softmax(torch.zeros(2)), torch.tensor([0.5, 0.5]))
    out = capsys.readouterr().out
    assert "softmax" in out and "yours ✅" in out
    assert work.scaled_dot_product_attention is reference.scaled_dot_product_attention


def test_load_your_work_falls_back_when_yours_is_wrong_or_broken(tmp_path, capsys):
    save_answer(WRONG_SOFTMAX, tmp_path)
    (tmp_path / "scaled_dot_product_attention.py").write_text(
        "# exercise: scaled_dot_product_attention\n1/0\n"
    )
    work = load_your_work(tmp_path)
    assert work.softmax is reference.softmax
    assert work.scaled_dot_product_attention is reference.scaled_dot_product_attention
    out = capsys.readouterr().out
    assert "softmax                        course reference (yours: fails its check)" in out
    assert "(yours: raises ZeroDivisionError)" in out


def test_yours_or_reference(capsys):
    def skeleton(scores):
        raise NotImplementedError

    def wrong(scores):
        return scores

    assert (
        yours_or_reference(checks.check_softmax, skeleton, reference.softmax) is reference.softmax
    )
    assert "not done yet" in capsys.readouterr().out
    assert yours_or_reference(checks.check_softmax, wrong, reference.softmax) is reference.softmax
    assert "does not pass check_softmax" in capsys.readouterr().out

    def right(scores):
        return torch.softmax(scores, -1)

    assert yours_or_reference(checks.check_softmax, right, reference.softmax) is right


def test_load_your_work_lists_only_earlier_lessons(tmp_path, capsys, monkeypatch):
    from mha_course import notebook

    monkeypatch.setattr(notebook, "on_colab", lambda: False)  # a laptop (CI's Colab replica is not)
    work = load_your_work(tmp_path, before="01")
    out = capsys.readouterr().out
    assert "softmax" in out and "scaled_dot_product_attention" not in out
    assert "On Colab" not in out  # on a laptop: no word about Colab
    assert work.scaled_dot_product_attention is reference.scaled_dot_product_attention


# ---------------------------------------------------------------- Colab, with a stand-in for it


@pytest.fixture
def colab(tmp_path, monkeypatch):
    """A stand-in for Colab: ``google.colab.drive.mount(path)`` puts the learner's Drive (a
    temporary folder that outlives every "machine") at ``path/MyDrive``, as Colab does after
    asking for permission; the mount point is a temporary folder too. Yields the mount calls."""
    import sys
    import types

    from mha_course import notebook

    storage, mounts = tmp_path / "the learner's Drive", []
    storage.mkdir()

    def mount(mountpoint, force_remount=False):
        mounts.append(mountpoint)
        Path(mountpoint).mkdir(parents=True, exist_ok=True)
        (Path(mountpoint) / "MyDrive").symlink_to(storage, target_is_directory=True)

    google, colab, drive = (types.ModuleType(n) for n in ("google", "google.colab", "drive"))
    drive.mount, colab.drive, google.colab = mount, drive, colab
    for name, module in (
        ("google", google),
        ("google.colab", colab),
        ("google.colab.drive", drive),
    ):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(notebook, "DRIVE", tmp_path / "content" / "drive")
    return mounts


@pytest.fixture
def new_kernel(monkeypatch):
    """A fresh kernel: no work folder named by the environment and none chosen yet (both put
    back as they were after the test). Call it again for the next kernel."""

    def fresh() -> None:
        monkeypatch.delenv(work.WORK_DIR_VARIABLE, raising=False)
        monkeypatch.setattr(work, "_CHOSEN", [])

    fresh()
    return fresh


def test_load_your_work_on_colab_points_at_the_drive(tmp_path, colab, capsys):
    load_your_work(tmp_path / "my_work", before="01")
    out = capsys.readouterr().out
    assert "On Colab every notebook runs on a machine of its own" in out
    assert 'start(seed=0, work_dir="drive")' in out


def test_answers_on_the_drive_reach_a_notebook_on_another_machine(
    tmp_path, colab, new_kernel, capsys
):
    import shutil

    from mha_course.notebook import start

    mountpoint = tmp_path / "content" / "drive"
    folder = mountpoint / "MyDrive" / "mha-course" / "my_work"
    start(seed=0, work_dir="drive")  # lesson 00 on one Colab machine
    assert colab == [str(mountpoint)]
    assert work.work_dir() == folder and folder.is_dir()
    assert capsys.readouterr().out.strip().endswith(f"answers in {folder}")
    after_exercise_cell(GOOD_SOFTMAX)
    start(seed=0, work_dir="drive")  # the set-up cell run again: mounted once
    assert len(colab) == 1

    shutil.rmtree(mountpoint.parent)  # lesson 01 on another machine: nothing on its disk
    new_kernel()
    start(seed=0, work_dir="drive")
    assert len(colab) == 2
    loaded = load_your_work(before="01")
    out = capsys.readouterr().out
    assert "softmax                        yours ✅" in out
    assert "soft_lookup                    course reference (yours: not found)" in out
    assert "Answers are read from your Google Drive, in MyDrive/mha-course/my_work." in out
    assert loaded.softmax is not reference.softmax


def test_start_with_a_folder_keeps_answers_there(tmp_path, new_kernel, capsys):
    from mha_course.notebook import start

    start(seed=0, work_dir=tmp_path / "answers")
    after_exercise_cell(GOOD_SOFTMAX)
    assert (tmp_path / "answers" / "softmax.py").read_text() == GOOD_SOFTMAX
    start(seed=0, work_dir=str(tmp_path / "other"))  # chosen again: the new folder
    assert work.work_dir() == tmp_path / "other"
    with pytest.raises(TypeError, match="work_dir must be"):
        start(seed=0, work_dir=3)


def test_the_drive_off_colab_is_a_clear_error(new_kernel, capsys):
    from mha_course.notebook import start

    with pytest.raises(ValueError, match="works only on Colab"):
        start(seed=0, work_dir="drive")
    assert capsys.readouterr().out == ""  # nothing started


def test_a_work_folder_named_by_the_environment_wins(tmp_path, monkeypatch, capsys):
    from mha_course.notebook import start

    monkeypatch.setenv(work.WORK_DIR_VARIABLE, str(tmp_path / "private"))
    start(seed=0, work_dir=tmp_path / "mine")
    assert work.work_dir() == tmp_path / "private" and not (tmp_path / "mine").exists()


def test_expect_prints_whether_the_statement_holds(capsys):
    from mha_course.notebook import expect

    expect("pre-LN converges (loss < 0.1)", True)
    expect("post-LN stalls (loss > 1)", False)
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "✔ pre-LN converges (loss < 0.1)",
        "✘ not so on this run: post-LN stalls (loss > 1)",
    ]


def test_a_check_run_before_its_exercise_cell_says_which_cell_to_run(tmp_path, monkeypatch, capsys):
    """After a restart, ``check_softmax(softmax)`` run before the exercise cell: the NameError
    names the cell to run, not a bare traceback; another undefined name keeps IPython's own."""
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setenv(work.WORK_DIR_VARIABLE, str(tmp_path))
    shell = InteractiveShell.instance()
    try:
        shell.run_cell("from mha_course.notebook import start\ndevice = start(seed=0)")
        shell.user_ns.pop("softmax", None)
        capsys.readouterr()
        result = shell.run_cell(
            "from mha_course.checks import check_softmax\ncheck_softmax(softmax)"
        )
        assert isinstance(result.error_in_exec, NameError)
        shown = "".join(capsys.readouterr())
        assert "`softmax` is not defined yet" in shown
        assert "`# exercise: softmax` (lesson 00) first" in shown
        assert "Traceback" not in shown and "check_softmax(softmax)" not in shown
        shell.run_cell("not_an_exercise + 1")
        shown = "".join(capsys.readouterr())
        assert "NameError" in shown and "exercise cell" not in shown
    finally:
        shell.set_custom_exc((), None)
        InteractiveShell.clear_instance()
