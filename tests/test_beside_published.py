"""The tables that set our runs beside published numbers besides Tables 1 and 2 (hand-made results):
the paper's memory figures and CN-DPM table, and today's protocol beside its published re-runs."""
import math

import numpy as np
import pytest

from gcl_tf.benchmark import beside_published, layout, published, study_tables


def run(benchmark, variant, seed, acc, fgt, memory, backbone="resnet18", filters=20, learned=None):
    method = variant.split("-")[0]
    config = {"method": {"name": method, "memory_size": memory}, "model": {"backbone": backbone, "filters": filters}}
    results = {"acc": acc, "fgt": fgt, "method": method, "config": config}
    if learned is not None:
        results["learning_accuracy"] = learned
    return layout.RunResult(benchmark, variant, seed, f"/x/{benchmark}/{variant}/seed{seed}", results)


def rows_of(text):
    header = text.splitlines()[0].split(",")
    return [dict(zip(header, line.split(","))) for line in text.strip().splitlines()[1:]]


def test_memory_beside_the_papers_figures_pairs_gcl_and_er_by_seed():
    b = "split_cifar10"
    runs = [run(b, "er", s, acc, 70.0, 250) for s, acc in enumerate((25.0, 26.0, 24.0))]
    runs += [run(b, "gcl", s, acc, 35.0, 250, "convnet", 64) for s, acc in enumerate((48.0, 50.0, 47.0))]
    runs += [run(b, "er-memory500", s, acc, 60.0, 500) for s, acc in ((0, 30.0), (1, 33.0))]
    runs += [run(b, "gcl-memory500", 0, 52.0, 30.0, 500, "convnet", 64)]
    groups = study_tables.memory_runs(runs)
    md, text = beside_published.memory_vs_paper_table(groups)
    rows = {int(r["memory_size"]): r for r in rows_of(text)}
    assert set(rows) == {250, 500}
    assert float(rows[250]["gcl_minus_er_mean"]) == pytest.approx(((48 - 25) + (50 - 26) + (47 - 24)) / 3)
    assert rows[250]["gcl_minus_er_seeds"] == "3"
    assert rows[500]["gcl_minus_er_seeds"] == "1" and float(rows[500]["gcl_minus_er_mean"]) == 22.0
    assert math.isnan(float(rows[500]["gcl_minus_er_se"] or "nan"))
    assert float(rows[500]["paper_gcl_minus_er"]) == pytest.approx(53.87 - 36.08)
    assert float(rows[500]["er_acc_paper_mean"]) == 36.08 and float(rows[250]["gcl_fgt_paper_mean"]) == 35.69
    assert "| 500 | 31.50 ± 2.12 (n=2) | 36.08 ± 1.09 |" in md
    md, text = beside_published.cndpm_table(groups)
    cndpm = {r["method"]: r for r in rows_of(text)}
    assert float(cndpm["cndpm"]["m500_paper_mean"]) == 43.07 and cndpm["cndpm"]["m500_seeds"] == ""
    assert float(cndpm["gcl"]["m500_mean"]) == 52.0 and float(cndpm["gcl"]["m1000_paper_mean"]) == 57.26
    assert cndpm["er"]["m1000_seeds"] == ""  # not run: no cell of ours
    assert "CN-DPM (quoted)" in md


def test_the_memory_table_takes_any_method_with_a_memory_size_run():
    """Besides the paper's two, a method joins a benchmark's memory table when it has a run at a
    memory size of its own there (``--memory-methods er_ace``), its main run counting at its
    preset's size; a method with main runs only stays out, and so does a benchmark without any."""
    b = "split_cifar10_ocl"
    runs = [run(b, "er", 0, 50.0, 30.0, 500), run(b, "er-memory200", 0, 45.0, 40.0, 200),
            run(b, "er_ace", 0, 52.0, 15.0, 500), run(b, "er_ace-memory200", 0, 42.0, 17.0, 200),
            run(b, "mir", 0, 50.0, 39.0, 500), run(b, "gcl", 0, 56.0, 16.0, 500, "convnet", 64),
            run("split_mnist", "er_ace", 0, 80.0, 10.0, 500)]
    groups = study_tables.memory_runs(runs)
    assert set(groups) == {b}
    assert set(groups[b]) == {("er", 500), ("er", 200), ("er_ace", 500), ("er_ace", 200), ("gcl", 500)}
    md, text = study_tables.memory_table(runs)
    assert "| ER-ACE | 42.00 | 52.00 |" in md


