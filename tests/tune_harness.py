"""What the search tests share: a tiny config, the grid it searches, its trials' results and
events read back, a counting stand-in for train.run, and one process per search (autouse)."""
from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

# 2 permuted tasks x 150 digits (15 held out per task for validation), ER with a tiny MLP.
TINY = {
    "seed": 0,
    "output_dir": "unused",
    "benchmark": {"name": "permuted", "dataset": "digits", "source": "digits",
                  "num_tasks": 2, "samples_per_task": 150},
    "method": {"name": "er", "memory_size": 50},
    "model": {"backbone": "mlp", "hidden_size": 32},
    "train": {"batch_size": 10, "learning_rate": 0.1, "verbose": 0, "log_every": 0},
    "eval": {"batch_size": 128},
    "tune": {"space": {"train.learning_rate": [0.01, 0.1], "train.optimizer": ["sgd", "adam"]}},
}


GRID = {(lr, opt) for lr in (0.01, 0.1) for opt in ("sgd", "adam")}


@pytest.fixture(autouse=True)
def single_process(monkeypatch):
    """In-process searches run alone, whatever the environment says."""
    for name in ("KERASTUNER_TUNER_ID", "KERASTUNER_ORACLE_IP", "KERASTUNER_ORACLE_PORT"):
        monkeypatch.delenv(name, raising=False)


def write_config(folder, raw=TINY) -> str:
    path = os.path.join(str(folder), "tiny.yaml")
    with open(path, "w") as handle:
        yaml.safe_dump(raw, handle, sort_keys=False)
    return path


def trial_results(folder) -> dict:
    """trial id -> the trial's own results.json."""
    out = {}
    for path in glob.glob(os.path.join(str(folder), "trial_*", "results.json")):
        trial_id = os.path.basename(os.path.dirname(path))[len("trial_"):]
        with open(path) as handle:
            out[trial_id] = json.load(handle)
    return out


def grid_point(results) -> tuple:
    return (results["config"]["train"]["learning_rate"], results["config"]["train"]["optimizer"])


def event_tags(folder, recursive=False) -> set:
    import tensorflow as tf

    pattern = os.path.join(str(folder), "**" if recursive else "", "events.out.tfevents.*")
    tags = set()
    for path in glob.glob(pattern, recursive=recursive):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(value.tag for value in event.summary.value)
    return tags


class CountingTrain:
    """Wraps gcl_tf.train.run: records the folder of every run; ``interrupt_at`` (1-based)
    raises KeyboardInterrupt at the start of that run, like Ctrl-C."""

    def __init__(self, monkeypatch, interrupt_at=None):
        from gcl_tf import train

        self.real = train.run
        self.calls = []
        self.interrupt_at = interrupt_at
        monkeypatch.setattr(train, "run", self)

    def __call__(self, config, output_dir=None, *args, **kwargs):
        self.calls.append(os.path.basename(output_dir))
        if self.interrupt_at == len(self.calls):
            raise KeyboardInterrupt
        return self.real(config, output_dir, *args, **kwargs)


# ----------------------------------------------------------------------------- distributed
def assert_the_whole_grid_ran_and_the_best_is_reported(folder):
    """Every grid point ran once and ended; best.json names the trial with the best validation ACC."""
    results = trial_results(folder)
    assert sorted(results) == ["0", "1", "2", "3"]
    assert {grid_point(r) for r in results.values()} == GRID
    for trial_json in glob.glob(str(folder / "trial_*" / "trial.json")):
        with open(trial_json) as handle:
            assert json.load(handle)["status"] == "COMPLETED"
    with open(folder / "best.json") as handle:
        best = json.load(handle)
    assert best["val_acc"] == pytest.approx(max(r["acc"] for r in results.values()))
    assert results[best["trial_id"]]["acc"] == pytest.approx(best["val_acc"])


def cli_error(capsys, argv) -> str:
    from gcl_tf import tune

    with pytest.raises(SystemExit) as info:
        tune.main(argv)
    assert info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    return lines


SLOW_TRIALS = {**TINY, "benchmark": {**TINY["benchmark"], "num_tasks": 10, "samples_per_task": 900}}


def start_local_search(cwd, output, sigint_ignored=False):
    """``--workers 2`` from ``cwd`` with relative paths, as people type it; its lines go to a queue.
    ``sigint_ignored``: started as a script's background job (``... &``), which ignores SIGINT."""
    import queue
    import signal
    import threading

    command = [sys.executable, "-m", "gcl_tf.tune", "--config", "../slow.yaml", "--output", output,
               "--workers", "2"]
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None
    process = subprocess.Popen(command, cwd=cwd, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=ignore)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stdout], daemon=True).start()
    return process, lines


def wait_for(lines, pattern, count, timeout=240):
    import queue
    import time

    seen, end = [], time.monotonic() + timeout
    while len([line for line in seen if re.search(pattern, line)]) < count:
        try:
            seen.append(lines.get(timeout=max(0.1, end - time.monotonic())))
        except queue.Empty:
            raise AssertionError(f"no {count} lines matching {pattern!r} in {timeout}s:\n{''.join(seen)}") from None
    return seen


def processes_on(folder) -> list[int]:
    """Processes whose command line names ``folder`` (the workers name it absolutely)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if str(folder).encode() in handle.read():
                    pids.append(int(pid))
    return pids


def local_search_with_both_workers_busy(tmp_path, sigint_ignored=False):
    """A ``--workers 2`` search started from another folder, once both workers run a trial."""
    write_config(tmp_path, SLOW_TRIALS)
    os.rename(tmp_path / "tiny.yaml", tmp_path / "slow.yaml")
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    process, lines = start_local_search(cwd, "rel/search", sigint_ignored)
    first = wait_for(lines, r"^\[tuner\d\] trial \d started", 2)
    return cwd, cwd / "rel" / "search", process, lines, first

