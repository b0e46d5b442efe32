"""The adoption check's numbers: each MNIST preset's validation ACC over seeds (mean +- std, n)
against its search's best trial (seed 0), and the rule of docs/gcl/searched_presets.md
(replace when the best beats the preset's mean by more than the preset's std over seeds).

    python docs/results/search/validation-mnist/summary.py
"""
import glob
import json
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SEARCH = os.path.dirname(HERE)

for bench in ("permuted", "rotated"):
    for method in ("gcl", "er"):
        runs = sorted(glob.glob(f"{HERE}/{bench}-{method}-preset-seed*/results.json"))
        accs = [json.load(open(f))["acc"] for f in runs]
        best_file = f"{SEARCH}/{bench}-mnist-{method}/best.json"
        best = json.load(open(best_file))["val_acc"] if os.path.exists(best_file) else float("nan")
        if not accs:
            print(f"{bench:9s} {method:4s} preset: no run yet; searched best {best:.2f}")
            continue
        mean, std = float(np.mean(accs)), float(np.std(accs, ddof=1)) if len(accs) > 1 else float("nan")
        verdict = "replace" if len(accs) > 1 and best - mean > std else "keep"
        print(f"{bench:9s} {method:4s} preset {mean:.2f} +- {std:.2f} ({len(accs)}) "
              f"[{', '.join(f'{a:.2f}' for a in accs)}]; searched best {best:.2f} (1); "
              f"difference {best - mean:+.2f}: {verdict}")
