"""Issue 49's first goal: what today's protocol gives a method at one memory size, seed by seed.

The same method at the same memory under the paper's protocol (replay batch 10, no augmentation:
the paper suite's ``split_cifar10`` runs, the main run or the memory study's variant) and under
today's (``split_cifar10_ocl``: the in-step augmentation, replay batch 64), paired by seed. The
goal: ER at memory 500 at least 15 points higher under today's protocol.

    python docs/results/split_cifar10_ocl/protocol_gain.py --method er --memory 500 \
        --paper docs/results/split_cifar10 --today docs/results/split_cifar10_ocl \
        --output docs/results/split_cifar10_ocl/protocol_gain.json
"""
from __future__ import annotations

import argparse
import json
import sys


def runs_by_seed(folder: str, benchmark: str, method: str, memory: int) -> dict:
    """{seed: results} of ``method``'s runs of ``benchmark`` in the suite ``folder`` at ``memory``
    on the method's preset trunk (its main run, or the memory study's variant)."""
    from gcl_tf.benchmark import layout

    wanted = {method, layout.memory_variant(method, memory)}
    return {r.seed: r.results for r in layout.collect(folder)
            if r.benchmark == benchmark and r.variant in wanted and r.memory_size == memory}


def gain(paper: dict, today: dict) -> dict:
    """Per seed present in both: the two ACCs and their difference; and the difference's mean ± s.e."""
    from gcl_tf.benchmark.layout import mean_std, paired_difference

    seeds = sorted(set(paper) & set(today))
    rows = {s: {"paper": paper[s]["acc"], "today": today[s]["acc"], "gain": today[s]["acc"] - paper[s]["acc"]}
            for s in seeds}
    mean, se, n = paired_difference([(paper[s]["acc"], today[s]["acc"]) for s in seeds])
    return {"seeds": rows, "gain_mean": mean, "gain_se": se, "n": n,
            "paper": dict(zip(("mean", "std", "n"), mean_std(paper[s]["acc"] for s in paper))),
            "today": dict(zip(("mean", "std", "n"), mean_std(today[s]["acc"] for s in today)))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="er")
    parser.add_argument("--memory", type=int, default=500)
    parser.add_argument("--paper", default="docs/results/split_cifar10", help="the paper protocol's suite folder")
    parser.add_argument("--today", default="docs/results/split_cifar10_ocl", help="today's protocol's suite folder")
    parser.add_argument("--output", help="JSON file for the result")
    args = parser.parse_args(argv)
    paper = runs_by_seed(args.paper, "split_cifar10", args.method, args.memory)
    today = runs_by_seed(args.today, "split_cifar10_ocl", args.method, args.memory)
    words = ["python", "docs/results/split_cifar10_ocl/protocol_gain.py", *(sys.argv[1:] if argv is None else argv)]
    out = {"command": " ".join(words),
           "method": args.method, "memory_size": args.memory, **gain(paper, today)}
    for seed, row in out["seeds"].items():
        print(f"seed {seed}: paper {row['paper']:.2f}  today {row['today']:.2f}  gain {row['gain']:+.2f}")
    print(f"gain {out['gain_mean']:+.2f} ± {out['gain_se']:.2f} (s.e., {out['n']} seeds)")
    if args.output:
        with open(args.output, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
