"""End to end: ``python -m gcl_tf.train`` on the bundled digits, as a user runs it."""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO

QUICKSTART = os.path.join(REPO, "configs", "quickstart.yaml")


def train_cli(*args, timeout=600):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-m", "gcl_tf.train", "--config", QUICKSTART, *args],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=timeout)


def tensorboard_tags(folder) -> set[str]:
    import tensorflow as tf

    tags = set()
    for path in glob.glob(os.path.join(folder, "**", "events.out.tfevents.*"), recursive=True):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(value.tag for value in event.summary.value)
    return tags


@pytest.mark.slow
def test_piped_output_is_our_progress_line_not_keras_lines(tmp_path, make_config, capsys, monkeypatch):
    """stdout that is not a terminal (capsys here, a log file for a user) gets a line per task and
    our progress line (the run's step, rate and time left; here every step, in a log about once a
    minute), and nothing of Keras's: no progress bar's ANSI colours, backspaces and carriage
    returns, no line per epoch."""
    from gcl_tf import train

    monkeypatch.setattr(train, "PROGRESS_SECONDS", 1e-9)
    train.run(make_config({"train": {"verbose": 1}}), output_dir=str(tmp_path / "run"))
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\b\r"), repr(out[:300])
    lines = out.splitlines()
    assert [line for line in lines if line.startswith("Task ")][0].startswith("Task 1/3")
    assert not [line for line in lines if "/step" in line or line.startswith("Epoch ")], lines  # Keras's
    progress = [line.strip() for line in lines if "steps/s" in line]
    assert len(progress) == 30 and progress[0].startswith("task 1/3 step 1/10, run 1/30 steps, "), progress[:3]
    assert progress[-1].startswith("task 3/3 step 10/10, run 30/30 steps, ") and "of training left" in progress[-1]


def test_progress_line_reports_step_rate_and_time_left_about_every_interval():
    """A line once ``every`` seconds have passed (not per step): the task's and the run's step,
    the rate since the last line and the run's training time left at that rate."""
    from gcl_tf.callbacks import ProgressLine

    now, lines = [0.0], []
    line = ProgressLine(every=60, run_steps=5000, done_before=1000, num_tasks=5, prefix="",
                        print_fn=lines.append, clock=lambda: now[0])
    line.begin_task(1, 1000, done=0)
    line.set_model(type("M", (), {"steps_per_execution": 1})())
    line.on_train_begin()
    for _ in range(95):  # 95 steps in 59.4 s: no line yet
        now[0] += 0.625
        line.on_train_batch_end(0)
    assert lines == []
    now[0] += 0.625
    line.on_train_batch_end(0)  # the 96th step at 60 s: 1.6 steps/s, 3904 steps left
    assert lines == ["task 2/5 step 96/1000, run 1096/5000 steps, 1.60 steps/s, about 40m40s of training left"]
    for _ in range(840):  # 2 steps/s from here on: a line every 120 steps
        now[0] += 0.5
        line.on_train_batch_end(0)
    assert len(lines) == 1 + 840 // 120
    assert lines[-1] == "task 2/5 step 936/1000, run 1936/5000 steps, 2.00 steps/s, about 25m32s of training left"


@pytest.mark.slow
def test_a_run_prints_a_progress_line_per_interval_with_the_runs_steps(tmp_path, make_config, capsys):
    from gcl_tf.train import run

    config = make_config({"train": {"verbose": 2}})
    run(config, output_dir=str(tmp_path / "run"), progress_seconds=1e-9)  # a line after every step
    lines = [line.strip() for line in capsys.readouterr().out.splitlines() if "steps/s" in line]
    assert len(lines) == 30, lines
    assert lines[0].startswith("task 1/3 step 1/10, run 1/30 steps, ")
    assert lines[-1].startswith("task 3/3 step 10/10, run 30/30 steps, ") and lines[-1].endswith(
        "about 0m00s of training left")
    run(config, output_dir=str(tmp_path / "quiet"), verbose=0)  # verbose 0 and no interval: nothing
    assert capsys.readouterr().out == ""


