"""The studies' tables from saved results (the paper's Table 3, the memory sizes, the trunks,
graph_lambda): Markdown and CSV, cells as :mod:`gcl_tf.benchmark.cells` writes them."""
from __future__ import annotations

from collections import defaultdict

from gcl_tf import machine
from gcl_tf.benchmark import layout, roles
from gcl_tf.benchmark.cells import METRICS, change_vs_full, csv_text, fmt, fmt_change, markdown, num
from gcl_tf.benchmark.layout import benchmark_label, mean_std, method_label, method_sort_key


# ----------------------------------------------------------------------------- ablation
def ablation_runs(runs) -> dict:
    """{benchmark: {variant: [runs]}} for the benchmarks with an ablation variant of the lead method."""
    by_bench = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if run.variant in layout.ABLATION_VARIANTS:
            by_bench[run.benchmark][run.variant].append(run)
    return {b: dict(v) for b, v in by_bench.items() if any(k != roles.LEAD for k in v)}


def components(config: dict) -> dict:
    """Which of GCL's components a run's config keeps (the rows of the paper's ablation table)."""
    method = config.get("method", {})
    stochastic = bool(method.get("stochastic_graphs", True))
    return {
        "Graph regularization": float(method.get("graph_lambda", 0)) > 0,
        "Multiple graph samples": stochastic and int(method.get("test_graph_samples", 1)) > 1,
        "Random G & A": stochastic,
        "Deterministic G & A": not stochastic,
    }


def ablation_table(runs) -> tuple[str, str]:
    """The paper's Table 3 per benchmark, and each variant's change against the full lead method
    (GCL) paired by seed (mean difference ± its standard error): whether removing a component
    moves the result by more than the seeds' spread."""
    md_parts, csv_rows, lead = [], [], roles.LEAD
    for b, variants in sorted(ablation_runs(runs).items()):
        order = [v for v in layout.ABLATION_VARIANTS if v in variants]
        comps = {v: components(variants[v][0].config) for v in order}
        stats = {v: {k: mean_std(r.results[k] for r in variants[v]) for k in ("acc", "fgt")} for v in order}
        full_n = max(s["acc"][2] for s in stats.values())
        labels = {name: label for name, label, _ in layout.ABLATIONS}
        header = ["", *[f"{labels[v]} (`{v}`)" for v in order]]
        rows = [[name] + ["✓" if comps[v][name] else "×" for v in order] for name in next(iter(comps.values()))]
        rows.append(["Average accuracy (%)"] + [fmt(*stats[v]["acc"], full_n=full_n) for v in order])
        rows.append(["Average forgetting (%)"] + [fmt(*stats[v]["fgt"], full_n=full_n) for v in order])
        full = variants.get(lead, [])
        changes = {v: {k: change_vs_full(full, variants[v], k) for k in ("acc", "fgt")} for v in order}
        if full:
            for key, name in (("acc", "accuracy"), ("fgt", "forgetting")):
                rows.append([f"Change in {name} vs full {method_label(lead)}, paired by seed"]
                            + ["" if v == lead else fmt_change(*changes[v][key]) for v in order])
        md_parts.append(f"**Ablation study on {benchmark_label(b)}** (mean ± std over {full_n} seed(s); each "
                        "column removes one more component).\n\n" + markdown(header, rows))
        for v in order:
            c = comps[v]
            csv_rows.append([b, v, *[int(c[name]) for name in c], stats[v]["acc"][2],
                             num(stats[v]["acc"][0]), num(stats[v]["acc"][1]),
                             num(stats[v]["fgt"][0]), num(stats[v]["fgt"][1]),
                             changes[v]["acc"][2] if v != lead else "",
                             *[num(changes[v][k][i]) if v != lead else "" for k in ("acc", "fgt") for i in (0, 1)]])
    header = ["benchmark", "variant", "graph_regularization", "multiple_graph_samples", "random_graphs",
              "deterministic_graphs", "seeds", "acc_mean", "acc_std", "fgt_mean", "fgt_std",
              "paired_seeds", "acc_change_mean", "acc_change_se", "fgt_change_mean", "fgt_change_se"]
    return "\n".join(md_parts), csv_text(header, csv_rows)


