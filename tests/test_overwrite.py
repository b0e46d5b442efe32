"""--overwrite replaces only what its command wrote (issue 71): never the input run, a folder above
or inside it, a folder holding other files, or a plain file. Each refusal is one line, exit 2,
before TensorFlow loads (the commands run with TensorFlow made unimportable), and leaves every
file as it was."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO

QUICKSTART = os.path.join(REPO, "configs", "quickstart.yaml")
WITHOUT_TENSORFLOW = ("import runpy, sys; sys.modules['tensorflow'] = sys.modules['keras'] = None; "
                      "sys.argv = sys.argv[1:]; runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)")


def without_tensorflow(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-c", WITHOUT_TENSORFLOW, *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=120)


def finished_run(folder) -> str:
    """A finished run's folder as gcl_tf.train leaves it (its files' names; contents enough to read)."""
    os.makedirs(folder / "checkpoints")
    (folder / "checkpoints" / "ckpt-40.index").write_text("")
    (folder / "config.yaml").write_text(open(QUICKSTART).read().split("# Per-method")[0])
    (folder / "model.json").write_text('{"method": "er", "input_shape": [8, 8, 1], "num_classes": 10}')
    (folder / "results.json").write_text("{}")
    (folder / "learner.keras").write_text("weights")
    return str(folder)


def export_folder(folder) -> str:
    """An earlier export's folder (what tf.saved_model.save and gcl_tf.export write)."""
    os.makedirs(folder / "variables")
    (folder / "saved_model.pb").write_text("")
    (folder / "fingerprint.pb").write_text("")
    (folder / "metadata.json").write_text("{}")
    return str(folder)


def snapshot(folder) -> dict:
    return {os.path.relpath(os.path.join(root, name), folder): open(os.path.join(root, name), "rb").read()
            for root, _, names in os.walk(folder) for name in names}


def refused(proc, *expected: str) -> str:
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and all(e in lines[0] for e in expected), proc.stderr
    return lines[0]


def notes(folder) -> str:
    os.makedirs(folder)
    (folder / "notes.txt").write_text("mine")
    return str(folder)


# ----------------------------------------------------------------------------- export
EXPORT_CASES = {  # case: (RUN, OUT given the test's folder; what the line says)
    "OUT is RUN (a copy of a run)": (lambda t: (finished_run(t / "x"), str(t / "x")), "OUT: {out} is RUN_DIR"),
    "OUT above RUN": (lambda t: (finished_run(t / "runs" / "x"), str(t / "runs")), "OUT: {out} holds RUN_DIR"),
    "OUT inside RUN": (lambda t: (finished_run(t / "x"), str(t / "x" / "checkpoints")), "is inside RUN_DIR"),
    "OUT holds notes.txt": (lambda t: (finished_run(t / "x"), notes(t / "mine")),
                            "OUT: {out} holds notes.txt, which --overwrite would not replace"),
    "OUT is a file": (lambda t: (finished_run(t / "x"), notes(t / "mine") + "/notes.txt"),
                      "OUT: {out} is a file; allowed: a new folder, or with --overwrite a SavedModel folder"),
    "OUT an export with more": (lambda t: (finished_run(t / "x"), export_folder(t / "m") and notes(t / "m" / "n")),
                                "which --overwrite would not replace"),
}


@pytest.mark.parametrize("overwrite", [True, False], ids=["--overwrite", "without --overwrite"])
@pytest.mark.parametrize("case", list(EXPORT_CASES))
def test_export_overwrites_only_an_earlier_export_and_never_the_run(case, overwrite, tmp_path):
    make, expected = EXPORT_CASES[case]
    run, out = make(tmp_path)
    if case == "OUT an export with more":
        out = os.path.dirname(out)
    before = snapshot(tmp_path)
    proc = without_tensorflow("gcl_tf.export", *(["--overwrite"] if overwrite else []), run, out)
    line = refused(proc, expected.format(out=out))
    assert "pass --overwrite" not in line
    assert snapshot(tmp_path) == before


def test_export_check_accepts_an_earlier_export_with_overwrite_only(tmp_path):
    from gcl_tf.errors import UserError
    from gcl_tf.export import check_out

    run, out = finished_run(tmp_path / "x"), export_folder(tmp_path / "model")
    check_out(out, True, run)
    check_out(str(tmp_path / "new"), False, run)
    with pytest.raises(UserError, match="exists; pass --overwrite"):
        check_out(out, False, run)


