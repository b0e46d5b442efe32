"""One run's results to look at (issue 71): ``DIR/plots.png``, its accuracy matrix as a heatmap
beside each task's accuracy over the stream, and :func:`task_table`, each task's accuracy just
after learning it, at the end, and what it forgot. A run writes both when it finishes
(gcl_tf/task_loop.py); ``python -m gcl_tf.benchmark plots DIR`` draws them again for a run's folder.

``R[i][j]`` is the accuracy (%) on task j after learning task i (gcl_tf/metrics.py): ACC is the
mean of R's last row, FGT the mean over the earlier tasks of their best accuracy before the end
less their accuracy at the end, BWT the mean of R[T][j] - R[j][j] (docs/configuration.md).
"""
from __future__ import annotations

import io
import os

import numpy as np

from gcl_tf.io import read_json, write_atomic
from gcl_tf.run_layout import PLOTS, RESULTS

ANNOTATED = 12  # tasks up to which each cell of the heatmap shows its number


def new_figure(width: float, height: float):
    """A matplotlib figure drawn off-screen (Agg), its layout constrained (every figure of gcl_tf)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def figure_png(figure, dpi: int = 120) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def save_figure(figure, path: str) -> str:
    write_atomic(path, figure_png(figure))
    return path


def _matrix(results: dict) -> np.ndarray:
    return np.asarray(results["accuracy_matrix"], dtype=float)


def run_figure(results: dict):
    """The figure of one run: R as a heatmap (rows: after task i; columns: task j) and each task's
    accuracy from when it is learned to the end of the stream."""
    R = _matrix(results)
    T = len(R)
    figure = new_figure(10.5, 4.2)
    heat, lines = figure.subplots(1, 2)
    image = heat.imshow(R, cmap="viridis", vmin=0.0, vmax=100.0, interpolation="nearest")
    if T <= ANNOTATED:
        for i in range(T):
            for j in range(T):
                if not np.isnan(R[i, j]):
                    heat.text(j, i, f"{R[i, j]:.0f}", ha="center", va="center", fontsize=8,
                              color="white" if R[i, j] < 60 else "black")
    ticks = range(0, T, max(1, T // ANNOTATED))
    heat.set_xticks(list(ticks), [str(t + 1) for t in ticks])
    heat.set_yticks(list(ticks), [str(t + 1) for t in ticks])
    heat.set_xlabel("task evaluated")
    heat.set_ylabel("after learning task")
    heat.set_title("Accuracy matrix (%)")
    figure.colorbar(image, ax=heat, fraction=0.046)
    for j in range(T):
        lines.plot(np.arange(j, T) + 1, R[j:, j], marker="o", markersize=3, label=f"task {j + 1}")
    lines.set_xticks(list(range(1, T + 1, max(1, T // ANNOTATED))))
    lines.set_xlabel("tasks learned")
    lines.set_ylabel("accuracy (%)")
    lines.set_ylim(0, 100)
    lines.set_title(f"Each task over the stream (ACC {results['acc']:.2f}, FGT {results['fgt']:.2f})")
    if T <= ANNOTATED:
        lines.legend(fontsize=7, ncols=2)
    figure.suptitle(f"{results.get('method', '')} on {results.get('benchmark', '')}, seed {results.get('seed', '')}")
    return figure


def write_run_plots(run_dir: str, results: dict | None = None) -> str:
    """Write ``run_dir/plots.png`` from the run's results (read from its results.json when not
    given); returns its path."""
    results = read_json(os.path.join(run_dir, RESULTS)) if results is None else results
    return save_figure(run_figure(results), os.path.join(run_dir, PLOTS))


def task_table(results: dict) -> str:
    """Each task's accuracy just after learning it, at the end and its forgetting, a line each."""
    R = _matrix(results)
    T = len(R)
    lines = ["task  learned  at end  forgot"]
    for j in range(T):
        forgot_text = f"{np.max(R[:T - 1, j]) - R[T - 1, j]:6.2f}" if j < T - 1 else "     -"  # as FGT's
        lines.append(f"{j + 1:>4}  {R[j, j]:7.2f}  {R[T - 1, j]:6.2f}  {forgot_text}")
    return "\n".join(lines)
