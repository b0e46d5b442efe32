"""Today's protocol as one figure (``today_memory.png``): ACC (%) against memory size, one line
per method of ours (mean over seeds with std error bars where n > 1), the published re-runs'
points beside them as hollow markers of their method's colour.

The figure draws :func:`today_series`; a variant run by hand (``gcl-paper``, ``gcl-paper-memory200``,
``onpro-rotations4``: beside_published.setting_of) is a series of its own ("GCL (paper)"), and a
run whose folder names a trunk (the backbone study's ``er-convnet``, ``er-resnet18_64``,
``gcl-paper-resnet18``) is left out: one memory size on another trunk, in tables/today.md.
"""
from __future__ import annotations

import math
import re
from collections import defaultdict

import numpy as np
from matplotlib.figure import Figure

from gcl_tf.benchmark import layout, published
from gcl_tf.benchmark.beside_published import setting_of
from gcl_tf.benchmark.layout import benchmark_label, mean_std, method_label, method_sort_key
from gcl_tf.benchmark.styles import method_styles
from gcl_tf.run_plots import new_figure

_TRUNK = re.compile(rf"(?:{'|'.join(map(re.escape, layout.BACKBONES))})(?:_\d+)?")

def names_trunk(run) -> bool:
    """Whether a run's folder names a trunk (a backbone-study run: ``er-convnet``, ``gcl-paper-resnet18``)."""
    return any(_TRUNK.fullmatch(part) for part in run.variant.split("-")[1:])


def published_points(benchmark: str, method: str) -> dict[int, float]:
    """``{memory_size: ACC}`` of a method's published re-runs under today's protocol (one number a
    memory size, published.PUBLISHED_TODAY)."""
    return {size: low for size, (low, _, _) in sorted(published.PUBLISHED_TODAY.get(benchmark, {})
                                                      .get(method, {}).items())}


def today_series(runs) -> dict[str, list[dict]]:
    """``{benchmark: [series]}`` for each benchmark of today's protocol with a run: ours first, one
    series per method, setting and trunk (``{"name", "label", "method", "setting", "trunk",
    "published": False, "sizes", "mean", "std", "n"}``, std NaN where n is 1), then one per method
    with published points (``{"name", "label", "method", "published": True, "sizes", "mean"}``).
    A trunk other than the benchmark's most common one is named in the label."""
    groups = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if run.benchmark in published.PUBLISHED_TODAY and run.memory_size is not None and not names_trunk(run):
            model = run.config.get("model", {})
            trunk = f"{model.get('backbone')} {model.get('filters')}"
            groups[run.benchmark][(run.method, setting_of(run), trunk)].append(run)
    out = {}
    for b, by_series in sorted(groups.items()):
        trunks = defaultdict(int)
        for (_, _, trunk), group in by_series.items():
            trunks[trunk] += len(group)
        common = max(sorted(trunks), key=trunks.get)
        series = []
        for method, setting, trunk in sorted(by_series, key=lambda k: (method_sort_key(k[0]), k[1], k[2])):
            by_size = defaultdict(list)
            for run in by_series[method, setting, trunk]:
                by_size[int(run.memory_size)].append(run.results["acc"])
            stats = [mean_std(by_size[s]) for s in sorted(by_size)]
            label = method_label(method) + (f" ({setting})" if setting else "") + ("" if trunk == common
                                                                                   else f", {trunk}")
            series.append({"name": f"{method}-{setting}" if setting else method, "label": label, "method": method,
                           "setting": setting, "trunk": trunk, "published": False, "sizes": sorted(by_size),
                           "mean": [m for m, _, _ in stats], "std": [s if n > 1 else math.nan for _, s, n in stats],
                           "n": [n for _, _, n in stats]})
        for method in sorted(published.PUBLISHED_TODAY[b], key=method_sort_key):
            points = published_points(b, method)
            series.append({"name": method, "label": f"{method_label(method)} (published)", "method": method,
                           "published": True, "sizes": list(points), "mean": list(points.values())})
        out[b] = series
    return out


def today_memory_figure(runs, styles=None) -> Figure | None:
    """:func:`today_series` drawn, one panel per benchmark of today's protocol: ours as lines with
    markers and std error bars, the published points hollow in their method's colour (a variant
    has a colour of its own); a log memory axis, the series set a little apart along it."""
    data = today_series(runs)
    if not data:
        return None
    names = {s["name"] for series in data.values() for s in series}
    if styles is None or not names <= set(styles):
        styles = method_styles(names)
    figure = new_figure(8.0 * len(data), 4.8)
    axes = figure.subplots(1, len(data), squeeze=False)[0]
    for ax, (b, series) in zip(axes, data.items()):
        beside = sorted(series, key=lambda s: (method_sort_key(s["method"]), s["published"]))  # each published
        shift = {id(s): 1.025 ** (i - (len(series) - 1) / 2) for i, s in enumerate(beside)}  # right of its own
        handles = []
        for s in series:
            colour, marker = styles[s["name"]]
            x = np.asarray(s["sizes"], float) * shift[id(s)]
            if s["published"]:
                handles += ax.plot(x, s["mean"], linestyle="none", marker=marker, markersize=8, markerfacecolor="none",
                                   markeredgecolor=colour, markeredgewidth=1.5, label=s["label"])
                continue
            counts = ", ".join(map(str, s["n"]))
            handles.append(ax.errorbar(x, s["mean"], yerr=np.nan_to_num(np.asarray(s["std"], float)), marker=marker,
                                       color=colour, capsize=3, markersize=6, label=f"{s['label']} (n = {counts})"))
        sizes = sorted({size for s in series for size in s["sizes"]})
        ax.set_xscale("log")
        ax.set_xticks(sizes, [str(size) for size in sizes])
        ax.minorticks_off()
        ax.set_xlabel("Memory size")
        ax.set_ylabel("ACC (%)")
        ax.set_title(benchmark_label(b))
        ax.grid(True, alpha=0.3)
        ax.legend(handles=handles, fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False,
                  title="ours: mean ± std over n seeds\nhollow: published", title_fontsize="small")
    return figure
