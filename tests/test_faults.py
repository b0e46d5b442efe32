"""Faults a long run meets (docs/reliability.md): a damaged checkpoint, a second run in the same
folder, preemption (SIGTERM, Ctrl-C), a full disk, more memory than the machine has. Each ends
in one line: exit status 2, or 128 + the signal for a stop that saved a checkpoint."""
from __future__ import annotations

import errno
import glob
import os
import re
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
import yaml
from test_reliability import (
    assert_bit_identical,
    checkpoint_arrays,
    completed_run,
    config_file,
    latest,
    results_of,
    snapshot,
)

from conftest import REPO, TINY, _deep_update

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
NOT_OURS = ("E0000 ", "W0000 ", "WARNING: All log messages")  # TensorFlow's device probing


def our_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip() and not line.startswith(NOT_OURS)]


def write_config(folder, update=None, name="config.yaml") -> str:
    path = os.path.join(str(folder), name)
    with open(path, "w") as handle:
        yaml.safe_dump(_deep_update(TINY, update or {}), handle)
    return path


def cli_error(main, argv, capsys) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


class Crash(Exception):
    pass


# ----------------------------------------------------------------------------- 1. a damaged checkpoint
# 2 tasks x 10 steps, a checkpoint every 3 steps and at each task end: a crash after step 14
# leaves the last two, ckpt-10 (task 1's end) and ckpt-12.
DAMAGE_RUN = {"benchmark": {"num_tasks": 2}, "train": {"checkpoint_every": 3}}


def crash_after_step(monkeypatch, step):
    from gcl_tf import callbacks

    after_batch = callbacks.PeriodicCheckpoint.on_train_batch_end

    def crash(self, batch, logs=None):
        if self.step + self._per_call == step:
            raise Crash()
        return after_batch(self, batch, logs)

    monkeypatch.setattr(callbacks.PeriodicCheckpoint, "on_train_batch_end", crash)


def damage(prefix, how):
    data = prefix + ".data-00000-of-00001"
    raw = open(data, "rb").read()
    if how == "truncated":
        raw = raw[: len(raw) // 2]
    else:  # garbled: the bytes are all there, some of them wrong
        middle = len(raw) // 2
        raw = raw[:middle] + bytes(b ^ 0xFF for b in raw[middle:middle + 64]) + raw[middle + 64:]
    open(data, "wb").write(raw)


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
    with pytest.raises(UserError, match="unfinished run.*resume=True.*overwrite=True"):  # the API's own words
        gcl_tf.run(config, output_dir=str(run), verbose=0)
    assert snapshot(run) == before

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


# ----------------------------------------------------------------------------- 2. one run per folder
HOLDER = """\
import sys, time
from gcl_tf.faults import exclusive
with exclusive(sys.argv[1]):
    print("held", flush=True)
    time.sleep(120)
"""


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


# ----------------------------------------------------------------------------- 3. preemption
# ER, 2 tasks x 5 epochs x 10 batches (50 steps a task), no periodic checkpoint: the only
# checkpoint inside a task is the one the signal asks for.
PREEMPTED_RUN = """\
seed: 0
benchmark: {name: permuted, dataset: digits, source: digits, num_tasks: 2, samples_per_task: 100,
            test_samples_per_task: 60}
method: {name: er, memory_size: 30}
model: {backbone: mlp, hidden_size: 16}
train: {batch_size: 10, epochs: 5, optimizer: adam, learning_rate: 0.003, verbose: 2, log_every: 0,
        checkpoint_every: 0}
eval: {batch_size: 64}
"""
STEPS = 50


def train_process(config, out, *extra, **popen):
    argv = [sys.executable, "-m", "gcl_tf.train", "--config", str(config), "--output", str(out), "--deterministic",
            *extra]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=ENV,
                            **popen)


def resume_as_printed(command: str, folder, monkeypatch) -> int:
    """The printed ``python -m gcl_tf.train ...`` command, word for word, through the command's main
    in this process, from ``folder`` (a TensorFlow start-up fewer than a process of its own)."""
    from gcl_tf import train

    words = command.split()
    assert words[:3] == ["python", "-m", "gcl_tf.train"], command
    monkeypatch.chdir(folder)
    return train.main(words[3:])


@pytest.fixture(scope="module")
def preempted_config(tmp_path_factory):
    return config_file(tmp_path_factory, PREEMPTED_RUN, "gcl.yaml")


