"""The suite's tables computed from hand-made results: the ablation's paired change against full GCL."""
import math

import pytest

from gcl_tf.benchmark import layout, study_tables, tables


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
    md, text = study_tables.ablation_table(runs)
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


def main_run(benchmark, method, seed, acc, fgt):
    return layout.RunResult(benchmark, method, seed, f"/x/{benchmark}/{method}/seed{seed}",
                            {"acc": acc, "fgt": fgt, "method": method, "config": {"method": {"name": method}}})


def test_vs_paper_sets_ours_beside_the_published_numbers_and_pairs_the_lead_by_seed():
    from gcl_tf.benchmark import published

    runs = [main_run("permuted_mnist", "gcl", 0, 80.0, 3.0), main_run("permuted_mnist", "gcl", 1, 82.0, 2.0),
            main_run("permuted_mnist", "gcl", 2, 81.0, 4.0),
            main_run("permuted_mnist", "er", 0, 81.0, 4.0), main_run("permuted_mnist", "er", 2, 79.0, 5.0),
            main_run("permuted_mnist", "derpp", 0, 78.0, 6.0),
            main_run("permuted_fashion_mnist", "gcl", 0, 70.0, 3.0)]  # no published numbers: no rows
    md, text = tables.vs_paper_table(runs)
    header = text.splitlines()[0].split(",")
    rows = {tuple(line.split(",")[:2]): dict(zip(header, line.split(","))) for line in text.strip().splitlines()[1:]}
    assert {b for b, _ in rows} == {"permuted_mnist"}
    # every method of the paper's Permuted MNIST column is listed, run or not, and DER++ (ours only)
    assert {m for _, m in rows} == set(published.PAPER_RESULTS["permuted_mnist"]) | {"derpp"}
    er = rows[("permuted_mnist", "er")]
    assert float(er["paper_acc_mean"]) == 79.90 and float(er["paper_fgt_std"]) == 0.45
    assert float(er["paper_gcl_lead"]) == pytest.approx(82.36 - 79.90)
    # GCL - ER over the seeds both ran (0 and 2): -1 and +2, not the difference of the two means
    assert er["gcl_lead_seeds"] == "2"
    assert float(er["gcl_lead_mean"]) == pytest.approx(0.5)
    assert float(er["gcl_lead_se"]) == pytest.approx(math.sqrt(4.5) / math.sqrt(2))
    assert rows[("permuted_mnist", "mer")]["seeds"] == "0" and rows[("permuted_mnist", "mer")]["acc_mean"] == ""
    assert rows[("permuted_mnist", "derpp")]["paper_acc_mean"] == ""
    assert "| Permuted MNIST | ER | 80.00 ± 1.41 (n=2) | 79.90 ± 0.46 | 4.50 ± 0.71 (n=2) | 3.78 ± 0.45 " \
           "| +0.50 ± 1.50 (s.e., 2 seeds) | +2.46 |" in md
    assert "| Permuted MNIST | DER++ | 78.00 (n=1) | - | 6.00 (n=1) | - | +2.00 (1 seed) |  |" in md
    assert "| Permuted MNIST | MER | - | 79.68 ± 0.42 | - | 3.47 ± 0.41 | - | +2.68 |" in md
    assert tables.vs_paper_table([main_run("permuted_fashion_mnist", "gcl", 0, 70.0, 3.0)]) == ("", "")


def test_published_numbers_are_the_papers_tables():
    """Spot checks against the paper's LaTeX (Tables 1 and 2), one per column."""
    from gcl_tf.benchmark import published

    assert published.paper_result("rotated_mnist", "mer", "fgt") == (8.14, 0.46)
    assert published.paper_result("split_svhn", "gcl", "acc") == (60.68, 1.67)
    assert published.paper_result("split_cifar100", "icarl", "acc") == (58.08, 1.44)
    assert published.paper_result("split_miniimagenet", "er", "fgt") == (9.02, 2.49)
    assert published.paper_result("split_cifar10", "icarl", "acc") is None  # the paper's "-"
    assert published.paper_lead("rotated_mnist", "er", "gcl") == 5.55
    assert published.paper_lead("split_cifar10", "er", "gcl") == 19.68


def memory_run(method, size, seed, acc, seconds, preset_size=250):
    variant = method if size == preset_size else layout.memory_variant(method, size)
    return layout.RunResult("split_cifar10", variant, seed, f"/x/{variant}/seed{seed}",
                            {"acc": acc, "fgt": 10.0, "train_seconds": seconds, "method": method,
                             "config": {"method": {"name": method, "memory_size": size}}})


def test_memory_table_gives_each_methods_training_time_by_memory_size_in_minutes():
    runs = [memory_run("er", 250, 0, 30.0, 600.0), memory_run("er", 250, 1, 32.0, 720.0),
            memory_run("er", 100, 0, 20.0, 540.0), memory_run("gcl", 250, 0, 48.0, 3000.0),
            memory_run("gcl", 1000, 0, 57.0, 11100.0)]
    md, text = study_tables.memory_table(runs)
    times = md.split("training time")[1]
    assert "| ER | 9.00 (n=1) | 11.00 ± 1.41 |" in times  # 540 s; 600 and 720 s
    assert "| GCL | - | 50.00 (n=1) | 185.00 (n=1) |" in times
    header = text.splitlines()[0].split(",")
    rows = {tuple(line.split(",")[1:3]): dict(zip(header, line.split(","))) for line in text.strip().splitlines()[1:]}
    assert float(rows["er", "250"]["train_seconds_mean"]) == pytest.approx(660.0)
    assert float(rows["er", "250"]["train_seconds_std"]) == pytest.approx(math.sqrt(7200.0))
    assert float(rows["gcl", "1000"]["train_seconds_mean"]) == pytest.approx(11100.0)
