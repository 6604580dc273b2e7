"""``python -m mha_course.bench``: its options, and a quick run end to end."""

import json
import subprocess
import sys

import pytest

from mha_course import bench


@pytest.mark.parametrize(
    "argv, complaint",
    [
        (["--lengths", "0,64"], "--lengths: expected positive integers"),
        (["--modes", "sideways"], "--modes: modes are 'forward' and 'forward+backward'"),
        (["--dtypes", "float17"], "--dtypes: expected floating dtypes"),
        (["--budget", "-3"], "--budget: expected a positive number of seconds or 'none'"),
    ],
)
def test_cli_rejects_bad_options_with_a_message(argv, complaint, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main(argv)
    assert exit_.value.code == 2 and complaint in capsys.readouterr().err


def test_cli_quick_prints_a_table_and_a_summary_writes_json_and_nothing_on_stderr(tmp_path):
    out = tmp_path / "quick.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mha_course.bench",
            "--quick",
            "--lengths",
            "16",
            "--threads",
            "1",
            "--budget",
            "none",
            "--min-run-time",
            "0.002",
            "--max-run-time",
            "0.02",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "implementation" in done.stdout and "× torch" in done.stdout
    assert "12/12" in done.stdout  # the progress bar
    rows = [
        line
        for line in done.stdout.splitlines()
        if line.startswith(("torch MHA", "package MHA", "SDPA"))
    ]
    assert len(rows) >= 6
    assert "not measured:\n  unsupported on this device:" in done.stdout
    data = json.loads(out.read_text())
    assert data["environment"]["threads"] == 1
    assert {r["length"] for r in data["results"]} == {16}
    assert {r["status"] for r in data["results"]} == {"ok", "unsupported"}