def test_today_pairs_gcl_and_onpro_against_each_method_by_seed_at_its_memory():
    b = "split_cifar10_ocl"
    # ER: no seed 1
    runs = [run(b, "er", s, acc, 30.0, 500, learned=la) for s, acc, la in ((0, 50.0, 80.0), (2, 52.0, 84.0))]
    runs += [run(b, "onpro", s, acc, 10.0, 500) for s, acc in enumerate((60.0, 65.0))]
    runs += [run(b, "gcl", s, acc, 20.0, 500, "convnet", 64, 50.0 + s) for s, acc in enumerate((48.0, 49.0, 47.0))]
    runs += [run(b, "gcl-resnet18", 0, 40.0, 20.0, 500)]
    runs += [run(b, "er-memory200", 0, 40.0, 45.0, 200)]
    runs += [run("split_cifar10", "er", 0, 25.0, 70.0, 250)]  # another protocol: not in this table
    md, text = beside_published.today_table(runs)
    rows = {(r["method"], r["trunk"], r["memory_size"]): r for r in rows_of(text)}
    assert set(rows) == {("er", "resnet18 20", "500"), ("onpro", "resnet18 20", "500"),
                         ("gcl", "convnet 64", "500"), ("gcl", "resnet18 20", "500"), ("er", "resnet18 20", "200")}
    er = rows["er", "resnet18 20", "500"]
    # pairs by seed: GCL − ER on seeds 0 and 2 (-2, -5), OnPro − ER on seed 0 only (+10)
    assert float(er["gcl_minus_mean"]) == pytest.approx(-3.5) and float(er["onpro_minus_mean"]) == pytest.approx(10.0)
    assert float(er["gcl_minus_se"]) == pytest.approx(1.5) and er["onpro_minus_se"] == ""
    assert float(er["published_low"]) == float(er["published_high"]) == 52.08  # PDFK's at 500
    assert float(rows["er", "resnet18 20", "200"]["published_low"]) == 45.72  # and at 200
    # learning accuracy beside FGT: mean ± std over the seeds; "-" where the results do not hold it
    assert float(er["learning_accuracy_mean"]) == 82.0 and float(er["learning_accuracy_std"]) == pytest.approx(8 ** 0.5)
    assert float(rows["gcl", "convnet 64", "500"]["learning_accuracy_mean"]) == 51.0
    assert rows["onpro", "resnet18 20", "500"]["learning_accuracy_mean"] == ""
    assert "| 82.00 ± 2.83 |" in md and "| 51.00 ± 1.00 |" in md and "| LA ours |" in md
    gcl_r18 = rows["gcl", "resnet18 20", "500"]  # GCL on another trunk against GCL on its own: paired
    assert float(gcl_r18["gcl_minus_mean"]) == pytest.approx(8.0)
    assert rows["gcl", "convnet 64", "500"]["gcl_minus_mean"] == ""
    assert rows["er", "resnet18 20", "200"]["gcl_minus_mean"] == ""  # no GCL at 200
    onpro = rows["onpro", "resnet18 20", "500"]
    assert float(onpro["published_low"]) == published.PUBLISHED_TODAY[b]["onpro"][500][0] == 72.6
    assert "| 52.1 |" in md and "| 45.7 |" in md and "| 72.6 |" in md