# ----------------------------------------------------------------------------- memory study
def memory_runs(runs) -> dict:
    """{benchmark: {(method, memory_size): [runs]}} for the benchmarks with a memory-study run;
    the main runs of the memory study's methods (the paper's two, and any other with a memory-size
    run on that benchmark: ``--memory-methods``) count at their preset's memory size."""
    studied = defaultdict(set)  # {benchmark: methods with a run at a memory size not their preset's}
    for r in runs:
        if r.memory_size is not None and r.variant == layout.memory_variant(r.method, r.memory_size):
            studied[r.benchmark].add(r.method)
    out = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if run.benchmark not in studied or not (run.method in roles.MEMORY_METHODS
                                                or run.method in studied[run.benchmark]):
            continue
        if run.is_main or run.variant == layout.memory_variant(run.method, run.memory_size):
            out[run.benchmark][(run.method, int(run.memory_size))].append(run)
    return {b: dict(v) for b, v in out.items()}


def memory_summary(runs) -> dict:
    """{benchmark: {(method, size): {"acc": (mean, std, n), "fgt": ..., "train_seconds": ...}}}."""
    return {b: {key: {k: mean_std(r.results.get(k) for r in group) for k in ("acc", "fgt", "train_seconds")}
                for key, group in groups.items()}
            for b, groups in memory_runs(runs).items()}


def memory_table(runs) -> tuple[str, str]:
    md_parts, csv_rows = [], []
    machines = {b: [r.results.get("machine") for group in groups.values() for r in group]
                for b, groups in memory_runs(runs).items()}
    for b, stats in sorted(memory_summary(runs).items()):
        sizes = sorted({size for (_, size) in stats})
        methods = sorted({m for (m, _) in stats}, key=method_sort_key)
        full_n = max(s["acc"][2] for s in stats.values())
        for key, label in METRICS:
            rows = [[method_label(m)] + [fmt(*stats[(m, s)][key], full_n=full_n) if (m, s) in stats else "-"
                                         for s in sizes] for m in methods]
            md_parts.append(f"**Memory size on {benchmark_label(b)}: {label}** (mean ± std over {full_n} seed(s)).\n\n"
                            + markdown(["Method"] + [str(s) for s in sizes], rows))
        minutes = [[method_label(m)] + [fmt_minutes(*stats[(m, s)]["train_seconds"], full_n) if (m, s) in stats
                                        else "-" for s in sizes] for m in methods]
        where = machine.mixed(machines[b])
        where = f"; the runs' machines: {where} (times of different machines do not compare)" if where else ""
        md_parts.append(f"**Memory size on {benchmark_label(b)}: training time** (minutes a run, evaluation excluded, "
                        f"mean ± std; under a load that varied: only large ratios mean anything{where}).\n\n"
                        + markdown(["Method"] + [str(s) for s in sizes], minutes))
        for (m, s) in sorted(stats, key=lambda k: (method_sort_key(k[0]), k[1])):
            st = stats[(m, s)]
            csv_rows.append([b, m, s, st["acc"][2], num(st["acc"][0]), num(st["acc"][1]),
                             num(st["fgt"][0]), num(st["fgt"][1]), num(st["train_seconds"][0]),
                             num(st["train_seconds"][1])])
    header = ["benchmark", "method", "memory_size", "seeds", "acc_mean", "acc_std", "fgt_mean", "fgt_std",
              "train_seconds_mean", "train_seconds_std"]
    return "\n".join(md_parts), csv_text(header, csv_rows)


def fmt_minutes(mean: float, std: float, n: int, full_n: int) -> str:
    """Seconds as minutes in a memory table's cell, as ``fmt`` writes a cell."""
    return fmt(mean / 60, std / 60, n, full_n)