@pytest.fixture(scope="module")
def uninterrupted(preempted_config, tmp_path_factory):
    return completed_run(preempted_config, tmp_path_factory.mktemp("uninterrupted") / "run")


@pytest.mark.slow  # real processes, real signals
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_saves_at_the_next_step_and_resume_is_bit_identical(signum, preempted_config, uninterrupted,
                                                                     tmp_path, monkeypatch):
    out = tmp_path / "run"
    proc = train_process(preempted_config, out)
    for line in proc.stdout:  # task 1 is done and saved; task 2 is training
        if line.startswith("Task 2/2"):
            proc.send_signal(signum)
            break
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 128 + signum, err[-3000:]
    lines = our_lines(err)
    assert len(lines) == 1, lines
    name = signal.Signals(signum).name
    assert lines[0].startswith(f"stopped: {name} received: stopped at step "), lines[0]
    command = (f"python -m gcl_tf.train --config {preempted_config} --output {out} --deterministic --resume")
    assert lines[0].endswith(f"resume with: {command}"), lines[0]
    assert not (out / "results.json").exists()

    # The checkpoint of the step the signal interrupted: inside task 2, not one of its ends.
    path = latest(out)
    saved = checkpoint_arrays(path)
    task, batch = (int(saved[f"progress/{k}/.ATTRIBUTES/VARIABLE_VALUE"]) for k in ("task", "batch"))
    assert task == 1 and 0 < batch < STEPS and path.endswith(f"ckpt-{STEPS + batch}"), (path, task, batch)
    assert f"at step {STEPS + batch} (task 2/2, batch {batch})" in lines[0]

    if signum != signal.SIGTERM:  # the resume is the same whichever signal stopped the run
        return
    assert resume_as_printed(command, REPO, monkeypatch) == 0
    resumed, whole = results_of(out), results_of(uninterrupted)
    assert resumed["resumed_from_step"] == STEPS + batch
    assert resumed["accuracy_matrix"] == whole["accuracy_matrix"]
    assert_bit_identical(checkpoint_arrays(latest(out)), checkpoint_arrays(latest(uninterrupted)))


@pytest.mark.slow  # real processes
@pytest.mark.parametrize("stop", ["ctrl-c", "kill -9"])
def test_resume_with_a_relative_output_from_another_directory(stop, preempted_config, uninterrupted, tmp_path,
                                                              monkeypatch):
    """As people type it: ``--config gcl.yaml --output runs/qs`` in their own folder; Ctrl-C (or
    kill -9 after the first task's checkpoint), then the resume command the run printed (or the
    same command with --resume) finishes the run with the uninterrupted run's results."""
    shutil.copy(preempted_config, tmp_path / "er.yaml")
    argv = [sys.executable, "-m", "gcl_tf.train", "--config", "er.yaml", "--output", "runs/qs", "--deterministic"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=ENV)
    for line in proc.stdout:  # task 1 is done and saved; task 2 is training
        if line.startswith("Task 2/2"):
            proc.send_signal(signal.SIGINT if stop == "ctrl-c" else signal.SIGKILL)
            break
    _, err = proc.communicate(timeout=600)
    command = "python -m gcl_tf.train --config er.yaml --output runs/qs --deterministic --resume"
    if stop == "ctrl-c":
        assert proc.returncode == 128 + signal.SIGINT, err[-3000:]
        [line] = our_lines(err)
        assert line.endswith(f"resume with: {command}"), line
    else:
        assert proc.returncode == -signal.SIGKILL
    assert (tmp_path / "runs" / "qs" / "checkpoints").is_dir() and not (tmp_path / "runs" / "qs" / "runs").exists()
    assert resume_as_printed(command, tmp_path, monkeypatch) == 0
    resumed = results_of(tmp_path / "runs" / "qs")
    assert resumed["resumed_from_step"] >= STEPS
    assert resumed["accuracy_matrix"] == results_of(uninterrupted)["accuracy_matrix"]


def sigterm_after_step(monkeypatch, step):
    """A real SIGTERM to this process right after training step ``step`` (of a run's task)."""
    from gcl_tf import callbacks

    after_batch = callbacks.PeriodicCheckpoint.on_train_batch_end

    def on_train_batch_end(self, batch, logs=None):
        if self.step + self._per_call == step:
            os.kill(os.getpid(), signal.SIGTERM)
        return after_batch(self, batch, logs)

    monkeypatch.setattr(callbacks.PeriodicCheckpoint, "on_train_batch_end", on_train_batch_end)


