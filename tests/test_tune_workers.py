"""Local workers (their command, a shared search, a stop and a failure), Bayesian searches' budget, and
the shipped searched configs."""
from __future__ import annotations

import glob
import json
import os
import re

import pytest
import yaml
from tune_harness import (
    TINY,
    assert_the_whole_grid_ran_and_the_best_is_reported,
    local_search_with_both_workers_busy,
    processes_on,
    single_process,  # noqa: F401 - an autouse fixture
    start_local_search,
)

from conftest import REPO


# ----------------------------------------------------------------------------- --workers N on one machine
def test_local_workers_command_and_threads(tmp_path, monkeypatch):
    from gcl_tf.tune import build_parser, local

    assert [local.threads_per_worker(n, cores=2) for n in (1, 2, 3)] == [2, 1, 1]
    assert local.threads_per_worker(4, cores=16) == 4
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(["--config", "c.yaml", "--output", "rel/s", "--workers", "3", "--overwrite",
                                      "--set", "seed=1", "--tuner", "random", "--max-trials", "5"])
    command = local.worker_command(args, "rel/s")
    # The workers' folder and config are absolute, and the chief's own options are not theirs.
    assert command[command.index("--output") + 1] == str(tmp_path / "rel" / "s")
    assert command[command.index("--config") + 1] == str(tmp_path / "c.yaml")
    assert "--workers" not in command and "--overwrite" not in command
    assert command[-6:] == ["--tuner", "random", "--max-trials", "5", "--set", "seed=1"]


@pytest.mark.slow
def test_local_workers_share_a_search_stop_on_sigterm_and_resume(tmp_path):
    import signal

    # Stopped while both workers run a trial: the chief stops them, nothing is left running.
    cwd, folder, process, lines, first = local_search_with_both_workers_busy(tmp_path)
    process.send_signal(signal.SIGTERM)
    assert process.wait(120) == 128 + signal.SIGTERM
    assert processes_on(folder) == []
    assert "2 worker processes on this machine" in "".join(first)
    assert {re.search(r"^\[(tuner\d)\] trial", line).group(1) for line in first
            if re.search(r"^\[tuner\d\] trial \d started", line)} == {"tuner0", "tuner1"}

    # The same command finishes the search: every grid point once, each worker ran trials.
    process, lines = start_local_search(cwd, "rel/search")
    assert process.wait(400) == 0
    out = "".join(list(lines.queue))
    started = re.findall(r"^\[(tuner\d)\] trial (\d) started", out, re.M)
    assert {worker for worker, _ in started} == {"tuner0", "tuner1"}, out
    assert_the_whole_grid_ran_and_the_best_is_reported(folder)
    assert out.count("Best: trial") == 1 and "[chief]" not in out  # the workers' lines, once each


@pytest.mark.slow
@pytest.mark.parametrize("sigint_ignored", [False, True], ids=["foreground", "background-job"])
def test_a_failed_local_worker_stops_the_search_with_one_line(tmp_path, sigint_ignored):
    """Also where SIGINT is ignored (a script's ``... &``): the chief was once woken by a
    simulated SIGINT, which did nothing there, and waited for the dead worker forever."""
    import signal

    _, folder, process, lines, _ = local_search_with_both_workers_busy(tmp_path, sigint_ignored)
    workers = processes_on(folder)
    assert len(workers) == 2
    os.kill(workers[0], signal.SIGKILL)
    assert process.wait(120) == 128 + signal.SIGKILL
    out = "".join(list(lines.queue))
    assert re.search(r"^worker tuner\d was killed by SIGKILL \(its messages are above\); the search stopped: "
                     r"run the same command again", out, re.M), out
    assert processes_on(folder) == []


# ----------------------------------------------------------------------------- Bayesian search
@pytest.mark.parametrize("keys,trials,expected", [(8, 24, 8), (7, 24, 8), (1, 24, 3), (2, 6, 3), (10, 300, 30)])
def test_a_bayesian_search_leaves_most_of_its_budget_to_the_gaussian_process(keys, trials, expected):
    from gcl_tf.tune.search import default_initial_points

    assert default_initial_points(keys, trials) == expected


def test_the_gcl_search_of_issue_22_is_mostly_guided():
    """KerasTuner's default (3 random trials per key) would make the 24 trials over GCL's 8 keys all
    random; the searched keys exclude a one-value list (kernel_width: [median])."""
    from gcl_tf.tune import Search, make_oracle

    with open(os.path.join(REPO, "configs", "permuted_fashion_mnist.yaml")) as handle:
        raw = yaml.safe_load(handle)
    gcl = Search(raw, ["method.name=gcl", "benchmark.num_tasks=10"])
    assert (gcl.tuner, gcl.max_trials, len(gcl.space), gcl.initial_points) == ("bayesian", 24, 8, 8)
    assert make_oracle(gcl, seed=1).num_initial_points == 8
    assert Search(raw, ["method.name=gcl", "tune.initial_points=5"]).initial_points == 5
    assert Search(raw, ["method.name=er"]).initial_points == 3


def test_a_bayesian_search_draws_only_its_initial_points_at_random(tmp_path, monkeypatch, capsys):
    import keras_tuner as kt

    from gcl_tf import tune

    random_draws = []
    real = kt.oracles.BayesianOptimizationOracle._random_populate_space

    def spy(self):
        random_draws.append(len(self.trials))
        return real(self)

    monkeypatch.setattr(kt.oracles.BayesianOptimizationOracle, "_random_populate_space", spy)
    raw = {**TINY, "tune": {"tuner": "bayesian", "max_trials": 5, "initial_points": 2,
                            "space": {"train.learning_rate": {"min": 0.01, "max": 0.3, "log": True}}}}
    summary = tune.search(raw=raw, output_dir=str(tmp_path / "search"))
    assert summary["trials_finished"] == 5
    assert len(random_draws) == 2  # trials 3 to 5: the Gaussian process's picks
    assert "the first 2 trials at random (tune.initial_points)" in capsys.readouterr().out


# ----------------------------------------------------------------------------- issue 22's searched configs
@pytest.mark.parametrize("searches,folder", [("first", "configs"), ("20tasks", "configs-20tasks")])
def test_the_shipped_searched_configs_are_the_searches_best_trials(tmp_path, searches, folder):
    """docs/results/search/<folder>/ (what the test runs of docs/tuning.md trained) is what
    tuned_configs.py writes: each searched key holds the best trial's value, every other key the
    config's own."""
    from helpers import load_script

    searched = os.path.join(REPO, "docs", "results", "search")
    tuned = load_script("docs", "results", "search", "tuned_configs.py")
    assert tuned.main([str(tmp_path), "--searches", searches]) == 0
    shipped = sorted(glob.glob(os.path.join(searched, folder, "*.yaml")))
    assert [os.path.basename(p) for p in shipped] == sorted(os.listdir(tmp_path))
    for path in shipped:
        benchmark = os.path.basename(path)[:-len(".yaml")]
        with open(path) as handle, open(tmp_path / os.path.basename(path)) as made:
            config = yaml.safe_load(handle)
            assert config == yaml.safe_load(made), path
        for method in ("gcl", "er"):
            with open(os.path.join(searched, tuned.SEARCHES_BY_NAME[searches][benchmark].format(method=method),
                                   "best.json")) as handle:
                best = json.load(handle)["values"]
            preset = config["presets"][method]
            assert {key: preset[key.split(".")[0]][key.split(".")[1]] for key in best} == best, (path, method)
            assert "tune" not in preset

