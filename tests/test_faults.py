"""Faults at a run's folder: a damaged checkpoint, an unfinished run, a folder another run holds; each
ends in one line."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest
from faults_harness import (
    DAMAGE_RUN,
    ENV,
    HOLDER,
    Crash,
    cli_error,
    crash_after_step,
    damage,
    our_lines,
    write_config,
)
from reliability_harness import (
    assert_bit_identical,
    checkpoint_arrays,
    latest,
    results_of,
    snapshot,
)

from conftest import REPO


@pytest.fixture
def crashed_run(tmp_path, monkeypatch):
    """(config file, the crashed run's folder, the uninterrupted run's folder)."""
    from gcl_tf import train

    config = write_config(tmp_path, DAMAGE_RUN)
    assert train.main(["--config", config, "--output", str(tmp_path / "whole")]) == 0
    crash_after_step(monkeypatch, 14)
    with pytest.raises(Crash):
        train.main(["--config", config, "--output", str(tmp_path / "run")])
    monkeypatch.undo()
    return config, tmp_path / "run", tmp_path / "whole"


@pytest.mark.parametrize("how", ["truncated", "garbled"])
def test_resume_skips_a_damaged_newest_checkpoint_in_one_line(how, crashed_run, capsys, monkeypatch):
    from gcl_tf import train
    from gcl_tf.checkpoint import saved_checkpoints

    config, run, whole = crashed_run
    folder = run / "checkpoints"
    assert latest(run) == str(folder / "ckpt-12")
    assert (folder / "ckpt-10.index").exists()  # the one before is kept
    damage(str(folder / "ckpt-12"), how)

    # Resumed from ckpt-10 and stopped again after step 11: the damaged one is gone from the
    # folder and its index, so the next saves keep good checkpoints only.
    capsys.readouterr()
    crash_after_step(monkeypatch, 11)
    with pytest.raises(Crash):
        train.main(["--config", config, "--output", str(run), "--resume"])
    monkeypatch.undo()
    lines = capsys.readouterr().err.strip().splitlines()
    reason = "Read less bytes than requested" if how == "truncated" else "Checksum does not match"
    assert len(lines) == 1 and lines[0].startswith("warning: ckpt-12 does not restore (") and reason in lines[0], lines
    assert lines[0].endswith(": removed; resuming from ckpt-10, the newest checkpoint that restores")
    assert saved_checkpoints(str(run)) == [str(folder / "ckpt-10")]
    assert sorted(os.listdir(folder)) == ["checkpoint", "ckpt-10.data-00000-of-00001", "ckpt-10.index"]

    assert train.main(["--config", config, "--output", str(run), "--resume"]) == 0
    assert capsys.readouterr().err == ""
    assert sorted(os.listdir(folder)) == sorted(os.listdir(whole / "checkpoints"))  # the last two, no third
    resumed, uninterrupted = results_of(run), results_of(whole)
    assert resumed["resumed_from_step"] == 10
    assert resumed["accuracy_matrix"] == uninterrupted["accuracy_matrix"]
    assert_bit_identical(checkpoint_arrays(latest(run)), checkpoint_arrays(latest(whole)))


def test_resume_past_a_damaged_checkpoint_says_so_in_one_line_and_keeps_the_last_two(crashed_run):
    """The command line, as a user runs it: the one warning line and nothing of TensorFlow's
    (its deprecation notice of the index's update), and the run ends with the last two
    checkpoints, the one it resumed from deleted in its turn."""
    config, run, whole = crashed_run
    damage(str(run / "checkpoints" / "ckpt-12"), "truncated")
    proc = subprocess.run([sys.executable, "-m", "gcl_tf.train", "--config", config, "--output", str(run), "--resume",
                           "--set", "train.verbose=0"], capture_output=True, text=True, cwd=REPO, env=ENV, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = our_lines(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("warning: ckpt-12 does not restore ("), proc.stderr
    assert sorted(os.listdir(run / "checkpoints")) == sorted(os.listdir(whole / "checkpoints"))


def test_resume_with_no_checkpoint_that_restores_is_one_line_naming_them(crashed_run, capsys):
    from gcl_tf import train

    config, run, _ = crashed_run
    damage(str(run / "checkpoints" / "ckpt-12"), "truncated")
    damage(str(run / "checkpoints" / "ckpt-10"), "garbled")
    def files():
        return {name: value for name, value in snapshot(run).items() if name != "gcl_tf.lock"}

    before = files()
    message = cli_error(train.main, ["--config", config, "--output", str(run), "--resume"], capsys)
    assert "no checkpoint of" in message and "restores" in message
    assert "ckpt-12 (Read less bytes than requested)" in message and "ckpt-10 (" in message, message
    assert "Checksum does not match" in message
    assert files() == before


@pytest.mark.slow  # four short runs
def test_a_folder_that_holds_an_unfinished_run_is_refused_without_resume_or_overwrite(tmp_path, monkeypatch, capsys):
    """A run stopped at step 14 (checkpoints 10 and 12), then the same command without --resume:
    one line naming --resume and --overwrite, exit 2, every file as it was (the Python API
    refuses too); --resume goes on from step 12; --overwrite starts again."""
    import gcl_tf
    from gcl_tf import train
    from gcl_tf.errors import UserError

    config = write_config(tmp_path, DAMAGE_RUN)
    run = tmp_path / "run"
    crash_after_step(monkeypatch, 14)
    with pytest.raises(Crash):
        train.main(["--config", config, "--output", str(run)])
    monkeypatch.undo()
    before = snapshot(run)
    message = cli_error(train.main, ["--config", config, "--output", str(run)], capsys)
    assert "holds an unfinished run (its checkpoint of step 12 in" in message, message
    assert "--resume" in message and "--overwrite" in message
    assert snapshot(run) == before
    with pytest.raises(UserError, match="unfinished run.*resume=True.*overwrite=True"):  # the API's own words
        gcl_tf.run(config, output_dir=str(run), verbose=0)
    unlocked = lambda files: {name: value for name, value in files.items() if name != "gcl_tf.lock"}  # noqa: E731
    assert unlocked(snapshot(run)) == unlocked(before)  # the API checks under the lock: its pid there, nothing else

    assert train.main(["--config", config, "--output", str(run), "--resume"]) == 0
    assert results_of(run)["resumed_from_step"] == 12
    (run / "results.json").unlink()  # a run whose results were lost: its learner and checkpoints are left
    assert "unfinished run" in cli_error(train.main, ["--config", config, "--output", str(run)], capsys)
    assert train.main(["--config", config, "--output", str(run), "--overwrite"]) == 0
    assert results_of(run)["resumed_from_step"] is None


def test_what_counts_as_an_unfinished_run(tmp_path):
    """Checkpoints, or a learner (or figures' arrays) without results.json: what a fresh run would
    delete. A folder with only a config (a run killed before its first checkpoint: nothing
    trained) or a lock is free; a finished run has its own message."""
    from gcl_tf import run_layout
    from gcl_tf.train import check_output

    folder = tmp_path / "run"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "config.yaml").write_text("seed: 0\n")
    (folder / run_layout.LOCK_FILE).write_text("")
    assert run_layout.unfinished_run(str(folder)) is None
    check_output(str(folder), overwrite=False)
    for name in ("ckpt-3.index", "ckpt-30.index", "ckpt-7.index"):
        (folder / "checkpoints" / name).write_text("")
    assert "step 30" in run_layout.unfinished_run(str(folder))
    with pytest.raises(Exception, match="unfinished run .*step 30.*--resume.*--overwrite"):
        check_output(str(folder), overwrite=False)
    check_output(str(folder), overwrite=True)
    check_output(str(folder), overwrite=False, resume=True)
    shutil.rmtree(folder / "checkpoints")
    (folder / "learner.keras").write_text("")
    assert "learner.keras, without results.json" in run_layout.unfinished_run(str(folder))
    (folder / "results.json").write_text("{}")
    assert run_layout.unfinished_run(str(folder)) is None
    with pytest.raises(Exception, match="results.json exists; pass --overwrite"):
        check_output(str(folder), overwrite=False)


def test_a_second_run_in_a_held_folder_is_refused_naming_the_holder(tmp_path, capsys):
    """A real second process holds the folder; train refuses (fresh, --overwrite, --resume) and
    leaves the folder as it was. Killed with SIGKILL, the holder leaves no stale lock."""
    from gcl_tf import train

    config = write_config(tmp_path, {"benchmark": {"num_tasks": 1, "samples_per_task": 20}})
    out = tmp_path / "run"
    assert train.main(["--config", config, "--output", str(out)]) == 0
    (out / "results.json").unlink()  # as a run still going leaves it
    (tmp_path / "holder.py").write_text(HOLDER)
    holder = subprocess.Popen([sys.executable, str(tmp_path / "holder.py"), str(out)], stdout=subprocess.PIPE,
                              text=True, cwd=REPO, env=ENV)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = snapshot(out)
        for extra in ([], ["--overwrite"], ["--resume"]):
            message = cli_error(train.main, ["--config", config, "--output", str(out), *extra], capsys)
            assert f"{out} is in use by another run (pid {holder.pid} holds" in message, message
            assert "choose another --output" in message
        assert snapshot(out) == before
    finally:
        holder.kill()
        holder.wait()
    assert holder.returncode == -signal.SIGKILL
    assert train.main(["--config", config, "--output", str(out), "--resume"]) == 0  # no stale lock
    assert (out / "results.json").exists()


def test_tune_and_the_paper_suite_refuse_a_held_folder(tmp_path, monkeypatch, capsys):
    from gcl_tf import faults, train, tune
    from gcl_tf.benchmark import paper

    from tiny_suite import suite_args, write_configs

    monkeypatch.setattr(train, "run", lambda *a, **k: pytest.fail("a run started in a held folder"))
    for name in ("KERASTUNER_TUNER_ID", "KERASTUNER_ORACLE_IP", "KERASTUNER_ORACLE_PORT"):
        monkeypatch.delenv(name, raising=False)
    config = write_config(tmp_path, {"tune": {"space": {"train.learning_rate": [0.01, 0.1]}}})
    search, suite = tmp_path / "search", tmp_path / "suite"
    with faults.exclusive(str(search)), faults.exclusive(str(suite)):
        message = cli_error(tune.main, ["--config", config, "--output", str(search)], capsys)
        assert f"{search} is in use by another run (pid {os.getpid()} holds" in message
        message = cli_error(tune.main, ["--config", config, "--output", str(search), "--overwrite"], capsys)
        assert "is in use by another run" in message
        args = suite_args(write_configs(str(tmp_path / "configs")), str(suite))
        message = cli_error(paper.main, args, capsys)
        assert f"{suite} is in use by another run (pid {os.getpid()} holds" in message
    assert os.listdir(search) == ["gcl_tf.lock"] and os.listdir(suite) == ["gcl_tf.lock"]


def test_tune_overwrite_keeps_the_lock_file_it_holds(tmp_path, monkeypatch):
    """KerasTuner's own overwrite deletes the folder, lock file included (a second search could
    then lock a new file): the search clears the folder itself, around its lock."""
    from gcl_tf import faults, run_layout, tune

    folder = tmp_path / "search"
    folder.mkdir()
    (folder / "search.json").write_text("{}")
    (folder / "trial_0").mkdir()
    (folder / run_layout.LOCK_FILE).write_text("")
    inode = (folder / run_layout.LOCK_FILE).stat().st_ino
    with faults.exclusive(str(folder)):
        tune._clear(str(folder))
        assert os.listdir(folder) == [run_layout.LOCK_FILE]
        assert (folder / run_layout.LOCK_FILE).stat().st_ino == inode

