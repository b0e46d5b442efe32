"""The search space and the command line: each method's default grid, one-line space and CLI errors,
the report, and what keeps a search resumable."""
from __future__ import annotations

import json
import os

import pytest
from tune_harness import (
    TINY,
    cli_error,
    single_process,  # noqa: F401 - an autouse fixture
    write_config,
)


# ----------------------------------------------------------------------------- the space
def test_every_method_has_a_default_grid_on_its_own_config_keys():
    """The paper's grids, declared by the method classes (tune_grid) on top of the common
    optimizer and learning-rate grid; a method that declares none gets the common grid."""
    from gcl_tf import methods
    from gcl_tf.config import resolve
    from gcl_tf.tune import COMMON_GRID, default_grid, search_space

    for name in methods.names():
        config = resolve({"method": {"name": name}})
        space = search_space(config, default_grid(name), "grid", where=f"default grid of {name}")
        assert space["train.learning_rate"] == [0.0002, 0.001, 0.01, 0.1, 0.3, 1.0]
    gcl = search_space(resolve({"method": {"name": "gcl"}}), default_grid("gcl"))
    assert list(gcl) == ["train.optimizer", "train.learning_rate", "method.graph_lambda",
                         "method.context_temperature", "method.target_temperature"]
    assert gcl["method.graph_lambda"] == [0.0, 10.0, 50.0, 100.0, 1000.0, 5000.0]
    assert default_grid("ewc")["method.ewc_lambda"] == [0.1, 1.0, 10.0, 100.0, 1000.0]
    assert default_grid("gem")["method.margin"] == [0.0, 0.1, 0.5, 1.0]
    assert default_grid("mer") == {"train.optimizer": ["sgd"],  # the class's key replaces the common one
                                   "train.learning_rate": COMMON_GRID["train.learning_rate"],
                                   "method.beta": [0.01, 0.03, 0.1, 0.3, 1.0]}
    assert default_grid("er_ace") == default_grid("agem") == COMMON_GRID  # nothing declared
    assert set(default_grid("derpp")) == {"train.optimizer", "train.learning_rate", "method.alpha", "method.beta"}
    default_grid("ewc")["method.ewc_lambda"].append(5.0)  # a copy: the class's grid is untouched
    assert methods.method_class("ewc").tune_grid["method.ewc_lambda"][-1] == 1000.0


def test_the_default_space_is_the_methods_default_grid():
    from gcl_tf.tune import Search

    raw = {k: v for k, v in TINY.items() if k != "tune"}
    search = Search(raw, ["method.name=gem"])
    assert search.default_space and search.tuner == "grid"
    assert search.space == {"train.optimizer": ["adam", "sgd"],
                            "train.learning_rate": [0.0002, 0.001, 0.01, 0.1, 0.3, 1.0],
                            "method.margin": [0.0, 0.1, 0.5, 1.0]}
    assert search.max_trials == 2 * 6 * 4  # the whole grid
    assert Search(raw, tuner="random").max_trials == 10
    # Values given as the config's types (the grid's integers are floats for float keys).
    space = "tune.space={train.learning_rate: {min: 1e-4, max: 1, log: true}, method.memory_size: [10, 20]}"
    ranged = Search(raw, [space], tuner="bayesian", max_trials=3)
    assert ranged.space == {"train.learning_rate": {"min": 0.0001, "max": 1.0, "log": True, "step": None},
                            "method.memory_size": [10, 20]}
    assert ranged.max_trials == 3
    trial = ranged.trial_config({"train.learning_rate": 0.003, "method.memory_size": 20})
    assert trial.eval.split == "validation" and trial.benchmark.validation_fraction == pytest.approx(0.1)
    assert trial.train.learning_rate == pytest.approx(0.003) and trial.method.memory_size == 20