def stopped_line(main, argv, capsys) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 128 + signal.SIGTERM
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stopped: SIGTERM received: stopped at step "), lines
    return lines[0]


def test_a_stopped_search_and_suite_go_on_from_the_stopped_runs_checkpoint(tmp_path, monkeypatch, capsys):
    """SIGTERM during a tune trial or a paper suite's run: one line, exit 143; the same command
    again resumes that run from its checkpoint (not from its start). Relative folders, as people
    type them, from a working directory that is not the repository."""
    from gcl_tf import train, tune
    from gcl_tf.benchmark import paper

    from tiny_suite import write_configs

    for name in ("KERASTUNER_TUNER_ID", "KERASTUNER_ORACLE_IP", "KERASTUNER_ORACLE_PORT"):
        monkeypatch.delenv(name, raising=False)
    config = write_config(tmp_path, {"benchmark": {"num_tasks": 2, "samples_per_task": 50},
                                     "train": {"checkpoint_every": 0},
                                     "tune": {"space": {"train.learning_rate": [0.1]}}})
    write_configs(str(tmp_path / "configs"))
    monkeypatch.chdir(tmp_path)
    suite_argv = ["--config-dir", "configs", "--benchmarks", "tiny_digits",
                  "--methods", "finetune", "--seeds", "1", "--studies", "main", "--output", "results/suite"]
    commands = {
        "tune": (tune.main, ["--config", os.path.basename(config), "--output", "runs/search"],
                 "run the same command again (without --overwrite) to resume the search"),
        "paper": (paper.main, suite_argv, "run the same command again to resume the suite"),
    }
    runs = {"tune": os.path.join(tmp_path, "runs", "search", "trial_*"),
            "paper": os.path.join(tmp_path, "results", "suite", "runs", "tiny_digits", "finetune", "seed0")}
    for name, (main, argv, hint) in commands.items():
        with monkeypatch.context() as patch:
            sigterm_after_step(patch, 7)  # in task 2 (a task is 4 to 6 steps)
            line = stopped_line(main, argv, capsys)
        assert re.search(r"at step 7 \(task 2/2, batch [1-3]\)", line) and line.endswith(f"; {hint}"), line
        resumed = []
        with monkeypatch.context() as patch:
            real = train.run
            patch.setattr(train, "run", lambda *a, **k: resumed.append(k.get("resume")) or real(*a, **k))
            assert main(argv) == 0
        assert resumed == [True], (name, resumed)
        [run] = glob.glob(runs[name])
        assert results_of(run)["resumed_from_step"] == 7, run


def test_a_second_signal_stops_at_once():
    from gcl_tf.faults import StopSignals

    # Python's own Ctrl-C handler, as in a terminal: a test runner's worker process (pytest-xdist)
    # or a script's background job ignores SIGINT, and a second signal then acts as that: nothing.
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with StopSignals() as stop:
            # raise_signal runs the handler before it returns (os.kill of our own pid may be taken by
            # one of TensorFlow's threads and handled a moment later, after the check)
            signal.raise_signal(signal.SIGINT)
            assert stop.received == signal.SIGINT and stop.name == "SIGINT"
            with pytest.raises(KeyboardInterrupt):
                signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

        signal.signal(signal.SIGINT, signal.SIG_IGN)
        with StopSignals() as stop:
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)  # ignored, as before the block
            assert stop.received == signal.SIGINT
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, outer)


# ----------------------------------------------------------------------------- 4. a full disk
def test_an_atomic_write_on_a_full_disk_is_one_line_and_keeps_the_previous_file(tmp_path, monkeypatch):
    from gcl_tf import io
    from gcl_tf.errors import DiskError, UserError

    path = tmp_path / "artifacts.npz"
    io.write_npz_atomic(str(path), {"a": np.arange(3)})
    before = path.read_bytes()

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(DiskError) as info:
        io.write_npz_atomic(str(path), {"a": np.arange(100000)})
    assert isinstance(info.value, UserError) and isinstance(info.value, OSError)
    assert info.value.errno == errno.ENOSPC
    assert str(info.value) == f"cannot write {path}: No space left on device; free space on its disk"
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["artifacts.npz"]