# ----------------------------------------------------------------------------- train, tune, to-npz
def test_train_overwrite_replaces_only_a_run_and_never_its_init_from(tmp_path):
    run = finished_run(tmp_path / "runs" / "a")
    folder = notes(tmp_path / "mine")
    before = snapshot(tmp_path)
    line = refused(without_tensorflow("gcl_tf.train", "--config", QUICKSTART, "--output", folder, "--overwrite"),
                   f"--output: {folder} holds notes.txt, which --overwrite would not replace")
    assert "a run of gcl_tf.train" in line
    refused(without_tensorflow("gcl_tf.train", "--config", QUICKSTART, "--output", str(tmp_path / "runs"),
                               "--init-from", run, "--overwrite"),
            f"--output: {tmp_path / 'runs'} holds init_from {run}; allowed: a path outside init_from")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "checkpoints").mkdir()  # a train name, but no config.yaml: not a run
    refused(without_tensorflow("gcl_tf.train", "--config", QUICKSTART, "--output", str(tmp_path / "plain"),
                               "--overwrite"), "holds no config.yaml, so it is not a run of gcl_tf.train")
    assert snapshot(tmp_path) == {**before}


def test_tune_overwrite_replaces_only_a_search(tmp_path):
    search = tmp_path / "search"
    search.mkdir()
    (search / "search.json").write_text("{}")
    (search / "trial_0000").mkdir()
    (search / "notes.txt").write_text("mine")
    before = snapshot(tmp_path)
    refused(without_tensorflow("gcl_tf.tune", "--config", QUICKSTART, "--output", str(search), "--overwrite"),
            f"--output: {search} holds notes.txt, which --overwrite would not replace: it replaces only a search")
    assert snapshot(tmp_path) == before


def test_to_npz_overwrite_replaces_only_an_npz_of_the_four_arrays(tmp_path):
    other = tmp_path / "other.npz"
    np.savez(other, images=np.zeros(3))
    folder = notes(tmp_path / "mine")
    before = snapshot(tmp_path)
    for output, expected in ((str(other), "is not a .npz of x_train, y_train, x_test, y_test"),
                             (folder + "/notes.txt", "is not a .npz of x_train"),
                             (folder, "is a folder; allowed: the path of a .npz file")):
        refused(without_tensorflow("gcl_tf.data", "to-npz", "--source", "digits", "--output", output,
                                   "--overwrite"), f"--output: {output} ", expected)
    idx = tmp_path / "idx"
    shutil.copytree(folder, idx)
    refused(without_tensorflow("gcl_tf.data", "to-npz", "--source", "idx", "--path", str(idx),
                               "--output", str(idx / "data.npz")), "is inside --path")
    assert {k: v for k, v in snapshot(tmp_path).items() if not k.startswith("idx")} == before


def test_an_empty_output_is_refused_not_read_as_the_default(tmp_path):
    for args in (("gcl_tf.train", "--config", QUICKSTART, "--output", ""),
                 ("gcl_tf.tune", "--config", QUICKSTART, "--output", "")):
        refused(without_tensorflow(*args), "--output: empty; allowed: a folder's path")


def test_train_refuses_a_search_folder_as_tune_refuses_a_run_folder(tmp_path):
    search = tmp_path / "search"
    search.mkdir()
    (search / "search.json").write_text("{}")
    refused(without_tensorflow("gcl_tf.train", "--config", QUICKSTART, "--output", str(search)),
            "is a search's folder (it holds search.json)")
    run = finished_run(tmp_path / "run")
    refused(without_tensorflow("gcl_tf.tune", "--config", QUICKSTART, "--output", run),
            "holds no search (search.json is missing)")


def test_gcl_tf_run_overwrites_only_a_run_too(tmp_path):
    import gcl_tf
    from gcl_tf.errors import UserError

    folder = notes(tmp_path / "mine")
    with pytest.raises(UserError, match="holds notes.txt, which overwrite=True would not replace"):
        gcl_tf.run(QUICKSTART, output_dir=folder, overwrite=True)
    assert os.listdir(folder) == ["notes.txt"]