def test_today_gives_a_variant_run_by_hand_its_own_row_and_pairs_against_the_preset():
    b = "split_cifar10_ocl"
    runs = [run(b, "er", s, acc, 30.0, 500) for s, acc in enumerate((50.0, 52.0))]
    runs += [run(b, "er-resnet18_64", 0, 55.0, 30.0, 500, "resnet18", 64)]  # a trunk: the trunk column says it
    runs += [run(b, "onpro", 0, 70.0, 10.0, 500)]
    runs += [run(b, "onpro-rotations4", s, acc, 12.0, 500) for s, acc in enumerate((60.0, 58.0))]
    assert [beside_published.setting_of(r) for r in runs] == ["", "", "", "", "rotations4", "rotations4"]
    md, text = beside_published.today_table(runs)
    rows = {(r["method"], r["trunk"], r["setting"]): r for r in rows_of(text)}
    assert set(rows) == {("er", "resnet18 20", ""), ("er", "resnet18 64", ""), ("onpro", "resnet18 20", ""),
                         ("onpro", "resnet18 20", "rotations4")}
    variant = rows["onpro", "resnet18 20", "rotations4"]
    assert variant["seeds"] == "2" and float(variant["acc_mean"]) == 59.0
    assert variant["published_low"] == ""  # a deviation is not the published method
    assert float(variant["onpro_minus_mean"]) == 10.0  # the preset's seed 0 against the variant's
    assert float(rows["er", "resnet18 20", ""]["onpro_minus_mean"]) == 20.0  # against the preset, not the variant
    assert "| OnPro (rotations4) |" in md and "| 72.6 |" in md
    # a variant keeps its name whatever memory size or trunk its folder also names (gcl-paper*: the paper's
    # GCL beside the today's preset), and its memory size is the row's column
    paper = [run(b, "gcl-paper", 0, 53.0, 11.0, 500, "convnet", 64), run(b, "gcl-paper-memory200", 0, 40.0, 3.0, 200,
                                                                       "convnet", 64),
             run(b, "gcl-paper-resnet18", 0, 10.0, 50.0, 500)]
    assert [beside_published.setting_of(r) for r in paper] == ["paper", "paper", "paper"]
    md, _ = beside_published.today_table(paper)
    assert md.count("| GCL (paper) |") == 3
    # with no preset run of OnPro, nothing is paired against the variant
    _, text = beside_published.today_table([r for r in runs if r.variant != "onpro"])
    assert all(r["onpro_minus_mean"] == "" for r in rows_of(text))


def test_memory_figure_sets_the_papers_bars_beside_ours():
    from gcl_tf.benchmark import plots

    b = "split_cifar10"
    runs = [run(b, "er", s, acc, 70.0, 250) for s, acc in enumerate((25.0, 26.0))]
    runs += [run(b, "gcl", s, acc, 35.0, 250, "convnet", 64) for s, acc in enumerate((48.0, 50.0))]
    runs += [run(b, "er-memory500", 0, 30.0, 60.0, 500)]
    figure = plots.memory_figure(runs, "acc")
    ax = figure.axes[0]
    bars = {container.get_label(): [patch.get_height() for patch in container.patches] for container in ax.containers
            if container.get_label() and not container.get_label().startswith("_")}
    assert bars["ER"][0] == pytest.approx(25.5) and bars["GCL"][0] == pytest.approx(49.0)
    assert bars["ER (paper)"] == [29.94, 36.08] and bars["GCL (paper)"] == [49.62, 53.87]
    assert math.isnan(bars["GCL"][1])  # no GCL run at 500: no bar of ours
    figure.canvas.draw()  # the legend sits below the axes, over no bar, and inside the figure
    legend, frame = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert legend.y1 <= frame.y0 and legend.y0 >= 0 and [t.get_text() for t in ax.get_legend().get_texts()] == \
        ["ER", "ER (paper)", "GCL", "GCL (paper)"]
    other = [run("tiny", "er", 0, 30.0, 60.0, 20), run("tiny", "er-memory40", 0, 35.0, 55.0, 40)]
    labels = [c.get_label() for c in plots.memory_figure(other, "acc").axes[0].containers]
    assert not any("paper" in str(label) for label in labels)  # a benchmark the paper did not plot


