"""A run's data is known by its content, not its path (issue 71): the suite's finished runs and
an unfinished run's --resume are recognised with their npz, IDX or image folder moved elsewhere;
other data at the same place or a changed file is another run."""
from __future__ import annotations

import json
import os
import shutil
import types

import numpy as np
import pytest

from gcl_tf.data.fingerprint import KEY, fingerprint_of, moved_data, moved_run_data


def npz(path, seed=0) -> str:
    rng = np.random.default_rng(seed)
    x, y = rng.integers(0, 256, (60, 8, 8), dtype=np.uint8), np.arange(60) % 10
    np.savez(path, x_train=x, y_train=y, x_test=x[:20], y_test=y[:20])
    return str(path)


def test_the_fingerprint_follows_the_content_not_the_path(tmp_path):
    a = npz(tmp_path / "a.npz")
    os.makedirs(tmp_path / "elsewhere")
    b = shutil.copy(a, tmp_path / "elsewhere" / "renamed.npz")
    other = npz(tmp_path / "other.npz", seed=1)
    assert fingerprint_of("npz", a) == fingerprint_of("npz", b) != fingerprint_of("npz", other)
    (tmp_path / "imgs" / "train" / "cat").mkdir(parents=True)
    (tmp_path / "imgs" / "train" / "cat" / "1.png").write_bytes(b"png" * 100)
    copy = shutil.copytree(tmp_path / "imgs", tmp_path / "imgs2")
    assert fingerprint_of("folder", str(tmp_path / "imgs")) == fingerprint_of("folder", str(copy))
    (copy / "train" / "cat" / "2.png").write_bytes(b"more")
    assert fingerprint_of("folder", str(tmp_path / "imgs")) != fingerprint_of("folder", str(copy))
    assert fingerprint_of("tfds", None) is None and fingerprint_of("npz", str(tmp_path / "missing.npz")) is None


def finished_run(folder, config, recorded) -> None:
    os.makedirs(folder)
    results = {"config": config.to_dict(), "accuracy_matrix": [[50.0]]}
    if recorded is not None:
        results[KEY] = recorded
    (folder / "results.json").write_text(json.dumps(results))


@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "an older run (its path is still there)"])
def test_a_suites_finished_run_is_recognised_with_its_data_moved(recorded, tmp_path, make_config):
    from gcl_tf.benchmark import status
    from gcl_tf.errors import UserError

    a = npz(tmp_path / "a.npz")
    b = str(shutil.copy(a, tmp_path / "b.npz"))
    bench = {"source": "npz", "dataset": "d", "samples_per_task": None}
    before = make_config({"benchmark": {**bench, "path": a}})
    finished_run(tmp_path / "run", before, fingerprint_of("npz", a) if recorded else None)
    moved = types.SimpleNamespace(config=make_config({"benchmark": {**bench, "path": b}}))
    assert status.finished(moved, str(tmp_path / "run"))
    other = types.SimpleNamespace(config=make_config({"benchmark": {**bench, "path": npz(tmp_path / "c.npz", 2)}}))
    with pytest.raises(UserError, match="holds a finished run with another config .*benchmark.path"):
        status.finished(other, str(tmp_path / "run"))


def test_resume_reads_the_fingerprint_its_model_json_recorded(tmp_path, make_config):
    a = npz(tmp_path / "a.npz")
    b = str(shutil.copy(a, tmp_path / "b.npz"))
    bench = {"source": "npz", "dataset": "d", "samples_per_task": None}
    saved = make_config({"benchmark": {**bench, "path": a}}).to_dict()
    run = tmp_path / "run"
    run.mkdir()
    (run / "model.json").write_text(json.dumps({KEY: fingerprint_of("npz", a)}))
    os.unlink(a)  # gone from where it was: the recorded fingerprint alone recognises it
    planned = make_config({"benchmark": {**bench, "path": b}})
    assert moved_run_data(str(run), saved, planned) == ("benchmark.path",)
    assert moved_data(saved, planned) == ()  # nothing recorded and the old path gone: not recognised
