"""The searched presets as a config folder for the paper suite (issue 22, docs/tuning.md).

For each Fashion-MNIST benchmark, copies ``configs/<benchmark>.yaml`` into ``OUT/`` with its
``gcl`` and ``er`` presets set to the best trial of a search's ``best.json`` (the searched dotted
keys over the preset; the rest of the preset and of the config unchanged), so that the test runs
are one resumable command with mean +- std tables:

    python docs/results/search/tuned_configs.py docs/results/search/configs
    python -m gcl_tf.benchmark paper --config-dir docs/results/search/configs \\
        --benchmarks permuted_fashion_mnist rotated_fashion_mnist split_fashion_mnist \\
        --methods gcl er --seeds 3 --studies main --output docs/results/search/test

``--searches first`` (the default) takes the first searches, ``docs/results/search/<short>-<method>``
(Permuted and Rotated scored over their first 10 tasks); ``--searches 20tasks`` takes the searches
scored over all 20 tasks of Permuted and Rotated, ``<short>-<method>-20tasks`` (Split's first
search already scored its whole stream, so Split keeps it):

    python docs/results/search/tuned_configs.py docs/results/search/configs-20tasks --searches 20tasks

A benchmark whose two searches have not both finished is left out (and said so).
"""
import argparse
import copy
import json
import os
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SEARCHES = os.path.join(ROOT, "docs", "results", "search")
BENCHMARKS = {"permuted_fashion_mnist": "permuted", "rotated_fashion_mnist": "rotated",
              "split_fashion_mnist": "split"}
METHODS = ("gcl", "er")
SEARCHES_BY_NAME = {  # --searches: the search folder of each benchmark, {method} filled in
    "first": {"permuted_fashion_mnist": "permuted-{method}", "rotated_fashion_mnist": "rotated-{method}",
              "split_fashion_mnist": "split-{method}"},
    "20tasks": {"permuted_fashion_mnist": "permuted-{method}-20tasks",
                "rotated_fashion_mnist": "rotated-{method}-20tasks", "split_fashion_mnist": "split-{method}"},
}


def with_values(preset: dict, values: dict) -> dict:
    """``preset`` with each dotted key of ``values`` set (``method.graph_lambda`` -> method: {graph_lambda})."""
    out = copy.deepcopy(preset)
    for dotted, value in values.items():
        section, key = dotted.split(".", 1)
        out.setdefault(section, {})[key] = value
    return out


def tuned_config(benchmark: str, searches: str) -> tuple[dict, list[str]] | None:
    with open(os.path.join(ROOT, "configs", benchmark + ".yaml")) as handle:
        config = yaml.safe_load(handle)
    notes = []
    for method in METHODS:
        folder = SEARCHES_BY_NAME[searches][benchmark].format(method=method)
        best_file = os.path.join(SEARCHES, folder, "best.json")
        if not os.path.exists(best_file):
            return None
        with open(best_file) as handle:
            best = json.load(handle)
        preset = {k: v for k, v in config["presets"][method].items() if k != "tune"}  # searched already
        config["presets"][method] = with_values(preset, best["values"])
        notes.append(f"{method}: {folder} trial {best['trial_id']} of {best['trials_finished']}, validation ACC "
                     f"{best['val_acc']:.2f}")
    config["presets"] = {m: config["presets"][m] for m in METHODS}
    return config, notes


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=os.path.join(SEARCHES, "configs"))
    parser.add_argument("--searches", choices=sorted(SEARCHES_BY_NAME), default="first")
    args = parser.parse_args(argv)
    out = args.out
    os.makedirs(out, exist_ok=True)
    for benchmark in BENCHMARKS:
        made = tuned_config(benchmark, args.searches)
        if made is None:
            print(f"{benchmark}: its searches have not both finished; left out")
            continue
        config, notes = made
        path = os.path.join(out, benchmark + ".yaml")
        with open(path, "w") as handle:
            handle.write(f"# configs/{benchmark}.yaml with the best trials of the searches of issue 22:\n")
            handle.write("".join(f"#   {note}\n" for note in notes))
            handle.write("# Written by docs/results/search/tuned_configs.py; do not edit by hand.\n")
            yaml.safe_dump(config, handle, sort_keys=False)
        print(f"{path}: " + "; ".join(notes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
