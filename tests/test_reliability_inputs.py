"""What a run does with bad numbers and bad input: NaN losses and divergence stop it in one line,
atomic writes keep the previous file, op determinism is restored, a saved config resumes where it
names, bad input is one line and overwrites nothing."""
from __future__ import annotations

import os

import numpy as np
import pytest
from reliability_harness import (
    BAD_INPUTS,
    Crash,
    bad_input,
    checkpoint_arrays,
    cli_error,
    latest,
    results_of,
    snapshot,
    write_config,
)

from conftest import TINY, _deep_update


@pytest.fixture
def finished_run(tmp_path):
    """A run folder as a finished run leaves it (contents do not matter here)."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    for name, text in (("results.json", '{"acc": 50.0}\n'), ("config.yaml", "seed: 0\n"), ("model.json", "{}\n"),
                       ("checkpoints/checkpoint", 'model_checkpoint_path: "ckpt-30"\n')):
        (run / name).write_text(text)
    return run


def test_nan_loss_stops_training_names_the_step_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch, capsys):
    """2 tasks of 10 steps, checkpoints every 5 steps: the loss turns NaN at step 13 (task 2,
    batch 3); the check before the checkpoint of step 15 stops the run; ckpt-10 stays the latest."""
    import tensorflow as tf

    from gcl_tf import methods

    learn = methods.method_class("finetune").learn

    def learn_nan_from_step_13(self, x, y):
        logs = learn(self, x, y)
        logs["loss"] = tf.where(self.step_counter >= 12, tf.constant(float("nan")), logs["loss"])
        return logs

    monkeypatch.setattr(methods.method_class("finetune"), "learn", learn_nan_from_step_13)
    config = write_config(tmp_path, {"benchmark": {"num_tasks": 2}, "train": {"checkpoint_every": 5}})
    out = tmp_path / "run"
    message = cli_error(["--config", config, "--output", str(out)], capsys)
    assert "step 13 (task 2, batch 3 of the task)" in message and "NaN" in message
    assert "last good checkpoint (step 10)" in message
    assert latest(out).endswith("ckpt-10")
    saved = checkpoint_arrays(latest(out))
    for name, value in saved.items():
        if name.startswith(("model/", "optimizer/")):
            assert np.all(np.isfinite(value)), name
    assert int(saved["progress/task/.ATTRIBUTES/VARIABLE_VALUE"]) == 1
    assert not (out / "results.json").exists()


def test_a_diverging_learning_rate_is_one_line_and_no_checkpoint_holds_nan(tmp_path, capsys):
    config = write_config(tmp_path, {"benchmark": {"num_tasks": 2},
                                     "train": {"learning_rate": 1e30, "checkpoint_every": 1}})
    out = tmp_path / "run"
    message = cli_error(["--config", config, "--output", str(out)], capsys)
    assert "diverged" in message and "at step" in message and "(task 1," in message
    path = latest(out)
    if path is not None:
        for name, value in checkpoint_arrays(path).items():
            if name.startswith(("model/", "optimizer/")):
                assert np.all(np.isfinite(value)), name
    assert not (out / "results.json").exists()


# ----------------------------------------------------------------------------- atomic writes
def test_an_interrupted_atomic_write_keeps_the_previous_file(tmp_path, monkeypatch):
    from gcl_tf import io

    path = tmp_path / "results.json"
    io.write_json_atomic(str(path), {"acc": 1.0})
    before = path.read_bytes()

    def crash(*args, **kwargs):
        raise OSError("disk unplugged")

    for target, kind in ((os, "replace"), (os, "fsync")):  # before the rename; half-way through the write
        monkeypatch.setattr(target, kind, crash)
        with pytest.raises(OSError):
            io.write_json_atomic(str(path), {"acc": 2.0, "rows": list(range(10000))})
        monkeypatch.undo()
        assert path.read_bytes() == before
        assert os.listdir(tmp_path) == ["results.json"]  # no temporary file left
    with pytest.raises(TypeError):  # the serialiser fails: nothing is written
        io.write_json_atomic(str(path), {"acc": object()})
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["results.json"]


def test_atomic_writes_get_the_permissions_of_a_plain_write(tmp_path):
    """Files written atomically are readable as a plain open() would leave them (umask applies),
    not private like the temporary file they start as."""
    from gcl_tf import io

    old = os.umask(0o022)
    try:
        io.write_json_atomic(str(tmp_path / "a.json"), {"acc": 1.0})
        os.umask(0o077)
        io.write_atomic(str(tmp_path / "b.md"), "text")
    finally:
        os.umask(old)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "b.md").stat().st_mode & 0o777 == 0o600


def test_a_run_leaves_op_determinism_as_it_found_it(tmp_path, monkeypatch):
    """train.deterministic turns TensorFlow's process-wide op determinism on for the run; a later run
    in the same process (a notebook, the next trial of a search) is not made deterministic by it, and
    a process the user made deterministic stays so."""
    from tensorflow.python.framework import config as tf_config

    from gcl_tf import train
    from gcl_tf.config import resolve

    tiny = {"benchmark": {"num_tasks": 1, "samples_per_task": 20}}
    seen = []  # whether op determinism is on while the run builds its model
    real = train.build_training_state

    def record(*args, **kwargs):
        seen.append(tf_config.is_op_determinism_enabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(train, "build_training_state", record)
    deterministic = resolve(_deep_update(TINY, {**tiny, "train": {"deterministic": True}}))
    try:
        assert not tf_config.is_op_determinism_enabled()
        train.run(deterministic, str(tmp_path / "a"), verbose=0)
        assert seen == [True] and not tf_config.is_op_determinism_enabled()
        tf_config.enable_op_determinism()
        train.run(resolve(_deep_update(TINY, tiny)), str(tmp_path / "b"), verbose=0)
        assert tf_config.is_op_determinism_enabled()
    finally:
        tf_config.disable_op_determinism()


def test_train_writes_results_through_the_atomic_writer(tmp_path, monkeypatch):
    from gcl_tf import task_loop, train

    written = []
    real = train.write_json_atomic
    for module in (train, task_loop):  # model.json at the start, results.json at the end
        monkeypatch.setattr(module, "write_json_atomic", lambda path, obj: (written.append(os.path.basename(path)),
                                                                               real(path, obj)))
    config = _deep_update(TINY, {"benchmark": {"num_tasks": 1, "samples_per_task": 20}})
    from gcl_tf.config import resolve

    train.run(resolve(config), output_dir=str(tmp_path / "run"), verbose=0)
    assert written == ["model.json", "results.json"]
    assert not [p for p in os.listdir(tmp_path / "run") if p.startswith(".")]


@pytest.mark.slow
def test_a_runs_saved_config_names_its_output_folder_and_resumes_there(tmp_path, monkeypatch):
    """config.yaml (and results.json) record the --output used, not the config file's output_dir,
    so ``--config RUN/config.yaml --resume`` continues RUN itself."""
    import yaml

    from gcl_tf import callbacks, train

    elsewhere = tmp_path / "elsewhere"
    config = write_config(tmp_path, {"output_dir": str(elsewhere),
                                     "benchmark": {"num_tasks": 2, "samples_per_task": 20}})
    out = tmp_path / "run"
    after_task = callbacks.TaskEndEvaluation.on_train_end

    def stop(self, logs=None):
        after_task(self, logs)
        if self.task_index == 1:  # after task 2's evaluation, before its checkpoint: task 1's is the last
            raise Crash()

    monkeypatch.setattr(callbacks.TaskEndEvaluation, "on_train_end", stop)
    with pytest.raises(Crash):
        train.main(["--config", config, "--output", str(out)])
    monkeypatch.setattr(callbacks.TaskEndEvaluation, "on_train_end", after_task)
    assert yaml.safe_load((out / "config.yaml").read_text())["output_dir"] == str(out)
    assert train.main(["--config", str(out / "config.yaml"), "--resume"]) == 0
    results = results_of(out)
    assert results["resumed_from_step"] == 2 and results["config"]["output_dir"] == str(out)
    assert not elsewhere.exists()


@pytest.mark.slow
def test_a_gcl_run_saved_before_the_defaults_changed_resumes_reruns_exports_and_seeds_runs_as_it_ran(
        tmp_path, monkeypatch, capsys):
    """GCL's own_latent / target_loss became true / present (issue 33); a run folder saved before holds
    neither key in its config.yaml and ran the paper's head. ``--config RUN/config.yaml --resume``
    continues it, the same file as ``--config`` of a new run trains that head again, export restores it,
    and --init-from accepts a config naming that head and refuses one with today's defaults, naming the
    key. A user's own config without the keys still gets today's defaults."""
    import yaml

    from gcl_tf import callbacks, export, train

    paper_head = {"name": "gcl", "memory_size": 20, "test_graph_samples": 2, "own_latent": False,
                  "target_loss": "all"}
    config = write_config(tmp_path, {"method": paper_head, "benchmark": {"num_tasks": 2, "samples_per_task": 20},
                                     "train": {"deterministic": True}})
    out = tmp_path / "run"
    after_task = callbacks.TaskEndEvaluation.on_train_end

    def stop(self, logs=None):
        after_task(self, logs)
        if self.task_index == 1:
            raise Crash()

    monkeypatch.setattr(callbacks.TaskEndEvaluation, "on_train_end", stop)
    with pytest.raises(Crash):
        train.main(["--config", config, "--output", str(out)])
    monkeypatch.setattr(callbacks.TaskEndEvaluation, "on_train_end", after_task)
    saved = yaml.safe_load((out / "config.yaml").read_text())
    del saved["method"]["own_latent"], saved["method"]["target_loss"]  # as a run saved before wrote it
    (out / "config.yaml").write_text(yaml.safe_dump(saved))

    assert train.main(["--config", str(out / "config.yaml"), "--output", str(out), "--resume"]) == 0
    results = results_of(out)
    assert results["resumed_from_step"] == 2
    assert results["config"]["method"]["own_latent"] is False and results["config"]["method"]["target_loss"] == "all"
    model, _, _ = export.load_run(str(out))
    assert model.own_head is None and model.settings.target_loss == "all"

    (out / "config.yaml").write_text(yaml.safe_dump(saved))  # a finished run saved before, rerun elsewhere
    assert train.main(["--config", str(out / "config.yaml"), "--output", str(tmp_path / "again")]) == 0
    again = results_of(tmp_path / "again")
    assert again["config"]["method"]["own_latent"] is False and again["config"]["method"]["target_loss"] == "all"
    assert again["acc"] == results["acc"]  # the same run, trained again from its start

    later = write_config(tmp_path, {"method": paper_head}, "later.yaml")
    assert train.main(["--config", later, "--output", str(tmp_path / "later"), "--init-from", str(out)]) == 0
    user = {k: v for k, v in paper_head.items() if k not in ("own_latent", "target_loss")}
    mine = write_config(tmp_path, {"method": user}, "mine.yaml")
    message = cli_error(["--config", mine, "--output", str(tmp_path / "mine"), "--init-from", str(out)], capsys)
    assert "init_from: the config changes what the learner" in message and "method.own_latent" in message, message


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_is_one_line_exit_2_and_overwrites_nothing(case, tmp_path, finished_run, capsys):
    update, expected = bad_input(case, tmp_path)
    if isinstance(update, str):
        config = tmp_path / "bad.yaml"
        config.write_text(update)
    else:
        config = write_config(tmp_path, update, "bad.yaml")
    before = snapshot(finished_run)
    message = cli_error(["--config", str(config), "--output", str(finished_run), "--overwrite"], capsys)
    assert expected in message, message
    assert snapshot(finished_run) == before


@pytest.mark.slow
def test_resume_needs_a_checkpoint_and_the_same_config(tmp_path, finished_run, capsys):
    config = write_config(tmp_path, {"benchmark": {"num_tasks": 2, "samples_per_task": 20},
                                     "train": {"checkpoint_every": 1}})
    out = tmp_path / "new"
    assert "no checkpoint to resume from" in cli_error(["--config", config, "--output", str(out), "--resume"], capsys)
    assert not out.exists()
    assert "nothing to resume" in cli_error(["--config", config, "--output", str(finished_run), "--resume"], capsys)
    (finished_run / "results.json").unlink()
    (finished_run / "config.yaml").unlink()
    (finished_run / "checkpoints" / "ckpt-30.index").write_text("")
    message = cli_error(["--config", config, "--output", str(finished_run), "--resume"], capsys)
    assert "config.yaml is missing" in message

    # A run stopped after its first task (its checkpoint), resumed with another learning rate or
    # another seed: refused, naming the key; with another verbosity or checkpoint cadence: fine.
    from gcl_tf import callbacks, train

    after_task = callbacks.TaskEndEvaluation.on_train_end

    def stop(self, logs=None):
        after_task(self, logs)
        if self.task_index == 1:
            raise Crash()

    callbacks.TaskEndEvaluation.on_train_end = stop
    try:
        with pytest.raises(Crash):
            train.main(["--config", config, "--output", str(out)])
    finally:
        callbacks.TaskEndEvaluation.on_train_end = after_task
    before = snapshot(out)
    message = cli_error(["--config", config, "--output", str(out), "--resume", "--set", "train.learning_rate=0.5"],
                        capsys)
    assert "differs" in message and "train.learning_rate (0.1 -> 0.5)" in message
    message = cli_error(["--config", config, "--output", str(out), "--resume", "--set", "seed=3"], capsys)
    assert "seed (0 -> 3)" in message
    unlocked = lambda files: {name: value for name, value in files.items() if name != "gcl_tf.lock"}  # noqa: E731
    assert unlocked(snapshot(out)) == unlocked(before)  # checked under the run's lock: its pid there, nothing else
    assert train.main(["--config", config, "--output", str(out), "--resume", "--set", "train.checkpoint_every=0",
                       "--set", "train.verbose=0"]) == 0
    assert results_of(out)["resumed_from_step"] == 3  # task 2's first step (its end was not saved)

