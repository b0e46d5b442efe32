"""Redraw every table and figure of a suite from its saved results:
``python -m gcl_tf.benchmark plots DIR``.

Reads only ``DIR/runs/*/*/seed*/results.json`` and ``artifacts.npz`` (no training) and writes
``DIR/tables/`` (Markdown + CSV), ``DIR/figures/*.png`` (matplotlib, Agg) and ``DIR/README.md``
(an index of both with the commands that produced the runs). Figures:
- ``accuracy_tasks_<benchmark>.png``: accuracy after each task, averaged over the tasks seen so
  far, one line per method (mean over seeds, band +- std);
- ``memory_acc.png``, ``memory_fgt.png``: ER vs GCL over memory sizes, bars with std error bars;
- ``today_memory.png``: today's protocol, ACC over memory size per method, the published points
  beside ours (:mod:`gcl_tf.benchmark.today_figure`);
- ``graph_lambda_<benchmark>.png``: GCL's ACC and FGT over graph_lambda (the paper's figure of
  λ_G), mean with std error bars, a symmetric-log axis so that 0 has its place;
- ``context_graph_<benchmark>.png``: GCL's learned context graph at the end of training, rows and
  columns sorted by label;
- ``tsne_<benchmark>.png``: t-SNE of penultimate image embeddings (and class embeddings from the
  last layer's weights), Finetune vs GCL, coloured by class;
- ``timing_<benchmark>.png``: training and testing time per sample for each method.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict

import numpy as np
from matplotlib.figure import Figure

from gcl_tf.benchmark import layout, published, roles, study_tables, tables
from gcl_tf.benchmark.layout import benchmark_label, method_label, method_sort_key
from gcl_tf.benchmark.styles import method_styles
from gcl_tf.benchmark.today_figure import today_memory_figure
from gcl_tf.errors import UserError, exit_on_user_error
from gcl_tf.io import read_json, write_atomic
from gcl_tf.run_plots import figure_png, new_figure, save_figure  # noqa: F401 (the figures' helpers, re-exported)


# ----------------------------------------------------------------------------- accuracy vs tasks
def accuracy_tasks_figure(runs, benchmark: str, styles=None) -> Figure | None:
    """Accuracy after task i averaged over tasks 1..i, one line per method (mean, band +- std);
    ``styles``: :func:`method_styles` (of the suite's methods; None: of this figure's)."""
    curves = defaultdict(list)
    for run in runs:
        if run.benchmark == benchmark and run.is_main:
            curves[run.variant].append(layout.seen_task_accuracy(run.results["accuracy_matrix"]))
    if not curves:
        return None
    figure = new_figure(6.0, 4.0)
    ax = figure.add_subplot()
    styles = styles or method_styles(curves)
    for method in sorted(curves, key=method_sort_key):
        values = np.stack(curves[method])  # [seeds, T]
        x = np.arange(1, values.shape[1] + 1)
        mean = values.mean(axis=0)
        std = values.std(axis=0, ddof=1) if len(values) > 1 else np.zeros_like(mean)
        color, shape = styles[method]
        ax.plot(x, mean, marker=shape, markersize=4, color=color, label=f"{method_label(method)} (n={len(values)})")
        ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.2, linewidth=0)
    ax.set_xlabel("Number of tasks seen")
    ax.set_ylabel("Average accuracy on the tasks seen (%)")
    ax.set_title(benchmark_label(benchmark))
    ax.set_xticks(x if len(x) <= 20 else x[::2])
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return figure


# ----------------------------------------------------------------------------- memory study
def memory_figure(runs, metric: str, styles=None) -> Figure | None:
    """The memory study's methods across memory sizes: one panel per benchmark, bars with std error bars; the
    paper's bars beside ours (hatched) where its memory figures have the benchmark."""
    summary = study_tables.memory_summary(runs)
    if not summary:
        return None
    benchmarks = sorted(summary)
    figure = new_figure(4.5 * len(benchmarks), 3.6)
    axes = figure.subplots(1, len(benchmarks), squeeze=False)[0]
    for ax, b in zip(axes, benchmarks):
        stats = summary[b]
        sizes = sorted({s for (_, s) in stats})
        methods = sorted({m for (m, _) in stats}, key=method_sort_key)
        colour = {m: (styles or method_styles(methods))[m][0] for m in methods}
        bars = [(m, False) for m in methods]
        bars += [(m, True) for m in methods if b in published.PAPER_MEMORY and m in published.PAPER_MEMORY[b]]
        width = 0.8 / len(bars)
        x = np.arange(len(sizes))
        for i, (m, paper) in enumerate(sorted(bars, key=lambda bar: (method_sort_key(bar[0]), bar[1]))):
            cells = [published.paper_memory(b, m, s, metric) if paper else stats.get((m, s), {}).get(metric)
                     for s in sizes]
            mean = [np.nan if c is None else c[0] for c in cells]
            std = np.nan_to_num(np.asarray([np.nan if c is None else c[1] for c in cells], float))
            ax.bar(x + (i - (len(bars) - 1) / 2) * width, mean, width, yerr=std, capsize=3, color=colour[m],
                   edgecolor="black", alpha=0.45 if paper else 1.0, hatch="//" if paper else None,
                   label=method_label(m) + (" (paper)" if paper else ""))
        ax.set_xticks(x, [str(s) for s in sizes])
        ax.set_xlabel("Memory size")
        ax.set_ylabel("Average accuracy (%)" if metric == "acc" else "Average forgetting (%)")
        ax.set_title(benchmark_label(b))
        ax.grid(True, axis="y", alpha=0.3)
        # below the axes: over them it hid a bar wherever every corner had one
        ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=min(len(bars), 3),
                  frameon=False)
    return figure