@pytest.mark.slow
def test_train_cli_writes_results_and_tensorboard_and_refuses_to_overwrite(tmp_path):
    out = tmp_path / "run"
    args = ["--set", "benchmark.num_tasks=3", "--set", "benchmark.samples_per_task=200",
            "--set", "train.log_every=5", "--output", str(out)]
    proc = train_cli(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Task 1/3" in proc.stdout and "ACC" in proc.stdout  # progress is visible
    assert "Traceback" not in proc.stderr

    results = json.loads((out / "results.json").read_text())
    R = np.array(results["accuracy_matrix"], dtype=float)
    assert R.shape == (3, 3) and np.all((R >= 0) & (R <= 100))
    assert results["acc"] == pytest.approx(R[-1].mean())
    assert results["fgt"] == pytest.approx(np.mean([R[:2, j].max() - R[2, j] for j in range(2)]))
    assert results["bwt"] == pytest.approx(np.mean([R[2, j] - R[j, j] for j in range(2)]))
    assert R[0, 0] > 50  # it learned the first task (10 classes: chance is 10%)
    assert results["train_seconds"] > 0 and results["eval_seconds"] > 0
    assert results["train_steps"] == 3 * 200 // 10
    config = results["config"]
    assert config["method"]["name"] == "er" and config["method"]["memory_size"] == 200
    assert config["benchmark"]["num_tasks"] == 3 and config["benchmark"]["source"] == "digits"
    assert (out / "config.yaml").exists()

    tags = tensorboard_tags(out / "tensorboard")
    assert {"accuracy/task_01", "accuracy/task_03", "accuracy/average_tasks_seen", "train/loss"} <= tags

    # A second run into the same folder refuses and leaves results.json alone.
    before = (out / "results.json").read_bytes()
    mtime = os.stat(out / "results.json").st_mtime_ns
    proc = train_cli(*args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--overwrite" in lines[0] and "results.json" in lines[0]
    assert (out / "results.json").read_bytes() == before
    assert os.stat(out / "results.json").st_mtime_ns == mtime


@pytest.mark.slow
def test_er_beats_finetune_on_permuted_digits(tmp_path):
    """The quickstart stream (5 permuted tasks of 500 digits): ER's memory keeps old tasks. The
    command's main in this process (the fresh-process runs are the other tests'): four TensorFlow
    start-ups fewer."""
    from gcl_tf import train

    acc, fgt = {}, {}
    for method in ("finetune", "er"):
        for seed in (0, 1):
            out = tmp_path / f"{method}-{seed}"
            assert train.main(["--config", QUICKSTART, "--set", f"method.name={method}", "--set", f"seed={seed}",
                               "--set", "train.verbose=0", "--output", str(out)]) == 0
            results = json.loads((out / "results.json").read_text())
            assert np.array(results["accuracy_matrix"]).shape == (5, 5)
            acc[method, seed], fgt[method, seed] = results["acc"], results["fgt"]
    for seed in (0, 1):
        assert acc["er", seed] > acc["finetune", seed] + 8, acc
        assert fgt["er", seed] < fgt["finetune", seed], fgt
    assert np.mean([acc["er", s] - acc["finetune", s] for s in (0, 1)]) > 12, acc


# A command line in a fresh process where importing TensorFlow (or Keras) fails: a mistake it
# reports with one line and exit 2 was found before TensorFlow loads (about a second, not ten).
WITHOUT_TENSORFLOW = ("import runpy, sys; sys.modules['tensorflow'] = sys.modules['keras'] = None; "
                      "sys.argv = sys.argv[1:]; runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)")


def finished_folder(tmp_path):
    (tmp_path / "done").mkdir(exist_ok=True)
    (tmp_path / "done" / "results.json").write_text("{}")
    return str(tmp_path / "done")


def unfinished_folder(tmp_path):
    (tmp_path / "stopped" / "checkpoints").mkdir(parents=True)
    (tmp_path / "stopped" / "checkpoints" / "ckpt-40.index").write_text("")
    return str(tmp_path / "stopped")


def yaml_with_a_preset_typo(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text(open(QUICKSTART).read() + "  finetune:\n    train: {learning_rat: 0.5}\n")
    return str(path)


EARLY_MISTAKES = {  # (module, arguments, what the line says)
    "missing file": ("gcl_tf.train", lambda t: ["--config", "configs/missing.yaml"],
                     "error: config file 'configs/missing.yaml' does not exist"),
    "key typo": ("gcl_tf.train", lambda t: ["--config", QUICKSTART, "--set", "train.learning_rat=0.1"],
                 "error: unknown key 'train.learning_rat'; did you mean 'train.learning_rate'? allowed: batch_size,"),
    "preset key typo": ("gcl_tf.train", lambda t: ["--config", yaml_with_a_preset_typo(t)],
                        "error: presets.finetune: unknown key 'train.learning_rat'; did you mean"),
    "method typo": ("gcl_tf.train", lambda t: ["--config", QUICKSTART, "--set", "method.name=gcll"],
                    "error: method.name: 'gcll' is not allowed; did you mean 'gcl'? allowed: "),
    "method key typo": ("gcl_tf.train", lambda t: ["--config", QUICKSTART, "--set", "method.memory_sise=3"],
                        "error: unknown key 'method.memory_sise'; did you mean 'method.memory_size'? allowed: "
                        "name, memory_size, replay_batch_size"),
    "gcl key typo": ("gcl_tf.train", lambda t: ["--config", QUICKSTART, "--set", "method.name=gcl",
                                                "--set", "method.graph_lamda=5"],
                     "error: unknown key 'method.graph_lamda'; did you mean 'method.graph_lambda'?"),
    "wrong type": ("gcl_tf.train", lambda t: ["--config", QUICKSTART, "--set", "train.batch_size=ten"],
                   "error: train.batch_size: expected an integer, got 'ten'"),
    "out of range": ("gcl_tf.train", lambda t: ["--config", QUICKSTART, "--set", "train.learning_rate=0"],
                     "error: train.learning_rate: 0.0 is out of range; allowed: (0, inf)"),
    "bad --set": ("gcl_tf.train", lambda t: ["--config", QUICKSTART, "--set", "train.epochs"],
                  "error: --set 'train.epochs': expected dotted.key=value"),
    "missing npz": ("gcl_tf.train", lambda t: ["--config", QUICKSTART, "--set", "benchmark.source=npz",
                                               "--set", f"benchmark.path={t}/none.npz"],
                    "error: benchmark.path: file '"),
    "finished run": ("gcl_tf.train", lambda t: ["--config", QUICKSTART, "--output", finished_folder(t)],
                     "results.json exists; pass --overwrite"),
    "unfinished run": ("gcl_tf.train", lambda t: ["--config", QUICKSTART, "--output", unfinished_folder(t)],
                       "holds an unfinished run (its checkpoint of step 40"),
    "resume nothing": ("gcl_tf.train", lambda t: ["--config", QUICKSTART, "--output", str(t / "new"), "--resume"],
                       "error: --resume: no checkpoint to resume from in"),
    "init_from": ("gcl_tf.train", lambda t: ["--config", QUICKSTART, "--init-from", str(t / "nowhere"),
                                             "--output", str(t / "run")],  # not the quickstart's runs/ folder
                  "error: init_from: "),
    "export run_dir": ("gcl_tf.export", lambda t: [str(t / "nowhere"), str(t / "out")],
                       "error: RUN_DIR: folder '"),
    "export out": ("gcl_tf.export", lambda t: [finished_folder(t), finished_folder(t)], "error: OUT: "),
    "tune typo": ("gcl_tf.tune", lambda t: ["--config", QUICKSTART, "--set", "train.learning_rat=0.1"],
                  "did you mean 'train.learning_rate'?"),
    "paper typo": ("gcl_tf.benchmark", lambda t: ["paper", "--benchmarks", "split_cifar10", "--set", "train.lr=1",
                                                  "--output", str(t / "suite")],
                   "error: unknown key 'train.lr'; allowed: "),
    "paper data": ("gcl_tf.benchmark", lambda t: ["paper", "--benchmarks", "split_miniimagenet", "--seeds", "1",
                                                  "--output", str(t / "suite")],
                   "error: split_miniimagenet: benchmark.path: folder '/path/to/miniimagenet' does not exist"),
}


@pytest.mark.parametrize("case", list(EARLY_MISTAKES))
def test_mistakes_are_reported_before_tensorflow_loads(case, tmp_path):
    module, arguments, expected = EARLY_MISTAKES[case]
    proc = subprocess.run([sys.executable, "-c", WITHOUT_TENSORFLOW, module, *arguments(tmp_path)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], proc.stderr


def test_train_model_returns_the_trained_model_with_its_results(tmp_path, make_config):
    """train.train_model: the results and the model that produced them (the learner it saved)."""
    from gcl_tf import load_model
    from gcl_tf.train import train_model

    results, model = train_model(make_config({"benchmark": {"num_tasks": 2}}), output_dir=str(tmp_path / "run"),
                                 verbose=0)
    assert int(model.step_counter.numpy()) == results["train_steps"] > 0
    saved = load_model(tmp_path / "run" / "learner.keras")
    assert len(saved.weights) == len(model.weights)
    for a, b in zip(model.weights, saved.weights):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