def test_protocol_gain_pairs_the_two_protocols_runs_by_seed(tmp_path):
    import json

    from helpers import load_script

    script = load_script("docs", "results", "split_cifar10_ocl", "protocol_gain.py")

    def write(suite, benchmark, variant, seed, acc, memory):
        folder = tmp_path / suite / layout.RUNS / benchmark / variant / f"seed{seed}"
        folder.mkdir(parents=True)
        config = {"method": {"name": variant.split("-")[0], "memory_size": memory}}
        (folder / layout.RESULTS).write_text(json.dumps({"acc": acc, "fgt": 1.0, "config": config}))

    for seed, acc in enumerate((34.0, 31.0, 33.0)):
        write("paper", "split_cifar10", "er-memory500", seed, acc, 500)
    write("paper", "split_cifar10", "er", 3, 25.0, 250)  # the paper's main run: memory 250, not paired
    write("today", "split_cifar10_ocl", "er", 0, 52.0, 500)
    write("today", "split_cifar10_ocl", "er", 3, 53.0, 500)
    write("today", "split_cifar10_ocl", "er", 2, 50.0, 500)
    write("today", "split_cifar10_ocl", "er-memory200", 0, 45.0, 200)
    out = tmp_path / "gain.json"
    assert script.main(["--paper", str(tmp_path / "paper"), "--today", str(tmp_path / "today"),
                        "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    assert {int(s): row["gain"] for s, row in result["seeds"].items()} == {0: 18.0, 2: 17.0}
    assert result["gain_mean"] == pytest.approx(17.5) and result["gain_se"] == pytest.approx(0.5)
    assert result["n"] == 2 and result["paper"]["n"] == 3 and result["today"]["n"] == 3
    assert result["paper"]["mean"] == pytest.approx(98 / 3)


def test_today_figure_draws_ours_by_memory_size_with_the_published_points_beside():
    """today_memory.png's data (today_figure.today_series) and what the figure draws of it: a line
    per method and setting over memory sizes (mean, std error bars where n > 1), a variant its own
    series, a run on another trunk named by its folder left out, the published points hollow."""
    from matplotlib.colors import to_hex

    from gcl_tf.benchmark import plots, today_figure
    from gcl_tf.benchmark.styles import method_styles

    b = "split_cifar10_ocl"
    runs = [run(b, "er", s, acc, 30.0, 500) for s, acc in enumerate((50.0, 52.0, 54.0))]
    runs += [run(b, "er-memory200", 0, 45.0, 40.0, 200), run(b, "er-memory1000", 0, 55.0, 30.0, 1000)]
    runs += [run(b, "er-convnet", 0, 53.0, 37.0, 500, "convnet", 64)]  # the backbone study: not in the figure
    runs += [run(b, "gcl-paper", s, acc, 11.0, 500, "convnet", 64) for s, acc in enumerate((55.0, 51.0))]
    runs += [run(b, "gcl-paper-memory200", 0, 40.0, 3.0, 200, "convnet", 64)]
    runs += [run(b, "gcl-paper-resnet18", 0, 10.0, 50.0, 500)]  # a trunk named: left out
    runs += [run(b, "onpro-rotations4", 0, 59.0, 17.0, 500)]
    runs += [run("split_cifar10", "er", 0, 25.0, 70.0, 250)]  # another protocol: not in this figure
    data = today_figure.today_series(runs)
    assert list(data) == [b]
    ours = {s["label"]: s for s in data[b] if not s["published"]}
    assert set(ours) == {"ER", "GCL (paper), convnet 64", "OnPro (rotations4)"}
    er = ours["ER"]
    assert er["sizes"] == [200, 500, 1000] and er["n"] == [1, 3, 1]
    assert er["mean"] == pytest.approx([45.0, 52.0, 55.0])
    assert math.isnan(er["std"][0]) and er["std"][1] == pytest.approx(2.0) and math.isnan(er["std"][2])
    gcl = ours["GCL (paper), convnet 64"]
    assert gcl["name"] == "gcl-paper" and gcl["sizes"] == [200, 500] and gcl["mean"] == pytest.approx([40.0, 53.0])
    assert gcl["std"][1] == pytest.approx(8 ** 0.5)
    pub = {s["method"]: s for s in data[b] if s["published"]}
    assert set(pub) == set(published.PUBLISHED_TODAY[b])
    assert dict(zip(pub["er"]["sizes"], pub["er"]["mean"])) == {200: 45.72, 500: 52.08, 1000: 65.59}  # PDFK
    assert dict(zip(pub["onpro"]["sizes"], pub["onpro"]["mean"])) == {200: 65.5, 500: 72.6}
    assert pub["onpro"]["label"] == "OnPro (published)"

    figure = plots.today_memory_figure(runs)
    ax = figure.axes[0]
    drawn = {c.get_label(): c for c in ax.containers}  # ours: errorbar containers
    line, caps, (bars,) = drawn["ER (n = 1, 3, 1)"]
    assert list(line.get_ydata()) == pytest.approx([45.0, 52.0, 55.0])
    assert np.diff(bars.get_segments()[1], axis=0)[0][1] == pytest.approx(4.0)  # 52 ± 2
    assert [np.diff(seg, axis=0)[0][1] for seg in bars.get_segments()][::2] == [0.0, 0.0]  # n = 1: no bar
    hollow = {h.get_label(): h for h in ax.get_lines() if h.get_label().endswith("(published)")}
    styles = method_styles({s["name"] for s in data[b]})
    for method, series in pub.items():
        h = hollow[series["label"]]
        assert h.get_markerfacecolor() == "none" and to_hex(h.get_markeredgecolor()) == to_hex(styles[method][0])
        assert list(h.get_ydata()) == series["mean"]
    assert to_hex(line.get_color()) == to_hex(hollow["ER (published)"].get_markeredgecolor())
    assert plots.today_memory_figure([run("split_cifar10", "er", 0, 25.0, 70.0, 250)]) is None