# ----------------------------------------------------------------------------- graph_lambda study
def graph_lambda_figure(runs, benchmark: str) -> Figure | None:
    """The lead method's (GCL's) ACC and FGT over graph_lambda on ``benchmark``: two panels, mean with std error bars
    over the seeds, the preset's value marked (None without a graph_lambda-study run)."""
    stats = study_tables.graph_lambda_summary(runs).get(benchmark)
    if not stats:
        return None
    lambdas = sorted(stats)
    positive = [lam for lam in lambdas if lam > 0]
    figure = new_figure(9.0, 3.6)
    for ax, (key, label) in zip(figure.subplots(1, 2), (("acc", "Average accuracy (%)"),
                                                         ("fgt", "Average forgetting (%)"))):
        mean = np.array([stats[lam][key][0] for lam in lambdas])
        std = np.nan_to_num(np.array([stats[lam][key][1] for lam in lambdas], float))
        ax.errorbar(lambdas, mean, yerr=std, marker="o", capsize=3, color="black")
        for lam in lambdas:
            if stats[lam]["variant"] == roles.LEAD:
                ax.plot([lam], [stats[lam][key][0]], marker="*", markersize=14, color="tab:red", linestyle="none",
                        label="preset")
        if positive:
            ax.set_xscale("symlog", linthresh=min(positive))
        ax.set_xticks(lambdas, [f"{lam:g}" for lam in lambdas])
        ax.set_xlabel("λ_G (method.graph_lambda)")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        if any(stats[lam]["variant"] == roles.LEAD for lam in lambdas):
            ax.legend(fontsize="small")
    figure.suptitle(f"{benchmark_label(benchmark)}: graph regularisation (n = "
                    f"{', '.join(str(stats[lam]['acc'][2]) for lam in lambdas)})")
    return figure


# ----------------------------------------------------------------------------- context graph
def sort_by_label(graph, labels):
    """Rows and columns of ``graph`` [C, C] in the (stable) order of ``labels`` [C]; sorted labels."""
    graph, labels = np.asarray(graph, dtype=float), np.asarray(labels)
    order = np.argsort(labels, kind="stable")
    return graph[order][:, order], labels[order]


def context_graph_figure(graph, labels, title: str = "Context graph", class_names=None) -> Figure:
    """The context graph as a heat map, rows and columns sorted by label (stable), class blocks marked."""
    sorted_graph, sorted_labels = sort_by_label(graph, labels)
    figure = new_figure(6.0, 5.2)
    ax = figure.add_subplot()
    off_diagonal = sorted_graph[~np.eye(len(sorted_graph), dtype=bool)]
    vmax = float(off_diagonal.max()) if off_diagonal.size and off_diagonal.max() > 0 else 1.0
    image = ax.imshow(sorted_graph, cmap="viridis", vmin=0.0, vmax=vmax, interpolation="nearest")
    figure.colorbar(image, ax=ax, label="edge probability sigmoid(E)")
    classes, starts = np.unique(sorted_labels, return_index=True)
    ends = np.append(starts[1:], len(sorted_labels))
    for start in starts[1:]:
        ax.axhline(start - 0.5, color="white", linewidth=0.5)
        ax.axvline(start - 0.5, color="white", linewidth=0.5)
    if len(classes) <= 20:
        centers = (starts + ends - 1) / 2
        names = [str(class_names[c]) if class_names is not None else str(c) for c in classes]
        ax.set_xticks(centers, names, fontsize="small")
        ax.set_yticks(centers, names, fontsize="small")
    ax.set_xlabel("context label")
    ax.set_ylabel("context label")
    ax.set_title(title)
    return figure


