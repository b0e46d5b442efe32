"""A run that fails before its first checkpoint leaves nothing it created (issue 71): a new folder
goes, a folder that held other files keeps only them; its one line says what was removed."""
from __future__ import annotations

import os

import pytest
import yaml

from conftest import TINY


def diverging(tmp_path) -> str:
    config = tmp_path / "diverge.yaml"
    config.write_text(yaml.safe_dump({**TINY, "train": {**TINY["train"], "learning_rate": 1e30,
                                                        "checkpoint_every": 0}}))
    return str(config)


def failed(argv, capsys) -> str:
    from gcl_tf import train

    with pytest.raises(SystemExit) as exit_info:
        train.main(argv)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_run_that_diverges_before_its_first_checkpoint_leaves_no_folder(tmp_path, capsys):
    run = tmp_path / "run"
    line = failed(["--config", diverging(tmp_path), "--output", str(run)], capsys)
    assert "training diverged" in line and "no checkpoint was written" in line
    assert line.endswith(f"; removed what the run wrote ({run}): it stopped before its first checkpoint, so nothing "
                         "of it was worth keeping"), line
    assert not run.exists()


def test_a_failed_run_in_a_folder_of_other_files_removes_only_its_own(tmp_path, capsys):
    run = tmp_path / "mine"
    run.mkdir()
    (run / "notes.txt").write_text("mine")
    line = failed(["--config", diverging(tmp_path), "--output", str(run)], capsys)
    assert "removed what the run wrote (config.yaml, gcl_tf.lock, model.json, tensorboard)" in line, line
    assert os.listdir(run) == ["notes.txt"]
