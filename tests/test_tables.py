"""The suite's tables computed from hand-made results: the ablation's paired change against full GCL."""
import math

import pytest

from gcl_tf.benchmark import layout, tables


def run(variant, seed, acc, fgt, graph_lambda=50.0):
    config = {"method": {"name": "gcl", "graph_lambda": graph_lambda, "test_graph_samples": 30}}
    return layout.RunResult("split_cifar10", variant, seed, f"/x/{variant}/seed{seed}",
                            {"acc": acc, "fgt": fgt, "config": config})


def test_paired_difference_mean_and_standard_error():
    mean, se, n = layout.paired_difference([(50.0, 48.0), (47.0, 46.0), (48.0, 44.0)])
    # differences -2, -1, -4: mean -7/3, sample std sqrt(7/3), s.e. std / sqrt(3)
    assert n == 3
    assert mean == pytest.approx(-7 / 3)
    assert se == pytest.approx(math.sqrt(7 / 3) / math.sqrt(3))
    mean, se, n = layout.paired_difference([(50.0, 48.5), (float("nan"), 1.0), (None, 2.0)])
    assert (mean, n) == (-1.5, 1) and math.isnan(se)
    assert layout.paired_difference([])[2] == 0


def test_ablation_change_pairs_seeds_not_means():
    # Full GCL on seeds 0-2; the variant on seeds 0 and 2 only: the change uses those two pairs,
    # not the difference of the two columns' means (which mixes seed 1 in).
    runs = [run("gcl", 0, 50.0, 30.0), run("gcl", 1, 44.0, 36.0), run("gcl", 2, 49.0, 32.0),
            run("gcl-no_graph_reg", 0, 47.0, 35.0, 0.0), run("gcl-no_graph_reg", 2, 48.0, 33.0, 0.0)]
    md, text = tables.ablation_table(runs)
    rows = {row.split(",")[1]: row.split(",") for row in text.strip().splitlines()[1:]}
    header = text.splitlines()[0].split(",")
    variant = dict(zip(header, rows["gcl-no_graph_reg"]))
    assert variant["paired_seeds"] == "2"
    assert float(variant["acc_change_mean"]) == pytest.approx(-2.0)  # (-3 + -1) / 2
    assert float(variant["acc_change_se"]) == pytest.approx(math.sqrt(2.0) / math.sqrt(2))
    assert float(variant["fgt_change_mean"]) == pytest.approx(3.0)  # (+5 + +1) / 2
    assert dict(zip(header, rows["gcl"]))["acc_change_mean"] == ""
    assert "| Change in accuracy vs full GCL, paired by seed |  | -2.00 ± 1.00 (s.e., 2 seeds) |" in md
    assert "| Change in forgetting vs full GCL, paired by seed |  | +3.00 ± 2.00 (s.e., 2 seeds) |" in md