# Runs gcl_tf.train and fills the disk the run writes to (a file grown until ENOSPC): "step N"
# after training step N, "results" just before results.json is written.
FILLER = """\
import sys
from gcl_tf.quiet import import_tensorflow
import_tensorflow()  # TensorFlow's start-up lines go, as gcl_tf.train's main sends them
from gcl_tf import callbacks, task_loop, train
mode, value, filler = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def fill():
    with open(filler, "wb", buffering=0) as handle:
        for size in (2**16, 2**12, 1):
            try:
                while True:
                    handle.write(b"x" * size)
            except OSError:
                pass

if mode == "step":
    after_batch = callbacks.PeriodicCheckpoint.on_train_batch_end
    def on_train_batch_end(self, batch, logs=None):
        if self.step + self._per_call == value:
            fill()
        return after_batch(self, batch, logs)
    callbacks.PeriodicCheckpoint.on_train_batch_end = on_train_batch_end
else:
    write = task_loop.write_json_atomic  # the task loop writes results.json
    def write_json_atomic(path, obj):
        if path.endswith("results.json"):
            fill()
        return write(path, obj)
    task_loop.write_json_atomic = write_json_atomic
sys.exit(train.main(sys.argv[4:]))
"""

# In a private mount namespace: a 4 MiB tmpfs holds the run; fill it at a point, copy what the
# failed run left, free the space, resume, copy again.
ON_A_SMALL_DISK = """\
set -u
mount -t tmpfs -o size=4m tmpfs "$DISK"
python "$FILLER" $MODE $VALUE "$DISK/filler" --config "$CONFIG" --output "$DISK/run" >"$OUT/fail.out" 2>"$OUT/fail.err"
echo $? >"$OUT/fail.rc"
cp -a "$DISK/run" "$OUT/after_fail"
rm "$DISK/filler"
python -m gcl_tf.train --config "$CONFIG" --output "$DISK/run" --resume >"$OUT/resume.out" 2>"$OUT/resume.err"
echo $? >"$OUT/resume.rc"
cp -a "$DISK/run" "$OUT/after_resume"
"""


def can_mount_a_small_disk(tmp_path) -> bool:
    if shutil.which("unshare") is None:
        return False
    (tmp_path / "probe").mkdir()
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {tmp_path / 'probe'}"],
                           capture_output=True)
    return probe.returncode == 0


# 2 tasks x 10 steps, checkpoints every 4 steps and at each task end (4, 8, 10, 12, 16, 20).
@pytest.mark.slow  # a run on a small filesystem, then its resume
@pytest.mark.parametrize("mode, value, written, kept, message", [
    ("step", 13, "checkpoints/ckpt-16", 12,
     "; free space on its disk, then continue with --resume from the checkpoint of step 12, which is kept"),
    ("results", 0, "results.json", 20,
     "; free space on its disk, then finish the run with --resume (its last checkpoint is kept)"),
])
def test_a_full_disk_is_one_line_and_the_previous_checkpoint_resumes(mode, value, written, kept, message, tmp_path):
    if not can_mount_a_small_disk(tmp_path):
        pytest.skip("no unprivileged mount namespace (unshare -rm) to make a small disk in")
    config = write_config(tmp_path, {"benchmark": {"num_tasks": 2}, "train": {"checkpoint_every": 4}})
    (tmp_path / "filler.py").write_text(FILLER)
    (tmp_path / "disk").mkdir()
    env = dict(ENV, DISK=str(tmp_path / "disk"), OUT=str(tmp_path), FILLER=str(tmp_path / "filler.py"), MODE=mode,
               VALUE=str(value), CONFIG=config)
    proc = subprocess.run(["unshare", "-rm", "bash", "-c", ON_A_SMALL_DISK], capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]

    assert (tmp_path / "fail.rc").read_text().strip() == "2"
    lines = our_lines((tmp_path / "fail.err").read_text())
    path = os.path.join(tmp_path / "disk" / "run", written)
    assert lines == [f"error: cannot write {path}: No space left on device{message}"], lines
    failed = tmp_path / "after_fail"
    names = sorted(os.listdir(failed / "checkpoints"))
    assert names == ["checkpoint", *sorted(f"ckpt-{s}.{e}" for s in (kept - 2 if mode == "step" else 16, kept)
                                           for e in ("data-00000-of-00001", "index"))], names
    assert not (failed / "results.json").exists()
    assert not [name for name in os.listdir(failed) if name.startswith(".")]  # no temporary file left
    assert latest(failed).endswith(f"ckpt-{kept}") and checkpoint_arrays(latest(failed))  # it reads

    assert (tmp_path / "resume.rc").read_text().strip() == "0", (tmp_path / "resume.err").read_text()[-3000:]
    assert results_of(tmp_path / "after_resume")["resumed_from_step"] == kept


