"""Mistakes that need no TensorFlow are answered before it loads (issue 52): each command runs in a
fresh process where importing TensorFlow or Keras fails, and must end with its one line and exit
status 2 (a TensorFlow import on the way would end it otherwise). Also what --dry-run lists there,
and the rule before TensorFlow that a method's module states again after it (MER's plain SGD)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO

QUICKSTART = os.path.join(REPO, "configs", "quickstart.yaml")
# Run a module as `python -m` does, with tensorflow and keras unimportable.
WITHOUT_TENSORFLOW = ("import runpy, sys; sys.modules['tensorflow'] = sys.modules['keras'] = None; "
                      "sys.argv = sys.argv[1:]; runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)")


def without_tensorflow(module: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-c", WITHOUT_TENSORFLOW, module, *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=120)


def train(*args: str) -> tuple:
    return ("gcl_tf.train", "--config", QUICKSTART, *args)


def a_file(t) -> str:
    (t / "a_file").write_text("")
    return str(t / "a_file")


def npz(t, **arrays) -> str:
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 256, (200, 8, 8), dtype=np.uint8), rng.integers(0, 10, 200)
    data = {"x_train": x, "y_train": y, "x_test": x[:50], "y_test": y[:50]}
    data.update(arrays)
    path = t / "data.npz"
    np.savez(path, **{k: v for k, v in data.items() if v is not None})
    return str(path)


def truncated_npz(t) -> str:
    path = npz(t)
    raw = open(path, "rb").read()
    open(path, "wb").write(raw[: len(raw) // 2])
    return path


def with_npz(path: str, *args: str) -> tuple:
    return train("--set", "benchmark.source=npz", "--set", f"benchmark.path={path}", "--output", path + "-run", *args)


def unfinished_run(t) -> str:
    """A run's folder with its config, model description and a checkpoint, but no results.json."""
    run = t / "stopped"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "ckpt-40.index").write_text("")
    (run / "config.yaml").write_text(open(QUICKSTART).read().split("# Per-method")[0])
    (run / "model.json").write_text('{"method": "er", "input_shape": [8, 8, 1], "num_classes": 10}')
    return str(run)


def empty_config(t) -> str:
    (t / "empty.yaml").write_text("# to be written\n")
    return str(t / "empty.yaml")


MISTAKES = {  # case: (the command's arguments, given the test's folder; what its one line says)
    "--output is a file": (lambda t: train("--output", a_file(t)),
                           "is a file, not a folder; allowed: a new or existing folder"),
    "--output under a file": (lambda t: train("--output", a_file(t) + "/run"),
                              "a_file/run cannot be a folder: "),
    "--output under /proc": (lambda t: train("--output", "/proc/gcl_tf_run"),
                             "error: --output: /proc/gcl_tf_run cannot be written: /proc takes no new folder ("),
    "npz without x_train": (lambda t: with_npz(npz(t, x_train=None, images=np.zeros((200, 8, 8), np.uint8))),
                            "missing x_train/y_train; a .npz needs x_train, y_train, x_test, y_test"),
    "npz labels of another length": (lambda t: with_npz(npz(t, y_train=np.zeros(150, np.int64))),
                                     "y_train: expected 200 integer labels, got an array of shape [150]"),
    "npz truncated": (lambda t: with_npz(truncated_npz(t)), "not a readable .npz file (zipfile.BadZipFile"),
    "batch larger than a task (samples_per_task)": (
        lambda t: train("--set", "train.batch_size=1000", "--output", str(t / "run")),
        "error: train.batch_size: 1000 is more than the 500 training samples of task 0; allowed: at most 500"),
    "batch larger than a task (the data's)": (
        lambda t: with_npz(npz(t), "--set", "benchmark.samples_per_task=null", "--set", "train.batch_size=300"),
        "error: train.batch_size: 300 is more than the 200 training samples of task 0"),
    "MER with Adam": (lambda t: train("--set", "method.name=mer", "--set", "train.optimizer=adam",
                                      "--output", str(t / "run")),
                      "error: train.optimizer: mer uses plain SGD steps (MER Algorithm 1), got 'adam'; allowed: sgd"),
    "empty config": (lambda t: ("gcl_tf.train", "--config", empty_config(t)),
                     "is empty: it names no benchmark and no method; allowed: a mapping of the sections"),
    "a folder as --config": (lambda t: ("gcl_tf.train", "--config", os.path.join(REPO, "configs")),
                             "is a folder; allowed: a YAML file, e.g. "),
    "learning rate .inf": (lambda t: train("--set", "train.learning_rate=.inf"),
                           "error: train.learning_rate: inf is not a finite number; allowed: a finite number"),
    "tune.space={}": (lambda t: ("gcl_tf.tune", "--config", QUICKSTART, "--set", "tune.space={}",
                                 "--output", str(t / "search")),
                      "error: tune.space: expected a non-empty mapping from dotted config keys"),
    "tune.space: a key the method lacks": (
        lambda t: ("gcl_tf.tune", "--config", QUICKSTART, "--set", "tune.space={method.graph_lambda: [1, 10]}",
                   "--output", str(t / "search")),
        "error: tune.space: unknown key 'method.graph_lambda'; allowed: method.memory_size, method.replay_batch_size"),
    "tune.space: a value out of range": (
        lambda t: ("gcl_tf.tune", "--config", QUICKSTART, "--set", "tune.space={train.learning_rate: [0.1, -1]}",
                   "--output", str(t / "search")),
        "error: tune.space.train.learning_rate[1]: -1.0 is out of range; allowed: (0, inf)"),
    "tune --output is a file": (lambda t: ("gcl_tf.tune", "--config", QUICKSTART, "--output", a_file(t)),
                                "error: --output: "),
    "export of an unfinished run": (
        lambda t: ("gcl_tf.export", unfinished_run(t), str(t / "model")),
        "error: RUN_DIR: the run is not finished (no results.json; its last checkpoint is of step 40); finish it "
        "with python -m gcl_tf.train --config "),
    "export OUT under a file": (lambda t: ("gcl_tf.export", unfinished_run(t), a_file(t) + "/model"),
                                "error: OUT: "),
    "paper --output is a file": (lambda t: ("gcl_tf.benchmark", "paper", "--benchmarks", "quickstart", "--seeds", "1",
                                            "--output", a_file(t)),
                                 "error: --output: "),
}