# ----------------------------------------------------------------------------- backbone study
def backbone_runs(runs) -> dict:
    """{benchmark: {(method, trunk): [runs]}} on the benchmarks with a backbone-study run
    (``<method>-<trunk>``), for the methods with one and for the lead method (GCL, each row is
    compared with it): those runs, and the methods' main runs under the trunk of their preset
    (``layout.trunk_of``; a preset on another trunk is left out)."""
    variants = {layout.backbone_variant(r.method, t): t for r in runs for t in layout.BACKBONES}
    studied = {(r.benchmark, r.method) for r in runs if r.variant in variants}
    studied |= {(b, roles.LEAD) for b, _ in studied}
    out = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if (run.benchmark, run.method) not in studied:
            continue
        trunk = layout.trunk_of(run.config.get("model", {})) if run.is_main else variants.get(run.variant)
        if trunk is not None:
            out[run.benchmark][(run.method, trunk)].append(run)
    return {b: dict(v) for b, v in out.items()}


def backbone_table(runs) -> tuple[str, str]:
    """Methods x trunks on each benchmark of the backbone study: ACC and FGT, mean ± std (n), and
    on each trunk the lead method's (GCL's) ACC lead over the method, paired by seed (mean
    difference ± its standard error over the seeds both ran on that trunk)."""
    md_parts, csv_rows, lead = [], [], roles.LEAD
    for b, groups in sorted(backbone_runs(runs).items()):
        name = method_label(lead)
        stats = {key: {k: mean_std(r.results[k] for r in group) for k in ("acc", "fgt")}
                 for key, group in groups.items()}
        leads = {(m, t): change_vs_full(group, groups[(lead, t)], "acc")
                 for (m, t), group in groups.items() if m != lead and (lead, t) in groups}
        trunks = [t for t in layout.BACKBONES if any(key[1] == t for key in groups)]
        methods = sorted({m for (m, _) in groups}, key=method_sort_key)
        header = (["Method"] + [f"{layout.BACKBONES[t][0]} {label}" for t in trunks for _, label in METRICS]
                  + [f"{name} − method, {layout.BACKBONES[t][0]} ACC (paired by seed)" for t in trunks])
        rows = []
        for m in methods:
            cells = [fmt(*stats[(m, t)][k], show_n=True) if (m, t) in stats else "-"
                     for t in trunks for k, _ in METRICS]
            ahead = ["" if m == lead else fmt_change(*leads[(m, t)]) if (m, t) in leads else "-" for t in trunks]
            own = [t for t in trunks if (m, t) in groups and groups[(m, t)][0].is_main]
            rows.append([method_label(m), *cells, *ahead, layout.BACKBONES[own[0]][0] if own else "-"])
        keys = "; ".join(f"{layout.BACKBONES[t][0]}: " + ", ".join(layout.backbone_overrides(t)) for t in trunks)
        md_parts.append(f"**Backbones on {benchmark_label(b)}** (%, mean ± sample std over the seeds (n)): each "
                        f"method's preset with only the trunk replaced ({keys}); on the preset's trunk, its main "
                        f"run. {name}'s lead: its ACC minus the method's on the same trunk, the mean of the per-seed "
                        f"differences ± its standard error (`-`: {name} or the method not run on that trunk).\n\n"
                        + markdown(header + ["Preset's trunk"], rows))
        for (m, t) in sorted(groups, key=lambda k: (method_sort_key(k[0]), list(layout.BACKBONES).index(k[1]))):
            st = stats[(m, t)]
            ahead = leads.get((m, t), (float("nan"), float("nan"), 0))
            csv_rows.append([b, m, t, groups[(m, t)][0].variant, st["acc"][2], num(st["acc"][0]), num(st["acc"][1]),
                             num(st["fgt"][0]), num(st["fgt"][1]), ahead[2] or "", num(ahead[0]), num(ahead[1])])
    header = ["benchmark", "method", "backbone", "variant", "seeds", "acc_mean", "acc_std", "fgt_mean", "fgt_std",
              f"{lead}_lead_seeds", f"{lead}_lead_mean", f"{lead}_lead_se"]
    return "\n".join(md_parts), csv_text(header, csv_rows)