# ----------------------------------------------------------------------------- 5. memory
def gcl_config(make_config, **method):
    return make_config({"method": {"name": "gcl", **method}})


def largest_buffers(config, input_shape, num_classes=None):
    from gcl_tf import methods

    return methods.method_class(config.method.name).memory_estimate(config, input_shape, num_classes)


def check_memory(config, input_shape, available, where):
    from gcl_tf import methods, resources

    cls = methods.method_class(config.method.name)
    resources.check_memory(largest_buffers(config, input_shape), f"method.memory_size: {config.method.memory_size}",
                           cls.memory_advice(config), available, where)


def test_largest_buffers_of_gcl_with_a_large_memory(make_config):

    m = 200000
    buffers = dict(largest_buffers(gcl_config(make_config, memory_size=m), (8, 8, 1)))
    assert buffers == {
        f"the [{m}, {m}] edge matrix": m * m * 4,  # 149 GiB
        f"a training step's graphs (3 x [{m + 10}, {m}])": 3 * (m + 10) * m * 4,
        f"the test graphs' noise [30, 128, {m}]": 30 * 128 * m * 4,
        f"the memory's {m} images": m * 64 * 4,
    }
    linear = largest_buffers(gcl_config(make_config, memory_size=m, edge_memory="embeddings", context_batch=1000),
                             (8, 8, 1))
    assert dict(linear)[f"the [{m}, 32] edge embeddings"] == m * 32 * 4
    assert dict(linear)["a training step's graphs (3 x [1010, 1000])"] == 3 * 1010 * 1000 * 4
    assert sum(size for _, size in linear) < 4 * 2**30

    er = make_config({"method": {"name": "er", "memory_size": 1000}})
    assert largest_buffers(er, (32, 32, 3)) == [("the memory's 1000 images", 1000 * 3072 * 4)]
    gem = make_config({"method": {"name": "gem", "memory_size": 100}})  # 33 slots for each of 3 tasks
    assert largest_buffers(gem, (8, 8, 1)) == [("the memory's 99 images", 99 * 64 * 4)]
    assert largest_buffers(make_config(), (8, 8, 1)) == []  # finetune keeps no memory
    derpp = make_config({"method": {"name": "derpp", "memory_size": 1000}})  # keeps each sample's logits too
    assert largest_buffers(derpp, (8, 8, 1), num_classes=100) == [("the memory's 1000 logits [100]", 1000 * 100 * 4),
                                                                   ("the memory's 1000 images", 1000 * 64 * 4)]


def test_host_memory_is_memavailable(tmp_path):
    from gcl_tf import resources

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       32000000 kB\nMemFree:         1000000 kB\nMemAvailable:   20000000 kB\n")
    limit = resources._cgroup_room()
    expected = 20000000 * 1024 if limit is None else min(20000000 * 1024, limit)
    assert resources.host_available(str(meminfo)) == expected


def test_a_run_larger_than_the_machine_is_refused_before_the_model_is_built(tmp_path, monkeypatch, capsys):
    from gcl_tf import methods, train

    monkeypatch.setattr(methods, "build", lambda *a: pytest.fail("the model was built"))
    config = write_config(tmp_path, {"method": {"name": "gcl", "memory_size": 200000}})
    out = tmp_path / "run"
    message = cli_error(train.main, ["--config", config, "--output", str(out)], capsys)
    assert message.startswith("error: method.memory_size: 200000 needs at least ")
    assert "the [200000, 200000] edge matrix 149.0 GiB" in message
    assert re.search(r" but \d+\.\d GiB of available RAM is there; ", message), message
    assert "method.edge_memory: embeddings with method.context_batch" in message
    assert not out.exists()


def test_memory_checks_compare_with_what_the_device_has(make_config):
    from gcl_tf.errors import OutOfMemory

    big = make_config({"method": {"name": "er", "memory_size": 10**7}})  # 10M digits: 2.4 GiB
    check_memory(big, (8, 8, 1), available=3 * 2**30, where="GPU memory")
    with pytest.raises(OutOfMemory, match=r"needs at least 2\.4 GiB .* but 2\.0 GiB of GPU memory is there; "
                                          r"lower method\.memory_size"):
        check_memory(big, (8, 8, 1), available=2 * 2**30, where="GPU memory")
    linear = make_config({"method": {"name": "gcl", "memory_size": 200000, "edge_memory": "embeddings"}})
    with pytest.raises(OutOfMemory, match="set method.context_batch"):
        check_memory(linear, (8, 8, 1), available=16 * 2**30, where="available RAM")
