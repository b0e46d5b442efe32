"""The rule that decides whether a searched value becomes a preset (gcl_tf/tune/adopt.py, issue 52
item 6), its arithmetic, and the check end to end on tiny digits streams: every run on validation,
a second dataset, resumable, the verdict the rule's on the runs' own numbers."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import yaml
from test_early_errors import without_tensorflow

from gcl_tf.tune import adopt

from conftest import REPO

TINY = {
    "seed": 0,
    "output_dir": "unused",
    "benchmark": {"name": "permuted", "dataset": "digits", "source": "digits", "num_tasks": 2, "samples_per_task": 150},
    "method": {"name": "er", "memory_size": 50},
    "model": {"backbone": "mlp", "hidden_size": 32},
    "train": {"batch_size": 10, "learning_rate": 0.1, "verbose": 0, "log_every": 0},
    "eval": {"batch_size": 128},
}


def test_mean_and_sample_std():
    assert adopt.mean_std([1.0, 2.0, 3.0]) == pytest.approx((2.0, 1.0))
    assert adopt.mean_std([5.0]) == (5.0, 0.0)


def test_the_issue_52_case_is_kept_at_the_paper_value():
    """ER's Permuted MNIST learning rate 0.223 against the paper's 0.1, as measured here: better and
    steadier on MNIST's validation, but it falls apart on Fashion-MNIST with the same config."""
    verdict = adopt.decide({"searched": [80.05, 82.00, 80.30], "paper": [76.70, 81.15, 77.90]},
                           {"searched": [59.35, 66.15, 67.80], "paper": [67.60, 70.45, 71.35]})
    assert verdict.stable and not verdict.holds and not verdict.adopt
    assert "64.43 < paper 69.80 - 1.96 = 67.84" in verdict.reasons[1]


def test_a_steady_value_that_holds_elsewhere_is_adopted():
    verdict = adopt.decide({"searched": [82, 83, 82.5], "paper": [79, 81, 80]},
                           {"searched": [70, 70.5, 70.1], "paper": [70, 71, 72]})
    assert verdict.adopt and verdict.stable and verdict.holds  # 70.2 >= 71 - 1 on the second dataset


def test_a_higher_mean_that_scatters_is_not_stable():
    verdict = adopt.decide({"searched": [90, 70, 86], "paper": [80, 81, 80.5]},
                           {"searched": [70, 70, 70], "paper": [70, 70, 70]})
    assert not verdict.stable and not verdict.adopt  # 82 - 10.6 against 80.5 - 0.5


def test_worst_new_task_reads_the_diagonal():
    assert adopt.worst_new_task([[90.0, 10.0], [80.0, 35.0]]) == 35.0


def write_config(tmp_path) -> str:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return str(path)


def second_npz(tmp_path) -> str:
    """Another 8x8 ten-class dataset: the digits, noisier."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(0)
    x = np.clip(x.reshape(-1, 8, 8) * 16 + rng.normal(0, 40, (len(x), 8, 8)), 0, 255).astype(np.uint8)
    path = tmp_path / "noisy_digits.npz"
    np.savez(path, x_train=x[:1400], y_train=y[:1400], x_test=x[1400:], y_test=y[1400:])
    return str(path)


def test_the_check_runs_each_value_over_seeds_on_both_datasets_and_resumes(tmp_path, capsys):
    config, data, out = write_config(tmp_path), second_npz(tmp_path), str(tmp_path / "check")
    argv = ["--config", config, "--method", "er", "--paper", "train.learning_rate=0.01",
            "--searched", "train.learning_rate=0.05",
            "--second", "benchmark.source=npz", "--second", f"benchmark.path={data}",
            "--second", "benchmark.dataset=noisy_digits", "--seeds", "2", "--output", out]
    assert adopt.main(argv) == 0
    report = json.load(open(os.path.join(out, adopt.ADOPT_FILE)))
    acc = {stream: {arm: [] for arm in adopt.ARMS} for stream in adopt.STREAMS}
    for stream in adopt.STREAMS:
        for arm in adopt.ARMS:
            for seed in range(2):
                results = json.load(open(os.path.join(out, f"{stream}-{arm}-seed{seed}", "results.json")))
                assert results["eval_split"] == "validation" and results["seed"] == seed
                cfg = results["config"]
                assert cfg["train"]["learning_rate"] == (0.01 if arm == "paper" else 0.05)
                assert cfg["benchmark"]["source"] == ("npz" if stream == "second" else "digits")
                acc[stream][arm].append(results["acc"])
    assert report["acc"] == acc
    verdict = adopt.decide(acc["own"], acc["second"])
    assert (report["adopt"], report["reasons"]) == (verdict.adopt, list(verdict.reasons))
    assert "adopt the searched value" in capsys.readouterr().out if verdict.adopt else True
    assert os.path.exists(os.path.join(out, "adopt.md"))
    # Run again: every run is read, none trained.
    stamps = {d: os.path.getmtime(os.path.join(out, d, "results.json")) for d in os.listdir(out)
              if os.path.isdir(os.path.join(out, d))}
    assert len(stamps) == 8
    assert adopt.main(argv) == 0
    assert stamps == {d: os.path.getmtime(os.path.join(out, d, "results.json")) for d in stamps}
    # The config's preset (or --searched) changed since: its finished runs are not trained again, nor resumed.
    changed = [a if a != "train.learning_rate=0.05" else "train.learning_rate=0.2" for a in argv]
    with pytest.raises(SystemExit) as stop:
        adopt.main(changed)
    assert stop.value.code == 2
    assert "holds a finished run of another config" in capsys.readouterr().err
    assert stamps == {d: os.path.getmtime(os.path.join(out, d, "results.json")) for d in stamps}


@pytest.mark.parametrize("args, expected", [
    (["--seeds", "1"], "--seeds: 1 is too few; allowed: 2 or more"),
    (["--no-paper"], "--paper: none given; allowed:"),
    (["--no-second"], "--second: none given; allowed:"),
    (["--paper", "train.learning_rate=-1"], "train.learning_rate"),
])
def test_mistakes_end_in_one_line_before_tensorflow(tmp_path, args, expected):
    argv = ["--config", os.path.join(REPO, "configs", "quickstart.yaml"), "--method", "er",
            "--output", str(tmp_path / "out")]
    if "--no-paper" not in args:
        argv += ["--paper", "train.learning_rate=0.01"]
    if "--no-second" not in args:
        argv += ["--second", "benchmark.num_tasks=2"]
    argv += [a for a in args if not a.startswith("--no-")]
    done = without_tensorflow("gcl_tf.tune.adopt", *argv)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], done.stderr