@pytest.mark.parametrize("space, tuner, expected", [
    ({"train.learnin_rate": [0.1]}, "grid", ["tune.space: unknown key 'train.learnin_rate'; did you mean "
                                             "'train.learning_rate'?"]),
    ({"method.margin": [0.5]}, "grid", ["unknown key 'method.margin'", "allowed: method.memory_size"]),
    ({"optimizer": ["sgd"]}, "grid", ["unknown key 'optimizer'", "train.<key>"]),
    ({"method.name": ["er", "gcl"]}, "grid", ["'method.name' cannot be searched"]),
    ({"eval.split": ["test"]}, "grid", ["'eval.split' cannot be searched"]),
    ({"train.optimizer": ["sgd", "rmsprop"]}, "grid", ["tune.space.train.optimizer[1]", "allowed: sgd, adam"]),
    ({"train.learning_rate": [0.1, -1]}, "grid", ["train.learning_rate[1]", "out of range"]),
    ({"train.learning_rate": []}, "grid", ["train.learning_rate", "empty"]),
    ({"train.learning_rate": [0.1, 0.1]}, "grid", ["listed twice"]),
    ({"train.learning_rate": {"min": 0.001, "max": 1}}, "grid", ["needs the random or bayesian tuner"]),
    ({"train.learning_rate": {"min": 1, "max": 0.1}}, "random", ["min 1.0 is not below max 0.1"]),
    ({"train.learning_rate": {"min": 0.1}}, "random", ["needs 'max'"]),
    ({"train.learning_rate": {"min": 0.1, "max": 1, "scale": 2}}, "random", ["unknown range key 'scale'"]),
    ({"train.optimizer": {"min": 0, "max": 1}}, "random", ["a range needs a numeric key"]),
    ({"train.learning_rate": 0.1}, "grid", ["expected a list of values or a range"]),
    ({}, "grid", ["tune.space: expected a non-empty mapping"]),
])
def test_space_errors_are_one_line(space, tuner, expected):
    from gcl_tf.errors import ConfigError
    from gcl_tf.tune import Search

    raw = dict(TINY, tune={"space": space, "tuner": tuner})
    with pytest.raises(ConfigError) as info:
        Search(raw)
    message = str(info.value)
    assert "\n" not in message
    for part in expected:
        assert part in message, message


def test_cli_errors_end_with_one_line_and_exit_2(tmp_path, capsys):
    config = write_config(tmp_path)
    out = str(tmp_path / "search")

    lines = cli_error(capsys, ["--config", config, "--set", "tune.space={train.momentum: [0.9]}", "--output", out])
    assert len(lines) == 1 and "unknown key 'train.momentum'" in lines[0]
    lines = cli_error(capsys, ["--config", config, "--tuner", "annealing"])  # argparse's own usage error
    assert "invalid choice: 'annealing'" in lines[-1]
    lines = cli_error(capsys, ["--config", str(tmp_path / "missing.yaml")])
    assert len(lines) == 1 and "does not exist" in lines[0]
    lines = cli_error(capsys, ["--config", config, "--max-trials", "0"])
    assert len(lines) == 1 and "--max-trials" in lines[0]
    lines = cli_error(capsys, ["--config", config, "--workers", "0"])
    assert len(lines) == 1 and "--workers: 0 is out of range" in lines[0]
    with pytest.MonkeyPatch.context() as patch:  # a distributed search of one's own takes --workers 1
        patch.setenv("KERASTUNER_TUNER_ID", "chief")
        lines = cli_error(capsys, ["--config", config, "--workers", "2"])
    assert len(lines) == 1 and "KERASTUNER_TUNER_ID is set; allowed: --workers 1" in lines[0]

    # A folder that is not a search is never taken over, even with --overwrite.
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    for extra in ([], ["--overwrite"], ["--workers", "2", "--overwrite"]):  # refused before a worker starts
        lines = cli_error(capsys, ["--config", config, "--output", str(tmp_path / "notes"), *extra])
        assert len(lines) == 1 and "holds no search" in lines[0]
    assert (tmp_path / "notes" / "keep.txt").read_text() == "mine"

    # Resuming a search with another space is refused (a KerasTuner project would keep the old one).
    from gcl_tf import tune

    os.makedirs(out)
    saved = tune.Search(TINY, output_dir=out).description()
    with open(os.path.join(out, tune.SEARCH_FILE), "w") as handle:
        json.dump({**saved, "space": {"train.learning_rate": [1.0]}}, handle)
    lines = cli_error(capsys, ["--config", config, "--output", out])
    assert len(lines) == 1 and "different space" in lines[0] and "--overwrite" in lines[0]
    with open(os.path.join(out, tune.SEARCH_FILE), "w") as handle:
        json.dump(saved, handle)
    lines = cli_error(capsys, ["--config", config, "--output", out, "--set", "benchmark.num_tasks=3"])
    assert len(lines) == 1 and "different config (benchmark.num_tasks: 2 then, 3 now)" in lines[0]
    lines = cli_error(capsys, ["--config", config, "--output", out, "--tuner", "random"])
    assert len(lines) == 1 and "different tuner" in lines[0]