# ----------------------------------------------------------------------------- t-SNE
def tsne_coordinates(embeddings, class_embeddings=None, seed: int = 0) -> np.ndarray:
    """2-D t-SNE of the image embeddings followed by the class embeddings (rescaled to the
    images' mean norm, so both live on one scale)."""
    from sklearn.manifold import TSNE
    from threadpoolctl import threadpool_limits

    points = np.asarray(embeddings, dtype=np.float64)
    if class_embeddings is not None:
        classes = np.asarray(class_embeddings, dtype=np.float64)
        scale = np.linalg.norm(points, axis=1).mean() / max(np.linalg.norm(classes, axis=1).mean(), 1e-12)
        points = np.concatenate([points, classes * scale])
    perplexity = float(min(30.0, max(2.0, (len(points) - 1) / 3.0)))
    tsne = TSNE(n_components=2, init="pca", perplexity=perplexity, random_state=seed)
    # One thread: on a shared, busy machine OpenMP threads slowed it down instead of speeding it up.
    with threadpool_limits(1):
        return tsne.fit_transform(points)


def tsne_figure(panels, title: str = "") -> Figure | None:
    """``panels``: [(method, artifacts dict)]; one t-SNE panel each, points coloured by class."""
    panels = [(m, a) for m, a in panels if a is not None and "embeddings" in a]
    if not panels:
        return None
    figure = new_figure(5.0 * len(panels), 4.8)
    axes = figure.subplots(1, len(panels), squeeze=False)[0]
    for ax, (method, artifacts) in zip(axes, panels):
        labels = artifacts["embedding_labels"]
        class_embeddings = artifacts.get("class_embeddings")
        coords = tsne_coordinates(artifacts["embeddings"], class_embeddings)
        n = len(labels)
        num_classes = int(max(labels.max() + 1, 0 if class_embeddings is None else len(class_embeddings)))
        cmap = "tab10" if num_classes <= 10 else ("tab20" if num_classes <= 20 else "turbo")
        scatter = ax.scatter(coords[:n, 0], coords[:n, 1], c=labels, cmap=cmap, vmin=-0.5,
                             vmax=num_classes - 0.5, s=6, alpha=0.7, linewidths=0)
        if class_embeddings is not None:
            ks = np.arange(len(class_embeddings))
            ax.scatter(coords[n:, 0], coords[n:, 1], c=ks, cmap=cmap, vmin=-0.5, vmax=num_classes - 0.5,
                       s=160, edgecolors="black", linewidths=1.0)
        ax.set_title(method_label(method))
        ax.set_xticks([])
        ax.set_yticks([])
    if num_classes <= 20:
        figure.colorbar(scatter, ax=list(axes), ticks=range(num_classes), label="class")
    if title:
        figure.suptitle(title)
    return figure


# ----------------------------------------------------------------------------- timing
def timing_figure(summary: dict, benchmark: str, styles=None) -> Figure | None:
    """Training and testing time per sample (ms) for each method, bars with std error bars."""
    methods = sorted((m for (b, m) in summary if b == benchmark), key=method_sort_key)
    if not methods:
        return None
    styles = styles or method_styles(methods)
    figure = new_figure(max(6.0, 1.3 * len(methods) * 2), 3.6)
    axes = figure.subplots(1, 2)
    for ax, key, label in ((axes[0], "train_ms", "Training time per sample (ms)"),
                           (axes[1], "test_ms", "Testing time per sample (ms)")):
        means = [summary[(benchmark, m)][key][0] for m in methods]
        stds = np.nan_to_num([summary[(benchmark, m)][key][1] for m in methods])
        ax.bar(range(len(methods)), means, yerr=stds, capsize=3, edgecolor="black",
               color=[styles[m][0] for m in methods])
        ax.set_xticks(range(len(methods)), [method_label(m) for m in methods])
        ax.set_ylabel(label)
        ax.grid(True, axis="y", alpha=0.3)
    figure.suptitle(f"{benchmark_label(benchmark)}: training and testing time")
    return figure


# ----------------------------------------------------------------------------- everything
def _first_with_artifacts(runs, benchmark: str, method: str):
    for run in sorted((r for r in runs if r.benchmark == benchmark and r.variant == method), key=lambda r: r.seed):
        artifacts = run.artifacts()
        if artifacts is not None:
            return run, artifacts
    return None, None


