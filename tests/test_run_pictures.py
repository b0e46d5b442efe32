"""A run names what it runs and leaves a picture (issue 71): its first line says the method, the
trunk and the stream; at its end a table of each task and DIR/plots.png (the accuracy matrix as
a heatmap, each task over the stream); python -m gcl_tf.benchmark plots RUN draws it again."""
from __future__ import annotations

import json
import os

import numpy as np
import yaml

from conftest import TINY


def test_a_run_names_its_method_and_trunk_prints_each_task_and_draws_its_plots(tmp_path, capsys):
    from gcl_tf import train

    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({**TINY, "method": {"name": "er", "memory_size": 50},
                                      "train": {**TINY["train"], "verbose": 1}}))
    run = tmp_path / "run"
    assert train.main(["--config", str(config), "--output", str(run)]) == 0
    out = capsys.readouterr().out.splitlines()
    first = next(line for line in out if " on mlp" in line)
    assert first.startswith("er on mlp (32 hidden units), permuted digits (digits), 3 tasks, batch 10, sgd 0.1, seed 0")
    results = json.loads((run / "results.json").read_text())
    R = np.asarray(results["accuracy_matrix"])
    header = out.index("task  learned  at end  forgot")
    rows = out[header + 1: header + 4]
    assert [float(r.split()[1]) for r in rows] == [round(R[j, j], 2) for j in range(3)]
    assert [float(r.split()[2]) for r in rows] == [round(R[2, j], 2) for j in range(3)]
    forgot = [float(r.split()[3]) for r in rows[:2]]
    assert np.isclose(np.mean(forgot), results["fgt"], atol=0.01) and rows[2].split()[3] == "-"
    png = (run / "plots.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000

    # python -m gcl_tf.benchmark plots RUN: a single run's folder is accepted, its picture redrawn.
    from gcl_tf.benchmark import plots

    os.unlink(run / "plots.png")
    assert plots.main([str(run)]) == 0
    assert (run / "plots.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "task  learned  at end  forgot" in capsys.readouterr().out