@pytest.mark.parametrize("finished", [12, 4, 1])
def test_the_report_says_how_many_of_the_finished_trials_it_lists(finished, tmp_path, capsys):
    """12 finished trials: the best 10 listed and the report says so (and where the rest are); 4:
    all, best first; 1: "1 trial finished". best.json holds every finished trial."""
    from types import SimpleNamespace

    from gcl_tf import tune
    from gcl_tf.tune.search import Search

    search = Search(TINY, output_dir=str(tmp_path))
    values = {"train.learning_rate": 0.1, "train.optimizer": "sgd"}
    trials = {f"{i:02d}": SimpleNamespace(trial_id=f"{i:02d}", status="COMPLETED", score=50.0 + i,
                                          hyperparameters=SimpleNamespace(values=values)) for i in range(finished)}
    tune.report(search, SimpleNamespace(trials=trials))
    out = capsys.readouterr().out
    listed = [line for line in out.splitlines() if line.startswith("  trial ")]
    if finished == 12:
        assert "12 trials finished; validation ACC, the best 10 of 12 (all in " in out and len(listed) == 10
    elif finished == 4:
        assert "4 trials finished; validation ACC, best first:" in out and len(listed) == 4
    else:
        assert "1 trial finished; validation ACC, best first:" in out and len(listed) == 1
    assert listed[0].startswith(f"  trial {finished - 1:02d}  {50.0 + finished - 1:6.2f}")  # the best first
    with open(tmp_path / "best.json") as handle:
        assert len(json.load(handle)["trials"]) == finished


def test_a_search_resumes_when_its_config_starts_from_other_values_of_the_searched_keys(tmp_path):
    """Every trial sets the searched keys, so their values in the config do not change the search:
    a preset that takes the search's best trial keeps the search resumable (saved searches
    recorded those values: they are dropped on both sides). Any other key is still compared."""
    from gcl_tf import tune
    from gcl_tf.errors import UserError
    from gcl_tf.tune.search import check_same_search

    out = str(tmp_path / "search")
    os.makedirs(out)
    saved = tune.Search(TINY, output_dir=out).description()
    assert "learning_rate" not in saved["config"]["train"] and "optimizer" not in saved["config"]["train"]
    saved["config"]["train"]["learning_rate"] = 0.1  # as a search saved before it dropped them
    with open(os.path.join(out, tune.SEARCH_FILE), "w") as handle:
        json.dump(saved, handle)
    best = {**TINY, "train": {**TINY["train"], "learning_rate": 0.01, "optimizer": "adam"}}
    check_same_search(tune.Search(best, output_dir=out))  # no error
    other = {**TINY, "train": {**TINY["train"], "batch_size": 20}}
    with pytest.raises(UserError, match=r"different config \(train.batch_size: 10 then, 20 now\)"):
        check_same_search(tune.Search(other, output_dir=out))


def test_a_key_added_since_a_search_began_keeps_it_resumable(tmp_path):
    """search.json and a finished trial's results.json hold the keys of their day; a key added
    since (here train.deterministic and train.checkpoint_every, removed from what was saved)
    takes its default when a resumed search compares: the search goes on and the finished trial
    is not trained again. A key that differs is still refused."""
    import copy

    from gcl_tf import config as config_lib
    from gcl_tf import tune
    from gcl_tf.errors import UserError
    from gcl_tf.tune.search import check_same_search, finished_run

    out = str(tmp_path / "search")
    os.makedirs(out)
    search = tune.Search(TINY, output_dir=out)
    saved = search.description()
    for key in ("deterministic", "checkpoint_every"):
        saved["config"]["train"].pop(key)
    with open(os.path.join(out, tune.SEARCH_FILE), "w") as handle:
        json.dump(saved, handle)
    check_same_search(search)  # no error
    saved["config"]["method"]["memory_size"] = 60
    with open(os.path.join(out, tune.SEARCH_FILE), "w") as handle:
        json.dump(saved, handle)
    with pytest.raises(UserError, match=r"different config \(method.memory_size: 60 then, 50 now\)"):
        check_same_search(search)

    trial = config_lib.resolve(copy.deepcopy(TINY))
    results = {"config": trial.to_dict(), "eval_split": "validation", "acc": 50.0}
    del results["config"]["train"]["deterministic"]
    with open(os.path.join(out, "results.json"), "w") as handle:
        json.dump(results, handle)
    assert finished_run(out, trial)["acc"] == 50.0