def draw_figures(output: str, runs) -> list[str]:
    folder = os.path.join(output, layout.FIGURES)
    written = []
    benchmarks = sorted({r.benchmark for r in runs})
    summary = tables.main_summary(runs)
    styles = method_styles({r.variant for r in runs} | {r.method for r in runs})  # alike in every figure
    for b in benchmarks:
        figure = accuracy_tasks_figure(runs, b, styles)
        if figure is not None:
            written.append(save_figure(figure, os.path.join(folder, f"accuracy_tasks_{b}.png")))
        run, artifacts = _first_with_artifacts(runs, b, roles.LEAD)
        if artifacts is not None and "context_graph" in artifacts:
            title = f"{benchmark_label(b)}: {method_label(roles.LEAD)} context graph (seed {run.seed})"
            figure = context_graph_figure(artifacts["context_graph"], artifacts["memory_labels"], title)
            written.append(save_figure(figure, os.path.join(folder, f"context_graph_{b}.png")))
        panels = [(m, _first_with_artifacts(runs, b, m)[1]) for m in roles.TSNE_METHODS]
        figure = tsne_figure(panels, f"{benchmark_label(b)}: t-SNE of penultimate embeddings")
        if figure is not None:
            written.append(save_figure(figure, os.path.join(folder, f"tsne_{b}.png")))
        figure = timing_figure(summary, b, styles)
        if figure is not None:
            written.append(save_figure(figure, os.path.join(folder, f"timing_{b}.png")))
        figure = graph_lambda_figure(runs, b)
        if figure is not None:
            written.append(save_figure(figure, os.path.join(folder, f"graph_lambda_{b}.png")))
    for metric in ("acc", "fgt"):
        figure = memory_figure(runs, metric, styles)
        if figure is not None:
            written.append(save_figure(figure, os.path.join(folder, f"memory_{metric}.png")))
    figure = today_memory_figure(runs, styles)
    if figure is not None:
        written.append(save_figure(figure, os.path.join(folder, "today_memory.png")))
    return written


def write_index(output: str, table_paths, figure_paths) -> str:
    """DIR/README.md: the commands that produced the runs, every table, links to every figure."""
    lines = ["# Results", ""]
    suite = os.path.join(output, layout.SUITE)
    if os.path.isfile(suite):
        invocations = read_json(suite).get("invocations", [])
        if invocations:
            lines += ["Produced by:", "", "```"]
            lines += [f"{inv['command']}    # {inv['started_at']}" for inv in invocations]
            lines += ["```", ""]
    lines += ["Redraw the tables and figures from the saved results (no training):", "",
              "```", f"python -m gcl_tf.benchmark plots {output}", "```", ""]
    for path in table_paths:
        if path.endswith(".md"):
            with open(path, encoding="utf-8") as handle:
                lines += [handle.read().rstrip(), "",
                          f"(CSV: [{os.path.basename(path)[:-3]}.csv]"
                          f"({layout.TABLES}/{os.path.basename(path)[:-3]}.csv))", ""]
    if figure_paths:
        lines += ["## Figures", ""]
        for path in figure_paths:
            name = os.path.basename(path)
            lines += [f"![{name}]({layout.FIGURES}/{name})", ""]
    index = os.path.join(output, "README.md")
    write_atomic(index, "\n".join(lines))
    return index


def redraw(output: str, verbose: bool = True) -> list[str]:
    """Every table and figure of ``output`` from its saved results; returns the files written."""
    runs = layout.collect(output)
    if not runs:
        raise UserError(f"{output!r} holds no finished run "
                        f"({layout.RUNS}/<benchmark>/<variant>/seed<k>/{layout.RESULTS})")
    table_paths = tables.write_tables(output, runs)
    figure_paths = draw_figures(output, runs)
    index = write_index(output, table_paths, figure_paths)
    if verbose:
        print(f"{len(runs)} finished runs -> {len(table_paths)} table files in {os.path.join(output, layout.TABLES)}, "
              f"{len(figure_paths)} figures in {os.path.join(output, layout.FIGURES)}, index {index}", flush=True)
    return table_paths + figure_paths + [index]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gcl_tf.benchmark plots",
                                     description="Redraw every table and figure of a suite from its saved results "
                                                 "(no training).")
    parser.add_argument("output", metavar="DIR",
                        help="the suite's output folder (python -m gcl_tf.benchmark paper --output DIR), or a run's "
                             "folder (its plots.png)")
    return parser


@exit_on_user_error
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if os.path.isfile(os.path.join(args.output, layout.RESULTS)):  # a run's folder: its own picture
        from gcl_tf.run_plots import task_table, write_run_plots

        print(f"{task_table(read_json(os.path.join(args.output, layout.RESULTS)))}\n-> {write_run_plots(args.output)}")
        return 0
    redraw(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
