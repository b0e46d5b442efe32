"""Faults during a run: preemption (SIGTERM, Ctrl-C) saves at the next step and resumes bit for bit, a
full disk is one line and keeps what was written, more memory than the machine has is refused before
the model is built."""
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
from faults_harness import (
    ENV,
    FILLER,
    ON_A_SMALL_DISK,
    PREEMPTED_RUN,
    STEPS,
    can_mount_a_small_disk,
    check_memory,
    cli_error,
    gcl_config,
    largest_buffers,
    our_lines,
    resume_as_printed,
    sigterm_after_step,
    stopped_line,
    train_process,
    write_config,
)
from reliability_harness import (
    assert_bit_identical,
    checkpoint_arrays,
    completed_run,
    config_file,
    latest,
    results_of,
)

from conftest import REPO


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