@pytest.mark.parametrize("case", list(MISTAKES))
def test_a_mistake_is_one_line_before_tensorflow_loads(case, tmp_path):
    arguments, expected = MISTAKES[case]
    proc = without_tensorflow(*arguments(tmp_path))
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], proc.stderr


HELD = {  # case: (the command's arguments, given the held folder and the test's folder)
    "a new run": lambda d, t: train("--output", d),
    "--overwrite": lambda d, t: train("--output", d, "--overwrite"),
    "--resume": lambda d, t: train("--output", d, "--resume"),
    "a search": lambda d, t: ("gcl_tf.tune", "--config", QUICKSTART, "--output", d),
    "a suite": lambda d, t: ("gcl_tf.benchmark", "paper", "--benchmarks", "quickstart", "--seeds", "1", "--output", d),
}


@pytest.mark.parametrize("case", list(HELD))
@pytest.mark.parametrize("checkpoint", [False, True], ids=["before its first checkpoint", "with a checkpoint"])
def test_a_folder_another_run_holds_is_one_line_before_tensorflow_loads(case, checkpoint, tmp_path):
    """This process holds the folder as a run does (its lock), from before its first checkpoint
    (a config.yaml and the lock) or with one; the second command, whatever its options, ends at
    once naming the holder."""
    from gcl_tf.faults import exclusive

    folder = tmp_path / "busy"
    folder.mkdir()
    (folder / "config.yaml").write_text(open(QUICKSTART).read())
    if checkpoint:
        (folder / "checkpoints").mkdir()
        (folder / "checkpoints" / "ckpt-40.index").write_text("")
    with exclusive(str(folder)):
        proc = without_tensorflow(*HELD[case](str(folder), tmp_path))
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{folder} is in use by another run (pid {os.getpid()} holds " in lines[0], proc.stderr


def test_paper_dry_run_lists_its_plan_without_tensorflow(tmp_path):
    """The whole default plan, each run's status and each benchmark's data, without TensorFlow."""
    proc = without_tensorflow("gcl_tf.benchmark", "paper", "--output", str(tmp_path / "suite"), "--dry-run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[-2].endswith(" runs: 0 finished, " + lines[-2].split()[0] + " to run"), lines[-3:]
    assert any(line.startswith("data: permuted_mnist: TFDS 'mnist' in ") for line in lines)
    assert sum(line.startswith("split_cifar10 ") and line.endswith(" to run") for line in lines) > 10


def test_paper_plans_the_studies_main_runs_by_the_presets_resolved_keys(tmp_path):
    """The memory study's main run is the run at the preset's memory size as a run resolves it: the
    size the preset states, the one --set gives, or the method's default when the config leaves it
    out (planning loads no TensorFlow: test_paper_dry_run_lists_its_plan_without_tensorflow)."""
    from gcl_tf.benchmark import paper
    from gcl_tf.schema import MemoryMethodConfig

    (tmp_path / "configs").mkdir()  # ER's preset without a memory size: the default's is its main run
    (tmp_path / "configs" / "tiny.yaml").write_text(open(QUICKSTART).read().replace("      memory_size: 200\n", ""))
    assert MemoryMethodConfig.memory_size == 1000
    for selection, expected in (
            (dict(config_dir=str(tmp_path / "configs"), benchmarks=["tiny"]), [("er", 1000), ("er-memory200", 200)]),
            (dict(benchmarks=["quickstart"]), [("er", 200), ("er-memory1000", 1000)]),
            (dict(benchmarks=["quickstart"], overrides=["method.memory_size=1000"]), [("er", 1000),
                                                                                     ("er-memory200", 200)])):
        runs = paper.plan(methods=["er"], studies=["main,memory"], memory_benchmarks=["all"], memory_methods=["er"],
                          memory_sizes=["200,1000"], seeds=1, log=lambda text: None, **selection)
        assert [(r.variant, r.config.method.memory_size) for r in runs] == expected


def test_paper_dry_run_calls_a_tfds_dataset_prepared_only_when_tfds_finished_it(tmp_path):
    """An empty mnist/ folder (a download that failed before gcl_tf cleaned up after one) is not
    prepared; a version folder holding TFDS's dataset_info.json is."""
    data = tmp_path / "tfds"
    (data / "mnist").mkdir(parents=True)
    states = []
    for _ in range(2):
        proc = without_tensorflow("gcl_tf.benchmark", "paper", "--benchmarks", "permuted_mnist", "--methods", "er",
                                  "--seeds", "1", "--studies", "main", "--set", f"benchmark.path={data}",
                                  "--output", str(tmp_path / "suite"), "--dry-run")
        assert proc.returncode == 0, proc.stderr[-2000:]
        states.append([line for line in proc.stdout.splitlines() if line.startswith("data: ")])
        (data / "mnist" / "3.0.1").mkdir(exist_ok=True)
        (data / "mnist" / "3.0.1" / "dataset_info.json").write_text("{}")
    assert states == [[f"data: permuted_mnist: TFDS 'mnist' in {data} (not prepared: downloaded on first use, which "
                        "needs the network)"], [f"data: permuted_mnist: TFDS 'mnist' in {data} (prepared)"]]


def test_gcl_tf_run_names_its_own_keywords_not_the_command_line_options(tmp_path):
    """What gcl_tf.run refuses, it says in its keywords: overwrite=True, resume=True, output_dir."""
    import gcl_tf
    from gcl_tf.errors import NotResumable, UserError
    from gcl_tf.faults import exclusive

    done = tmp_path / "done"
    done.mkdir()
    (done / "results.json").write_text("{}")
    cases = {
        str(done): ({}, "results.json exists; pass overwrite=True to replace it or choose another output_dir"),
        unfinished_run(tmp_path): ({}, "; pass resume=True to continue it, or overwrite=True to start again and "
                                       "delete it, or choose another output_dir"),
        a_file(tmp_path): ({}, "output_dir: "),
        str(tmp_path / "new"): ({"resume": True}, "resume=True: no checkpoint to resume from in "),
    }
    for folder, (keywords, expected) in cases.items():
        with pytest.raises(UserError) as error:
            gcl_tf.run(QUICKSTART, output_dir=folder, **keywords)
        assert expected in str(error.value) and "--" not in str(error.value), str(error.value)
    assert isinstance(error.value, NotResumable) and "--" not in error.value.advice
    assert not os.path.exists(tmp_path / "new") and os.listdir(done) == ["results.json"]  # nothing left, no lock
    for keywords in ({"overwrite": True}, {}):  # --overwrite's precheck; the run's own lock, before its data loads
        with exclusive(str(tmp_path / "busy")), pytest.raises(UserError) as error:
            gcl_tf.run(QUICKSTART, output_dir=str(tmp_path / "busy"), **keywords)
        assert str(error.value).endswith("wait for it to end, stop it, or choose another output_dir")