# ----------------------------------------------------------------------------- graph_lambda study
def graph_lambda_runs(runs) -> dict:
    """{benchmark: {graph_lambda: [runs]}} on the benchmarks with a graph_lambda-study run
    (``<lead>-graph_lambda<value>``): those runs, the lead method's main runs (the preset's value)
    and the ablation's no-regularisation runs (0): every run of it whose only change is graph_lambda."""
    def value(run):
        return float(run.config.get("method", {}).get("graph_lambda", float("nan")))

    studied = {r.benchmark for r in runs if r.variant == layout.graph_lambda_variant(value(r))}
    out = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if run.benchmark in studied and run.method == roles.LEAD and run.variant in (
                roles.LEAD, roles.NO_GRAPH_REG, layout.graph_lambda_variant(value(run))):
            out[run.benchmark][value(run)].append(run)
    return {b: dict(v) for b, v in out.items()}


def graph_lambda_summary(runs) -> dict:
    """{benchmark: {graph_lambda: {"acc": (mean, std, n), "fgt": ..., "learning_accuracy": ...,
    "variant": folder}}} (learning accuracy: each task's accuracy right after it was learned,
    averaged; what a strong regulariser costs shows there)."""
    return {b: {lam: {**{k: mean_std(r.results.get(k) for r in group) for k in ("acc", "fgt", "learning_accuracy")},
                      "variant": group[0].variant}
                for lam, group in groups.items()}
            for b, groups in graph_lambda_runs(runs).items()}


def graph_lambda_table(runs) -> tuple[str, str]:
    """The lead method's ACC, FGT and learning accuracy at each graph_lambda (the paper's figure of λ_G as a
    table), and each value's change against the preset's (the main run's), paired by seed."""
    md_parts, csv_rows = [], []
    summary = graph_lambda_summary(runs)
    for b, groups in sorted(graph_lambda_runs(runs).items()):
        preset = next((lam for lam, stats in summary[b].items() if stats["variant"] == roles.LEAD), None)
        header = ["λ_G (`method.graph_lambda`)", "Run", "ACC (↑)", "FGT (↓)", "Learning accuracy (↑)"]
        if preset is not None:
            header += [f"Change in ACC vs λ_G {preset:g}, paired by seed", f"Change in FGT vs λ_G {preset:g}"]
        rows = []
        for lam in sorted(groups):
            group, stats = groups[lam], summary[b][lam]
            changes = {k: change_vs_full(groups[preset], group, k) if preset is not None and lam != preset
                       else (float("nan"), float("nan"), 0) for k in ("acc", "fgt")}
            row = [f"{lam:g}" + (" (preset)" if lam == preset else ""), f"`{group[0].variant}`",
                   *[fmt(*stats[k], show_n=True) for k in ("acc", "fgt", "learning_accuracy")]]
            if preset is not None:
                row += ["" if lam == preset else fmt_change(*changes[k]) for k in ("acc", "fgt")]
            rows.append(row)
            csv_rows.append([b, repr(lam), group[0].variant, stats["acc"][2], num(stats["acc"][0]),
                             num(stats["acc"][1]), num(stats["fgt"][0]), num(stats["fgt"][1]),
                             changes["acc"][2] or "", *[num(changes[k][i]) for k in ("acc", "fgt") for i in (0, 1)],
                             num(stats["learning_accuracy"][0]), num(stats["learning_accuracy"][1])])
        md_parts.append(f"**Graph regularisation on {benchmark_label(b)}** (%, mean ± sample std over the seeds (n)): "
                        f"{method_label(roles.LEAD)}'s preset with only λ_G changed; the preset's value is the main "
                        "run, 0 the ablation's "
                        "no-regularisation run. Learning accuracy: each task's accuracy right after it was learned, "
                        "averaged (what regularisation costs in learning new tasks).\n\n" + markdown(header, rows))
    header = ["benchmark", "graph_lambda", "variant", "seeds", "acc_mean", "acc_std", "fgt_mean", "fgt_std",
              "paired_seeds", "acc_change_mean", "acc_change_se", "fgt_change_mean", "fgt_change_se",
              "learning_accuracy_mean", "learning_accuracy_std"]
    return "\n".join(md_parts), csv_text(header, csv_rows)
