"""What the fault tests share: a config written to a folder, one-line CLI errors, crashes and
signals after a chosen step, damaged checkpoints, a full disk, the memory estimate."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest
import yaml

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


# ----------------------------------------------------------------------------- 2. one run per folder
HOLDER = """\
import sys, time
from gcl_tf.faults import exclusive
with exclusive(sys.argv[1]):
    print("held", flush=True)
    time.sleep(120)
"""


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

